"""Install after CUDA is already in use (issue 8's case, on the simulator):
memory the driver handed out before the hooks went in must still answer
right.  Device memory lies in CUDA-reserved ranges that install marks
UNKNOWN (then verified with the driver); pinned host memory looks like any
other host memory, so once the driver was initialised before install the
hooks cannot vouch for "not in the cache means HOST" and memory_type asks
the driver (status().coverage_complete says so)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hooks_testing import MODES, mode_env

CHILD = r"""
import ctypes, json, os, sys
import memhook, memhook.sim
memhook.sim.activate()
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
pinned = ctypes.c_void_p(); assert cu.cuMemAllocHost_v2(ctypes.byref(pinned), ctypes.c_size_t(1 << 20)) == 0
device = ctypes.c_uint64(); assert cu.cuMemAlloc_v2(ctypes.byref(device), ctypes.c_size_t(1 << 20)) == 0
plain = ctypes.create_string_buffer(4096)
report = memhook.install(sys.argv[1])
out = {"complete": report.coverage_complete,
       "pinned": memhook.memory_type(pinned.value, 1 << 20).name,
       "device": memhook.memory_type(device.value, 1 << 20).name,
       "plain": memhook.memory_type(ctypes.addressof(plain), 4096).name}
fresh = ctypes.c_void_p(); assert cu.cuMemAllocHost_v2(ctypes.byref(fresh), ctypes.c_size_t(4096)) == 0
out["fresh"] = memhook.memory_type(fresh.value, 4096).name
assert cu.cuMemFreeHost(pinned) == 0
out["pinned_after_free"] = memhook.memory_type(pinned.value).name
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", MODES)
def test_memory_from_before_install_answers_right(native, mode: str) -> None:
    env = mode_env(native, mode)
    arg = "bistro" if mode == "bistro-far" else mode
    proc = subprocess.run([sys.executable, "-c", CHILD, arg], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"complete": False, "pinned": "CUDA_HOST", "device": "CUDA", "plain": "HOST",
                   "fresh": "CUDA_HOST", "pinned_after_free": "HOST"}
