/*
 * sim_control.h - private declarations shared by the control half of the
 * simulated driver (state.c, device.c, device_attributes.c, context.c,
 * stream.c, module.c, procaddress.c).  The memory half does not need it.
 */
#ifndef MEMHOOK_SIM_CONTROL_H
#define MEMHOOK_SIM_CONTROL_H

#include "sim_internal.h"

/* Context teardown (context.c calls these holding sim_lock, before
 * sim_mem_free_ctx_locked): unload the context's modules and its instances
 * of library globals (module.c); destroy its streams (stream.c). */
SIM_HIDDEN void sim_module_drop_ctx_locked(sim_ctx *ctx);
SIM_HIDDEN void sim_stream_drop_ctx_locked(sim_ctx *ctx);

/* The H200 attribute table (device_attributes.c).  False for a value that
 * is not a CUdevice_attribute. */
SIM_HIDDEN bool sim_device_attribute(int attr, int ordinal, int *value);

/* Per-device identity, shared by cuDeviceGetPCIBusId and the PCI_BUS_ID
 * attribute: device N sits on bus N (the recorded H200 was on bus 0). */
static inline int sim_pci_bus(int ordinal) { return ordinal; }

/* The device ordinal is valid for this process's configuration. */
static inline bool sim_device_valid(CUdevice dev)
{
    return dev >= 0 && dev < sim_cfg()->device_count;
}

#endif /* MEMHOOK_SIM_CONTROL_H */
