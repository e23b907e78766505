"""The simulator behaves like the real driver and runtime, fact for fact.

tools/gpu/probe_driver.py and probe_runtime.py were run against libcuda
580.159.04 and libcudart 13.0 on an H200 (tests/data/h200-*-facts.json; the
run is tools/gpu/run_on_gpu.sh).  Here the same probes run against the
simulated libcuda.so.1 and libcudart.so.13 and every fact is compared, except
the few that are deliberately different and listed in ``DELIBERATE`` with
the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "h200-driver-facts.json"
RECORDED_RUNTIME = ROOT / "tests" / "data" / "h200-runtime-facts.json"
PROBE = ROOT / "tools" / "gpu" / "probe_driver.py"
PROBE_RUNTIME = ROOT / "tools" / "gpu" / "probe_runtime.py"

# Facts where the simulator differs on purpose.  Keys are "/"-joined paths into
# the facts document; a trailing "*" matches any key at that level.
DELIBERATE = {
    # The simulator names itself, and its memory size is a knob.
    "device_name": "the simulator names itself so no one mistakes it for a GPU",
    "device_total_mem": "MEMHOOK_SIM_DEVICE_MEMORY sets it (default 16 GiB)",
    # The real driver sub-allocates small allocations inside 2 MiB (or 32 MiB
    # pool) chunks; the simulator maps each allocation on its own pages so a
    # freed allocation really becomes no-access.  So the size and base of the
    # underlying mapping, and the 2 MiB alignment of a fresh chunk, differ.
    "kinds/*/attributes/MAPPING_SIZE/value": "per-allocation page mappings (see above)",
    "globals/*/describe/attributes/MAPPING_SIZE/value": "per-allocation mappings (see above)",
    "globals/*/describe/mapping_base_offset": "per-allocation mappings (see above)",
    "kinds/*/mapping_base_offset": "per-allocation page mappings (see above)",
    "edge/device_alignment_2M": "allocations are page (4 KiB) aligned, not 2 MiB",
    # Device attributes: the values are the recorded H200's, except the
    # memory-dependent ones, which follow MEMHOOK_SIM_DEVICE_MEMORY.
    "device_attributes/*": "compared in test_device_attributes_match_h200",
    # The pool's reservation is placed wherever the allocator puts it.
    "kinds/host_pool_5000/range_start_offset": "depends on pool placement",
}


def _matches(path: str, pattern: str) -> bool:
    parts, pat = path.split("/"), pattern.split("/")
    if len(pat) > len(parts):
        return False
    if pat[-1] == "*" and len(pat) <= len(parts):
        return all(p == "*" or p == q for p, q in zip(pat[:-1], parts))
    return len(pat) == len(parts) and all(p == "*" or p == q for p, q in zip(pat, parts))


def _diff(real: Any, sim: Any, path: str = "") -> list[str]:
    if any(_matches(path, pattern) for pattern in DELIBERATE):
        return []
    if isinstance(real, dict) and isinstance(sim, dict):
        out: list[str] = []
        for key in sorted(set(real) | set(sim)):
            sub = f"{path}/{key}" if path else key
            if key not in sim:
                if not any(_matches(sub, p) for p in DELIBERATE):
                    out.append(f"{sub}: missing in simulator (driver: {real[key]!r})")
            elif key not in real:
                out.append(f"{sub}: not recorded from the driver (simulator: {sim[key]!r})")
            else:
                out.extend(_diff(real[key], sim[key], sub))
        return out
    if real != sim:
        return [f"{path}: driver {real!r}, simulator {sim!r}"]
    return []


@pytest.fixture(scope="module")
def facts(native, tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("probe") / "sim-facts.json"
    env = native.env(MEMHOOK_PROBE_LIBCUDA=str(native.libcuda))
    proc = subprocess.run([sys.executable, str(PROBE), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"probe failed on the simulator:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(RECORDED.read_text()), json.loads(out.read_text())


@pytest.mark.parametrize("section", [
    "top", "errors", "edge", "edge2", "kinds", "globals", "proc_address", "proc_address_v1",
    "legacy_v1", "after_fork",
])
def test_simulator_matches_recorded_driver(facts, section: str) -> None:
    real, sim = facts
    if section == "top":
        keys = [k for k, v in real.items() if not isinstance(v, dict)]
        real = {k: real[k] for k in keys}
        sim = {k: sim.get(k) for k in keys}
    else:
        real, sim = {section: real[section]}, {section: sim.get(section, {})}
    differences = _diff(real, sim)
    assert not differences, "simulator differs from the H200's driver:\n" + "\n".join(differences)


def test_device_attributes_match_h200(facts) -> None:
    real, sim = facts
    differences = []
    for attr, (result, value) in real["device_attributes"].items():
        got = sim["device_attributes"].get(attr)
        if got is None or got[0] != result or (result == 0 and got[1] != value):
            differences.append(f"attribute {attr}: driver {[result, value]}, simulator {got}")
    assert not differences, "\n".join(differences)


@pytest.fixture(scope="module")
def runtime_facts(native, tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("probe-rt") / "sim-runtime-facts.json"
    env = native.env(MEMHOOK_PROBE_LIBCUDART=str(native.sim_dir / "libcudart.so.13"))
    proc = subprocess.run([sys.executable, str(PROBE_RUNTIME), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"runtime probe failed on the simulator:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(RECORDED_RUNTIME.read_text()), json.loads(out.read_text())


@pytest.mark.parametrize("section", ["behaviour", "strings", "kinds"])
def test_simulated_runtime_matches_recorded_runtime(runtime_facts, section: str) -> None:
    real, sim = runtime_facts
    if section == "behaviour":
        real = {k: v for k, v in real.items() if k not in ("strings", "kinds")}
        sim = {k: sim.get(k) for k in real}
    else:
        real, sim = {section: real[section]}, {section: sim.get(section, {})}
    differences = _diff(real, sim)
    assert not differences, "simulated runtime differs from libcudart 13:\n" + "\n".join(differences)
