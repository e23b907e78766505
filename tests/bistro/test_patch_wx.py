"""GOTCHA: on a host that forbids writable+executable code bistro fails
cleanly per function with the errno -- no crash, nothing half-written, no
W+X page left behind.  The host is real: fixtures/wx_driver.c installs a
seccomp-BPF filter (mprotect with PROT_EXEC and mmap with PROT_WRITE|
PROT_EXEC -> EACCES) before asking bistro to patch four functions."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("mode", ["memfd", "nomemfd"])
def test_wx_host_refuses_cleanly(native, build_driver, mode):
    exe = build_driver("wx_driver")
    proc = native.run([str(exe)] + (["nomemfd"] if mode == "nomemfd" else []), timeout=60)
    print(proc.stdout)
    out = proc.stdout
    assert "filter: mmap(RWX) -> Permission denied, mprotect(RWX) -> Permission denied" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("fx_")]
    assert len(lines) == 4
    for ln in lines:
        assert "rc=13 (Permission denied)" in ln
        assert "bytes_unchanged=1" in ln
        assert "bistro: cannot patch" in ln and "bytes:" in ln
    assert "failures=0 wx_mappings=0" in out
