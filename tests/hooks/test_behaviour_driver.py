"""Every hooked driver entry point of the simulator, in every hook mode
(issue 5, "Tests"): allocations of 64 B, 1 MiB and 256 MiB freed in
allocation order and in reverse give exactly one ALLOC and one FREE each,
with the function's name, the size (pitch x height for pitched, the global's
size for globals, the exporter's allocation size for IPC, the range for a
VMM map), the DESIGN section 3 memory type (a VMM map: where its handle's
memory lives) and the device; memory_type() answers right while
allocated and HOST after the free; a free of NULL gives no event; a failed
allocation gives one ALLOC with the error and address 0, and caches
nothing.  One child process per mode (scripts/driver_api.py, which opens
IPC handles in a grandchild, scripts/ipc_child.py); one test per case.
"""

from __future__ import annotations

import pytest
from hooks_testing import MODES, SCRIPTS

CASES = (
    "install", "coverage",
    "cuMemAlloc_v2", "original entry", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocHost_v2",
    "cuMemHostAlloc", "cuMemHostRegister", "cuMemHostRegister_v2", "cuMemMap",
    "cuMemMap (host memory)",
    "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz",
    "cuIpcOpenMemHandle_v2 (exporting process)", "ipc child install",
    "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2",
    # the 32-bit ABI, in a context made by the v1 cuCtxCreate
    "cuMemAlloc", "cuMemAllocPitch", "cuMemAllocHost",
    "cuModuleGetGlobal_v2", "cuModuleGetGlobal", "cuLibraryGetGlobal", "cuLibraryGetManaged",
)


@pytest.fixture
def driver_outcome(scenario):
    return lambda mode: scenario("driver_api.py", mode, str(SCRIPTS / "ipc_child.py"))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_driver_api(driver_outcome, mode: str, case: str) -> None:
    driver_outcome(mode).check(case)


@pytest.mark.parametrize("mode", MODES)
def test_driver_scenario_ran_every_case(driver_outcome, mode: str) -> None:
    outcome = driver_outcome(mode)
    outcome.check_all_clean()
    assert sorted(outcome.cases) == sorted(CASES), outcome.output()
