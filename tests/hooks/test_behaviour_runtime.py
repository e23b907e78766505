"""The simulated runtime, shared (libcudart.so.13 through ctypes) and static
(a library linked with libcudart_static.a, its runtime symbols hidden, as an
extension built with -lcudart_static), in every hook mode: one event per
runtime call, never two - named after the runtime function where reloc sees
the call (the shared runtime in a mode with reloc), else after the driver
entry point the runtime reaches (the static runtime, or bistro alone) - with
sizes, types (a __managed__ variable's address is CUDA_MANAGED) and devices
right, memory_type() right while allocated and HOST after the free, no event
for a free of NULL, and one failed ALLOC for a failed allocation."""

from __future__ import annotations

import pytest
from hooks_testing import MODES

CASES = (
    "install", "coverage", "cudaMalloc", "cudaMallocManaged", "cudaMallocPitch",
    "cudaMallocHost", "cudaHostAlloc", "cudaHostRegister", "cudaMallocAsync",
    "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync", "cudaMallocFromPoolAsync_ptsz",
    "cudaGetSymbolAddress", "cudaGetSymbolAddress (managed)",
)


@pytest.fixture
def runtime_outcome(scenario, hook_fixtures):
    return lambda mode, kind: scenario("runtime_api.py", mode, kind,
                                       str(hook_fixtures.static_runtime))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["shared", "static"])
@pytest.mark.parametrize("mode", MODES)
def test_runtime_api(runtime_outcome, mode: str, kind: str, case: str) -> None:
    runtime_outcome(mode, kind).check(case)


@pytest.mark.parametrize("kind", ["shared", "static"])
@pytest.mark.parametrize("mode", MODES)
def test_runtime_scenario_ran_every_case(runtime_outcome, mode: str, kind: str) -> None:
    outcome = runtime_outcome(mode, kind)
    outcome.check_all_clean()
    assert sorted(outcome.cases) == sorted(CASES), outcome.output()
