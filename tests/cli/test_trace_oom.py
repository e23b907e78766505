"""The OOM report of `memhook trace`: tests/cli/scripts/oom_fill.py fills a
32 MiB simulated device from two libraries (cuda-python's driver binding
and ctypes' libffi) and three Python functions, then one request fails with
CUDA_ERROR_OUT_OF_MEMORY.  The summary's OOM section splits what was live
then between them and names the failing request - whether the program
then exits normally, by ``os._exit`` or by SIGKILL right after the failed
call; ``-f jsonl`` gets the same facts as an ``oom`` record, and
``--oom-snapshot`` a memviz pickle of the live set."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
from pathlib import Path

import pytest
from cli_testing import HERE, MiB, memhook, summary_section

PROGRAM = HERE / "scripts" / "oom_fill.py"
LINES = PROGRAM.read_text().splitlines()


def _line(text: str) -> int:
    return 1 + LINES.index(text)


WEIGHTS_LINE = _line("        out.append(check(cu.cuMemAlloc(6 * MiB)))")
ACTIVATIONS_LINE = _line("        assert libcuda.cuMemAlloc_v2(ctypes.byref(ptr), "
                         "ctypes.c_size_t(4 * MiB)) == 0")
GROW_LINE = _line("    return libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(16 * MiB))")
HELD_LINE = _line("    held = weights(), activations()")
# A program call site: the caller's frame, then the allocating one.
WEIGHTS = f"{PROGRAM}:{HELD_LINE} (main) > :{WEIGHTS_LINE} (weights)"
ACTIVATIONS = f"{PROGRAM}:{HELD_LINE} (main) > :{ACTIVATIONS_LINE} (activations)"
BINDING = "cydriver."  # cuda-python's driver binding: cydriver.cpython-3XY-....so
LIVE = 3 * 6 * MiB + 2 * 4 * MiB  # scratch()'s 1 MiB was freed before the failure

ENDINGS = {"exit": 0, "_exit": 3, "kill": 128 + signal.SIGKILL}


def _trace(tmp_path: Path, how: str, *extra: str) -> tuple[int, str]:
    env = dict(os.environ, MEMHOOK_SIM_DEVICE_MEMORY="32M", MEMHOOK_SIM_DEVICES="1")
    out = tmp_path / "trace.txt"
    proc = memhook("trace", "--sim", "--python", "-o", str(out), *extra, "--",
                   sys.executable, str(PROGRAM), how, env=env)
    assert "failed 2" in proc.stdout + proc.stderr, proc.stderr
    return proc.returncode, out.read_text() if out.exists() else proc.stderr


def _oom_section(text: str) -> list[str]:
    title = next(ln for ln in text.splitlines() if ln.startswith("out of memory on "))
    return summary_section(text, title)


def _rows(section: list[str], heading: str) -> dict[str, int]:
    """name -> bytes, of the rows under ``heading`` in the OOM section
    (after its column headings)."""
    start = section.index(heading) + 2
    rows = {}
    for line in section[start:]:
        if line.endswith(":"):
            break
        name, _, rest = line.rpartition("  (")
        rows[name.rsplit(None, 3)[0]] = int(rest.split()[0])
    return rows


@pytest.mark.parametrize("how", list(ENDINGS))
def test_the_summary_splits_what_was_live_and_names_the_request(tmp_path: Path,
                                                                how: str) -> None:
    status, text = _trace(tmp_path, how)
    assert status == ENDINGS[how], text
    section = _oom_section(text)
    request = section[0]
    assert request.startswith("request: cuMemAlloc_v2 of 16 MiB (16777216 bytes): "
                              "CUDA_ERROR_OUT_OF_MEMORY (2); pid "), request
    # The caller is ctypes' libffi: the Python frame that called through it is named.
    assert f"; from {PROGRAM}:{GROW_LINE} in grow via ctypes (libffi.so.8" in request, request
    assert section[1] == "device memory free/total at the failure: not recorded"
    assert section[2] == f"live on cuda:0 then: 26 MiB ({LIVE} bytes) in 5 allocations " \
                         f"of 1 process"
    libraries = _rows(section, "by calling library:")
    binding = next(k for k in libraries if k.startswith(BINDING))
    assert libraries == {binding: 3 * 6 * MiB, "libffi.so.8": 2 * 4 * MiB}
    sites = _rows(section, "by Python call site (--python):")  # (long paths clipped: ...)
    assert len(sites) == 2
    for site, held in ((WEIGHTS, 18 * MiB), (ACTIVATIONS, 8 * MiB)):
        (shown,) = [s for s in sites if site.endswith(s.lstrip("."))]
        assert sites[shown] == held, (site, sites)
    largest = section[section.index("largest live allocations:") + 2:]  # (after the headings)
    sizes = [ln.split("  ")[0] for ln in largest if not ln.startswith("at ")]
    assert sizes == ["6 MiB"] * 3 + ["4 MiB"] * 2
    assert f"at {PROGRAM}:{WEIGHTS_LINE} in weights" in largest


def test_jsonl_has_an_oom_record_after_the_failed_call(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    env = dict(os.environ, MEMHOOK_SIM_DEVICE_MEMORY="32M", MEMHOOK_SIM_DEVICES="1")
    proc = memhook("trace", "--sim", "--python", "-f", "jsonl", "-o", str(out), "--",
                   sys.executable, str(PROGRAM), "kill", env=env)
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()][1:]  # (a header)
    at = next(i for i, r in enumerate(records) if r["kind"] == "oom")
    failed, oom = records[at - 1], records[at]
    assert failed["result"] == 2 and failed["size"] == 16 * MiB
    assert [r["kind"] for r in records].count("oom") == 1
    for key in ("function", "size", "pid", "tid", "ts_ns", "result", "device", "caller",
                "python"):
        assert oom[key] == failed[key], key
    assert oom["error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert oom["device_free"] is None and oom["device_total"] is None
    assert oom["live_bytes"] == LIVE and oom["live_count"] == 5 and oom["processes"] == 1
    libs = {e["library"]: (e["count"], e["bytes"]) for e in oom["by_library"]}
    assert libs.pop("libffi.so.8") == (2, 8 * MiB)
    ((binding, held),) = libs.items()
    assert binding.startswith(BINDING) and held == (3, 18 * MiB)
    assert {e["site"]: (e["count"], e["bytes"]) for e in oom["by_python_site"]} == {
        WEIGHTS: (3, 18 * MiB), ACTIVATIONS: (2, 8 * MiB)}
    assert [a["size"] for a in oom["largest"]] == [6 * MiB] * 3 + [4 * MiB] * 2
    assert all(a["python"][0]["function"] in ("weights", "activations") for a in oom["largest"])
    live = {r["address"] for r in records[:at] if r["kind"] == "alloc" and not r["result"]} - {
        r["address"] for r in records[:at] if r["kind"] == "free"}
    assert {a["address"] for a in oom["largest"]} == live


def test_oom_snapshot_is_a_memviz_pickle_of_the_live_set(tmp_path: Path) -> None:
    snap = tmp_path / "oom.pickle"
    status, text = _trace(tmp_path, "kill", "--oom-snapshot", str(snap))
    assert status == 128 + signal.SIGKILL, text
    with snap.open("rb") as f:
        data = pickle.load(f)
    segments = data["segments"]
    assert sorted(s["total_size"] for s in segments) == [4 * MiB] * 2 + [6 * MiB] * 3
    assert {s["frames"][0]["name"] for s in segments} == {"weights", "activations"}
    assert all(s["blocks"][0]["state"] == "active_allocated" for s in segments)
    (trace,) = data["device_traces"]
    (oom,) = trace
    assert oom["action"] == "oom" and oom["size"] == 16 * MiB
    assert oom["frames"][0]["name"] == "grow"


def test_oom_snapshot_without_an_oom_says_so(tmp_path: Path) -> None:
    snap = tmp_path / "oom.pickle"
    proc = memhook("trace", "--sim", "--oom-snapshot", str(snap), "--", sys.executable,
                   "-c", "pass")
    assert proc.returncode == 0, proc.stderr
    assert not snap.exists()
    assert "no allocation failed for lack of memory" in proc.stdout


def test_oom_snapshot_to_a_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    proc = memhook("trace", "--sim", "--oom-snapshot", str(tmp_path / "no" / "x.pickle"),
                   "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2
    assert "--oom-snapshot" in proc.stderr and "no such directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def _row(kind: int, fn: int, address: int, size: int, ts: int, pid: int, *, device: int = 0,
         result: int = 0) -> tuple:
    return (0, address, size, ts, kind, fn, 1, device, pid, pid, result, 0, None, None, None)


def test_the_ledger_reports_the_device_at_the_failure_across_processes() -> None:
    """The report is made when the failed ALLOC is accounted: the failing
    process's later FREE does not shrink it; another process's allocations
    on that device count if made before the failure, though read after it;
    another device's never.  The first REPORTS_MAX failures get a report,
    later ones are counted; a FREE or a module global that fails with 2 is
    no OOM."""
    from memhook.tracing.ledger import Ledger, Process
    from memhook.tracing.oom import REPORTS_MAX

    ledger = Ledger(["cuMemAlloc_v2", "cuMemFree_v2", "cuModuleGetGlobal", "cudaMalloc"],
                    [False, False, False, True])
    a, b = Process(0, kernel_pid=1), Process(1, kernel_pid=2)
    ledger.process_started(a)
    ledger.process_started(b)
    ledger.add(b, [_row(1, 0, 0x10, 100, 10, 2), _row(1, 0, 0x30, 7, 5, 2, device=1),
                   _row(1, 0, 0x20, 1000, 50, 2)])   # (read before a's failure, made after it)
    failed = _row(1, 3, 0, 5000, 30, 1, result=2)
    ledger.add(a, [_row(1, 0, 0x40, 200, 20, 1), failed, _row(2, 1, 0x40, 200, 40, 1),
                   _row(2, 1, 0x40, 0, 41, 1, result=2), _row(1, 2, 0, 8, 42, 1, result=2)])
    (oom,) = ledger.ooms
    assert (oom.live_bytes, oom.live_count, oom.processes) == (300, 2, 2)
    assert sorted((x.pid, x.address) for x in oom.allocations or ()) == [(1, 0x40), (2, 0x10)]
    record = ledger.oom_json(oom)
    assert record["error"] == "cudaErrorMemoryAllocation" and record["function"] == "cudaMalloc"
    assert ledger.oom_of(failed) is oom and ledger.oom_of(failed) is None  # taken once
    ledger.add(a, [_row(1, 0, 0, 1, 60 + i, 1, result=2) for i in range(REPORTS_MAX + 3)])
    assert len(ledger.ooms) == REPORTS_MAX and ledger.ooms_more == 4
    assert ledger.ooms[1].allocations is None  # only the first keeps its live set
    assert ledger.summary()["oom"]["failures"] == REPORTS_MAX + 4


def test_the_section_escapes_the_program_s_names(tmp_path: Path) -> None:
    """A control character in a file name the report quotes (the request's
    and the allocations' Python frames) is escaped, never sent raw."""
    program = tmp_path / "oom\x1b[2Jfill.py"
    program.write_text(PROGRAM.read_text())
    env = dict(os.environ, MEMHOOK_SIM_DEVICE_MEMORY="32M", MEMHOOK_SIM_DEVICES="1")
    proc = memhook("trace", "--sim", "--python", "--", sys.executable, str(program), "exit",
                   env=env)
    assert proc.returncode == 0, proc.stderr
    section = _oom_section(proc.stdout)
    assert "\x1b" not in "".join(section)
    assert "in grow" in section[0] and "oom\\x1b[2Jfill.py" in section[0]
    assert any("oom\\x1b[2Jfill.py" in ln and "in weights" in ln for ln in section)
