/*
 * mh_sonames.h - the one place the C core names the libraries it looks for.
 *
 * memhook never links NVIDIA's libraries: it finds the driver at run time by
 * its soname (dlopen with RTLD_NOLOAD to ask whether it is loaded, or a real
 * load where bistro needs its entries).  The soname is the driver's ABI
 * promise, and the simulator (csrc/sim/driver/) takes the same one, so one
 * spelling serves both.
 */
#ifndef MEMHOOK_CORE_SONAMES_H
#define MEMHOOK_CORE_SONAMES_H

/* The CUDA driver. */
#define MH_LIBCUDA_SONAME "libcuda.so.1"

/* CUDA's own libraries by file-name prefix (any version): the code an
 * event's caller walks past (csrc/cuda/caller.c). */
#define MH_LIBCUDA_PREFIX "libcuda.so"
#define MH_LIBCUDART_PREFIX "libcudart.so"

#endif
