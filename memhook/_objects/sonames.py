"""The one place the Python side names the CUDA driver's library, as
csrc/core/mh_sonames.h (``MH_LIBCUDA_SONAME``) does for the C core.

memhook never links the driver: it asks whether one is loaded by this
soname (``dlopen`` with ``RTLD_NOLOAD``), and the simulator takes the same
one, so one spelling serves both.  tests/test_layering.py fails on a second
spelling of it in memhook/.
"""

from __future__ import annotations

__all__ = ["LIBCUDA_SONAME"]

LIBCUDA_SONAME = "libcuda.so.1"
"""The CUDA driver's soname (the real driver's and the simulator's)."""
