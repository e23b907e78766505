"""tools/gpu/ucx_count_shim.c, the LD_PRELOAD counter of tools/gpu/ucx_why.sh,
on the simulator: a module dlopen()ed with RTLD_LOCAL (as UCX loads
libuct_cuda.so) asks what UCX's cuda_copy memory query asks, and the shim
must count each call, the attribute set asked with the memory type
answered, and the entry point handed out by cuGetProcAddress_v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from memhook_testing import HAVE_CC, ROOT

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHIM = ROOT / "tools" / "gpu" / "ucx_count_shim.c"
ROUNDS = 25


def _counts(path: Path) -> dict[str, tuple[int, int]]:
    got: dict[str, tuple[int, int]] = {}
    for line in path.read_text().splitlines():
        label, _pid, name, calls, ns = line.split("\t")
        assert label == "shimtest"
        got[name] = (int(calls), int(ns))
    return got


@pytest.fixture(scope="module")
def report(native, c_test_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    shim = native.compile(SHIM, c_test_dir / "ucx_count_shim.so",
                          extra=["-shared", "-fPIC", "-ldl", "-lpthread"])
    module = native.compile(FIXTURES / "count_shim_client.c", c_test_dir / "count_shim_client.so",
                            extra=["-shared", "-fPIC", f"-L{native.sim_dir}", "-l:libcuda.so.1"])
    main = native.compile(FIXTURES / "count_shim_main.c", c_test_dir / "count_shim_main",
                          extra=["-ldl"])
    out = tmp_path_factory.mktemp("shim") / "counts"
    proc = native.run([str(main), str(module), str(ROUNDS)],
                      env=native.env(LD_PRELOAD=str(shim), UCX_COUNT_OUT=str(out),
                                     UCX_COUNT_LABEL="shimtest"))
    files = list(out.parent.glob("counts.*"))
    assert len(files) == 1, (files, proc.stderr)
    return _counts(files[0])


def test_direct_calls_from_a_local_scope_module_are_counted(report: dict) -> None:
    assert report["cuPointerGetAttributes"][0] == ROUNDS
    assert report["cuCtxPushCurrent_v2"][0] == ROUNDS
    assert report["cuCtxPopCurrent_v2"][0] == ROUNDS
    assert report["cuPointerGetAttributes"][1] > 0


def test_entry_point_from_cuGetProcAddress_is_wrapped(report: dict) -> None:
    assert report["cuGetProcAddress"][0] >= 1
    assert report["cuMemGetAddressRange_v2"][0] == ROUNDS
    assert "gpa_unwrapped" not in report


def test_attribute_set_and_answered_type_are_recorded(report: dict) -> None:
    # MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL, CONTEXT; answered DEVICE (2)
    assert report["gets:2,8,9,1:mt=2:rc=0"][0] == ROUNDS
