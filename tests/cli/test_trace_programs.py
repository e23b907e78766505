"""`memhook trace` end to end: real programs in subprocesses on the simulator.

* a C program linked with the static simulated runtime, in every mode;
* a process tree that forks and execs, with events pending across fork;
* Python programs using cuda-python (the demo workload), including one that
  imports memhook and drains the queue itself;
* CMD's exit status, its output, and the console script.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_testing import HERE, MiB, memhook, read_jsonl, summary_section

STATIC_ALLOC_SIZES = sorted([64, 1 * MiB, 256 * MiB, 4 * MiB, 2 * MiB, 8 * MiB])


@pytest.mark.parametrize("mode", ["bistro", "reloc", "bistro,reloc"])
def test_static_runtime_program_in_every_mode(programs, tmp_path: Path, mode: str) -> None:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-m", mode, "-f", "jsonl", "-o", str(out), "--",
                   str(programs.static_app), "3")
    assert proc.returncode == 3, proc.stderr  # CMD's status passes through
    assert "static_app: done" in proc.stdout
    events = read_jsonl(out)
    ok_allocs = [e for e in events if e["kind"] == "alloc" and e["result"] == 0]
    frees = [e for e in events if e["kind"] == "free"]
    failed = [e for e in events if e["result"] != 0]
    assert sorted(e["size"] for e in ok_allocs) == STATIC_ALLOC_SIZES, events
    assert sorted(e["size"] for e in frees) == sorted([64, 1 * MiB, 256 * MiB, 4 * MiB, 2 * MiB])
    assert [(e["size"], e["result"], e["address"]) for e in failed] == [(1 << 50, 2, 0)]
    assert {e["mem_type"] for e in ok_allocs} == {"CUDA", "CUDA_HOST", "CUDA_MANAGED"}
    # Every FREE matches an earlier ALLOC of the same address.
    live = {}
    for e in events:
        if e["kind"] == "alloc" and e["result"] == 0:
            live[e["address"]] = e["size"]
        elif e["kind"] == "free":
            assert live.pop(e["address"]) == e["size"]
    assert list(live.values()) == [8 * MiB]
    # The summary (stderr for jsonl) names the failure and the leak.
    failed_lines = summary_section(proc.stderr, "failed calls:")
    assert len(failed_lines) == 1 and "CUDA_ERROR_OUT_OF_MEMORY (2)" in failed_lines[0]
    leaks = summary_section(proc.stderr, "allocations never freed:")
    assert len(leaks) == 1 and "1 allocation" in leaks[0] and "(8388608 bytes)" in leaks[0]
    assert f"hooks {mode}" in proc.stderr


def test_mode_none_traces_nothing(programs) -> None:
    proc = memhook("trace", "--sim", "-m", "none", "--", str(programs.static_app))
    assert proc.returncode == 0, proc.stderr
    assert "== memhook trace summary: 0 events from 1 process (mode none)" in proc.stdout
    assert "hooks none" in proc.stdout


def test_fork_and_exec(programs, tmp_path: Path) -> None:
    out = tmp_path / "tree.jsonl"
    # A long poll: the parent's events recorded just before fork() are still
    # in the queue when it forks, and only the parent may send them.
    env = dict(os.environ, MEMHOOK_TRACE_POLL_MS="1000")
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
                   str(programs.fork_exec), env=env)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"fork_exec: parent (\d+), children (\d+) (\d+)", proc.stdout)
    assert match, proc.stdout
    parent, child1, child2 = (int(x) for x in match.groups())
    by_pid = collections.defaultdict(list)
    for e in read_jsonl(out):
        by_pid[e["pid"]].append((e["kind"], e["size"]))
    assert by_pid[parent] == [("alloc", 7 * MiB), ("free", 7 * MiB), ("alloc", 5 * MiB)]
    assert by_pid[child1] == [("alloc", 1 * MiB), ("free", 1 * MiB)]
    assert by_pid[child2] == [("alloc", 3 * MiB), ("free", 3 * MiB)]
    assert set(by_pid) == {parent, child1, child2}
    procs = summary_section(proc.stderr, "processes:")
    assert len(procs) == 4, procs  # parent, fork child, fork child before and after exec
    assert sum("exec'd, forked" in p for p in procs) == 1
    assert any(p.startswith(f"pid {child2}") and " exited; " in p for p in procs)  # exec'd image
    assert any(p.startswith(f"pid {child1}") and "exited, forked" in p for p in procs)
    leaks = summary_section(proc.stderr, "allocations never freed:")
    assert len(leaks) == 1 and "(5242880 bytes)" in leaks[0]


def test_cuda_python_demo_on_simulator() -> None:
    """`memhook demo` traces a cuda-python program (the shipped workload)."""
    proc = memhook("demo", "--sim")
    assert proc.returncode == 0, proc.stderr
    assert "demo workload: done" in proc.stdout
    lines = [ln for ln in proc.stdout.splitlines() if "] alloc " in ln or "] free " in ln]
    assert len(lines) == 14, proc.stdout
    assert any("cuMemAllocAsync" in ln and "32 MiB" in ln for ln in lines)
    assert any("cuMemAllocManaged" in ln and "CUDA_MANAGED" in ln for ln in lines)
    assert any("CUDA_HOST" in ln and "4 MiB" in ln for ln in lines)
    failed = summary_section(proc.stdout, "failed calls:")
    assert len(failed) == 1 and "CUDA_ERROR_OUT_OF_MEMORY" in failed[0]
    peaks = summary_section(proc.stdout, "peak live bytes per device:")
    assert any(p.startswith("cuda:0") and f"({256 * MiB + 1 * MiB + 64} bytes)" in p
               for p in peaks), peaks
    assert any(p.startswith("host (pinned)") and f"({4 * MiB} bytes)" in p for p in peaks)
    leaks = summary_section(proc.stdout, "allocations never freed:")
    assert leaks and "(8388608 bytes)" in leaks[0]


def test_python_program_that_drains_memhook_itself(tmp_path: Path) -> None:
    """A traced program importing memhook drains the same queue: the trace
    still gets every event exactly once (its own copy, in the trace area), and
    Python every event too, one made before memhook was imported included."""
    out = tmp_path / "drains.jsonl"
    script = HERE / "scripts" / "python_drains.py"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
                   sys.executable, str(script), "40")
    assert proc.returncode == 0, proc.stderr
    assert "subscriber saw 40 allocs 40 frees" in proc.stdout
    events = read_jsonl(out)
    assert [e["kind"] for e in events] == ["alloc"] + ["alloc", "free"] * 40 + ["free"]
    assert [e["size"] for e in events[1:-1:2]] == [4096 * (i + 1) for i in range(40)]
    assert events[0]["size"] == events[-1]["size"] == 1 << 20


def test_exit_status_and_output_pass_through() -> None:
    proc = memhook("trace", "--", "sh", "-c", "echo from-cmd; exit 7")
    assert proc.returncode == 7
    assert proc.stdout.startswith("from-cmd\n") or "from-cmd\n" in proc.stdout
    killed = memhook("trace", "--", "sh", "-c", "kill -TERM $$")
    assert killed.returncode == 128 + 15, killed.stderr


def test_console_script_is_the_same_program() -> None:
    script = Path(sys.executable).with_name("memhook")
    if not script.exists():
        pytest.skip("no memhook console script beside this interpreter")
    help_script = subprocess.run([str(script), "trace", "--help"], check=False, capture_output=True,
                                 text=True, timeout=60)
    help_module = memhook("trace", "--help")
    assert help_script.returncode == help_module.returncode == 0
    assert help_script.stdout == help_module.stdout
    proc = subprocess.run([str(script), "trace", "--", "sh", "-c", "exit 4"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4 and "memhook trace summary" in proc.stdout


def test_a_nested_trace_traces_its_command_and_the_outer_one_says_so(programs,
                                                                     tmp_path: Path) -> None:
    """A traced program runs `memhook trace` itself: the inner trace traces
    its command (its output is what that program asked for), and the outer
    trace says where those events went.  Before: the outer trace showed 0
    events of the inner command, and nothing said why."""
    inner, outer = tmp_path / "inner.jsonl", tmp_path / "outer.jsonl"
    proc = memhook("trace", "-f", "jsonl", "-o", str(outer), "--",
                   sys.executable, "-m", "memhook", "trace", "-f", "jsonl", "-o", str(inner),
                   "--", str(programs.event_storm), "500")
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(inner)) == 500
    assert all(e["function"] not in ("cuMemAlloc_v2", "cuMemFree_v2")
               for e in read_jsonl(outer))
    assert "memhook trace: this trace runs inside another `memhook trace`" in proc.stderr
    outer_summary = proc.stderr[proc.stderr.rindex("== memhook trace summary"):]
    notes = [line for line in outer_summary.splitlines() if "runs a nested `memhook trace`" in line]
    assert len(notes) == 1, outer_summary
    assert notes[0].endswith("the events of the command it traces go to that trace, not to "
                             "this one"), notes
