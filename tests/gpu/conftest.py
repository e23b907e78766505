"""GPU tests: they need a real NVIDIA driver and device, and are skipped
without one.  Run them on the H200 through the device tool:

    python3 -m pytest -q -p no:cacheprovider tests/gpu
"""

from __future__ import annotations

import ctypes

import pytest


def _real_gpu() -> str | None:
    """None when a real driver with a device is usable, else why not."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no libcuda.so.1 on this machine"
    name = ctypes.create_string_buffer(128)
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "libcuda.so.1 is present but has no usable device"
    lib.cuDeviceGetName(name, 128, 0)
    if b"memhook simulator" in name.value:
        return "libcuda.so.1 here is memhook's simulator, not a GPU driver"
    return None


WHY_NOT = _real_gpu()


def pytest_collection_modifyitems(config, items):
    if WHY_NOT is None:
        return
    skip = pytest.mark.skip(reason=f"needs a real GPU: {WHY_NOT}")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
