"""cuda-python's cuda.bindings.driver on the simulator, in every hook mode:
it resolves entry points through dlopen + dlsym + cuGetProcAddress, and
every allocation it makes is one event named after the driver variant it
resolved (cuMemAlloc -> cuMemAlloc_v2), with sizes and types right and
memory_type() right while allocated and HOST after the free.

(cuda.bindings.runtime does not run on the simulator: its statically linked
runtime needs cuGetExportTable, which the simulator does not provide - it
fails with cudaErrorCallRequiresNewerDriver before reaching any hook.)"""

from __future__ import annotations

import pytest
from hooks_testing import MODES

CASES = (
    "install", "coverage", "cuMemAlloc", "cuMemAllocPitch", "cuMemAllocManaged",
    "cuMemAllocHost", "cuMemHostAlloc", "cuMemHostRegister", "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync", "cuModuleGetGlobal",
)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_cuda_python(scenario, mode: str, case: str) -> None:
    scenario("cuda_python.py", mode).check(case)


@pytest.mark.parametrize("mode", MODES)
def test_cuda_python_scenario_ran_every_case(scenario, mode: str) -> None:
    outcome = scenario("cuda_python.py", mode)
    outcome.check_all_clean()
    assert sorted(outcome.cases) == sorted(CASES), outcome.output()
