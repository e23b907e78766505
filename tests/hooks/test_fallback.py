"""A versioned name the loaded driver lacks falls back to its older spelling
(DESIGN.md section 3): with a driver that exports cuMemHostRegister but not
cuMemHostRegister_v2, bistro patches the old spelling, status() says why the
_v2 row has no hook of its own, and a call is still one event."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hooks_testing import FIXTURES
from memhook_testing import run_checked

CHILD = r"""
import ctypes, json, os, sys
import memhook
lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_GLOBAL)
assert lib.cuInit(0) == 0
memhook.install(sys.argv[1])
rows = {h.name: h for h in memhook.status().hooks}
seen = []
memhook.subscribe(seen.append)
buf = ctypes.create_string_buffer(8192)
addr = ctypes.addressof(buf)
assert lib.cuMemHostRegister(buf, ctypes.c_size_t(8192), 0) == 0
during = memhook.memory_type(addr, 8192).name
assert lib.cuMemHostUnregister(buf) == 0
memhook.flush()
print(json.dumps({
    "rows": {n: {"present": rows[n].present, "mechanism": int(rows[n].mechanism),
                 "reason": rows[n].reason}
             for n in ("cuMemHostRegister", "cuMemHostRegister_v2")},
    "events": [(e.kind.name, e.function, e.address - addr, e.size, e.mem_type.name)
               for e in seen],
    "during": during,
}))
"""


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fallback-driver")
    run_checked(["cc", "-shared", "-fPIC", "-O0", "-fno-omit-frame-pointer",
                 "-Wl,-soname,libcuda.so.1", str(FIXTURES / "fallback_driver.c"),
                 "-o", str(out / "libcuda.so.1")])
    return out


@pytest.mark.parametrize("mode", ["bistro", "bistro,reloc"])
def test_missing_v2_falls_back_to_the_older_spelling(native, driver_dir: Path,
                                                     mode: str) -> None:
    env = native.env()
    env.pop("MEMHOOK_CUDA_MODE", None)
    env["LD_LIBRARY_PATH"] = str(driver_dir)
    proc = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    base, v2 = out["rows"]["cuMemHostRegister"], out["rows"]["cuMemHostRegister_v2"]
    assert base["present"] and base["mechanism"] & 1  # bistro patched the old spelling
    assert not v2["present"]
    assert "does not export cuMemHostRegister_v2" in v2["reason"]
    assert "older spelling cuMemHostRegister" in v2["reason"]
    assert out["during"] == "CUDA_HOST"
    assert out["events"] == [["ALLOC", "cuMemHostRegister", 0, 8192, "CUDA_HOST"],
                             ["FREE", "cuMemHostUnregister", 0, 8192, "CUDA_HOST"]]
