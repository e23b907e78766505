"""An ALLOC's device, and whether the hooks asked the driver for it.

    python alloc_device.py MODE DEVICES

DEVICES is the simulator's device count (MEMHOOK_SIM_DEVICES).

  one device (DEVICES 1)
      every ALLOC that succeeded (device, pinned host, stream-ordered)
      carries device 0, and the hooks asked the driver for the current
      device not once: a process that sees one device has only device 0.
  failed (DEVICES 1)
      a failed allocation still carries what the driver says of the
      current context (asked once for it): a failure may have had none.
  several devices (DEVICES 2)
      ALLOCs made with device 1's context current carry device 1, then
      with device 0's device 0; the hooks asked the driver at each.
"""
from __future__ import annotations

import os
import sys

from hkchild import (Cases, Recorder, byref, c_int, c_uint64, c_void_p, fmt_all, install,
                     load_driver, mode_arg, ok)

import memhook
from memhook import EventKind
from memhook._binding.core import lib

KiB = 1 << 10


def allocs(events: list[memhook.Event]) -> list[memhook.Event]:
    return [e for e in events if e.kind == EventKind.ALLOC]


def context_of(cu, ordinal: int) -> c_void_p:
    dev = c_int()
    ok(cu.cuDeviceGet(byref(dev), ordinal), "cuDeviceGet")
    ctx = c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    return ctx


def some_allocations(cu, n: int) -> int:
    """n rounds of cuMemAlloc_v2, cuMemAllocHost_v2 and cuMemAllocAsync,
    each freed; returns the ALLOCs made."""
    for _ in range(n):
        p = c_uint64()
        assert cu.cuMemAlloc_v2(byref(p), 3 * KiB) == 0
        assert cu.cuMemFree_v2(p.value) == 0
        h = c_void_p()
        assert cu.cuMemAllocHost_v2(byref(h), 5 * KiB) == 0
        assert cu.cuMemFreeHost(h.value) == 0
        q = c_uint64()
        assert cu.cuMemAllocAsync(byref(q), 7 * KiB, None) == 0
        assert cu.cuMemFreeAsync(q.value, None) == 0
    assert cu.cuStreamSynchronize(None) == 0
    return 3 * n


def one_device(cases: Cases, cu) -> None:
    rec = Recorder()
    asked = lib.memhook_testing_device_queries()
    made = some_allocations(cu, 10)
    asked = lib.memhook_testing_device_queries() - asked
    got = allocs(rec.take())
    rec.sub.close()
    cases.check(len(got) == made and all(e.device == 0 and e.result == 0 for e in got),
                f"{made} ALLOCs on device 0 expected: {fmt_all(got)}")
    cases.check(asked == 0, f"the hooks asked the driver for the device {asked} times "
                            f"for {made} ALLOCs in a process that sees one device")


def failed(cases: Cases, cu) -> None:
    rec = Recorder()
    asked = lib.memhook_testing_device_queries()
    p = c_uint64()
    rc = cu.cuMemAlloc_v2(byref(p), 1 << 60)
    asked = lib.memhook_testing_device_queries() - asked
    got = allocs(rec.take())
    rec.sub.close()
    cases.check(rc != 0, "the simulator allocated 2^60 bytes")
    cases.check([(e.result, e.address, e.device) for e in got] == [(rc, 0, 0)],
                f"one failed ALLOC on the current context's device 0: {fmt_all(got)}")
    cases.check(asked == 1, f"a failed ALLOC asked the driver {asked} times (1 expected)")


def several_devices(cases: Cases, cu) -> None:
    rec = Recorder()
    for ordinal in (1, 0):
        ok(cu.cuCtxSetCurrent(context_of(cu, ordinal)), "cuCtxSetCurrent")
        asked = lib.memhook_testing_device_queries()
        made = some_allocations(cu, 3)
        asked = lib.memhook_testing_device_queries() - asked
        got = allocs(rec.take())
        cases.check(len(got) == made and all(e.device == ordinal for e in got),
                    f"{made} ALLOCs on device {ordinal} expected: {fmt_all(got)}")
        cases.check(asked == made, f"{made} ALLOCs on device {ordinal} asked the driver "
                                   f"{asked} times (one each expected)")
    rec.sub.close()


def main() -> int:
    mode = mode_arg()
    devices = int(sys.argv[2])
    os.environ["MEMHOOK_SIM_DEVICES"] = str(devices)  # (read at the simulator's first call)
    cases = Cases()
    cu = load_driver()
    ok(cu.cuInit(0), "cuInit")
    ok(cu.cuCtxSetCurrent(context_of(cu, 0)), "cuCtxSetCurrent")
    install(mode)
    if devices == 1:
        with cases.case("one device"):
            one_device(cases, cu)
        with cases.case("failed"):
            failed(cases, cu)
    else:
        with cases.case("several devices"):
            several_devices(cases, cu)
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
