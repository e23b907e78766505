"""`memhook diff A B`: two runs of one program on the simulator, one of
which leaks 3 allocations from one call site; the diff names that site,
and only that site, as grown - in JSON and in the text table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_testing import memhook
from trace_files_testing import SITES, finished, records, trace_sites

LEAK = 3 * 64 * 1024  # alloc_sites.py's cache(): 3 x 64 KiB kept
CACHE_LINE = 1 + SITES.read_text().splitlines().index(
    "    ptr = check(cu.cuMemAlloc(64 * 1024))")
MAIN_LINE = 1 + SITES.read_text().splitlines().index("        cache(leak)")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("diff")
    a = trace_sites("a.jsonl", cwd=tmp)
    b = trace_sites("b.jsonl", "leak", cwd=tmp)
    finished(a)
    finished(b)
    return tmp / "a.jsonl", tmp / "b.jsonl"


def test_the_leaking_site_alone_has_grown(runs: tuple[Path, Path]) -> None:
    proc = memhook("diff", str(runs[0]), str(runs[1]), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    sites = {r["name"]: r for r in report["sites"]}
    grown = [r for r in report["sites"] if r["status"] != "same"]
    assert len(grown) == 1, json.dumps(report["sites"], indent=1)
    site = grown[0]
    assert site["status"] == "grown"
    # A program call site: main()'s call, then cache()'s allocation.
    assert site["name"] == f"{SITES}:{MAIN_LINE} (main) > :{CACHE_LINE} (cache)", site["name"]
    assert site["change"] == {"allocations": 0, "bytes": 0, "peak_bytes": LEAK - 64 * 1024,
                              "never_freed_bytes": LEAK}
    assert site["a"]["allocations"] == site["b"]["allocations"] == 3
    # The other sites are there, unchanged, with their figures.
    scratch = next(r for n, r in sites.items() if n.endswith("(scratch)"))
    assert scratch["a"] == scratch["b"] == {"allocations": 3, "bytes": 6 << 20,
                                            "peak_bytes": 2 << 20, "never_freed_bytes": 0}
    assert report["sites"][0] == site  # the largest change first
    # By library: the one binding every call went through, grown by the leak.
    (lib,) = report["libraries"]
    assert lib["change"]["never_freed_bytes"] == LEAK and lib["status"] == "grown"


def test_the_text_table_has_headings_and_the_site(runs: tuple[Path, Path]) -> None:
    proc = memhook("diff", str(runs[0]), str(runs[1]))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("by call site"))
    heading = lines[start + 1].split()
    assert heading[:4] == ["status", "allocs", "A", "allocs"] and heading[-1] == "name"
    rows = [ln for ln in lines[start + 2:] if ln.startswith("  grown")]
    assert len(rows) == 1 and rows[0].endswith("(cache)"), proc.stdout
    assert "+192 KiB" in rows[0], rows[0]
    # The reverse diff: the same site, shrunk.
    back = memhook("diff", str(runs[1]), str(runs[0]), "--json")
    changed = [r for r in json.loads(back.stdout)["sites"] if r["status"] != "same"]
    assert [r["status"] for r in changed] == ["shrunk"]


def test_without_python_frames_sites_are_native_callers(tmp_path: Path) -> None:
    a = trace_sites("a.jsonl", cwd=tmp_path, python=False)
    b = trace_sites("b.jsonl", "leak", cwd=tmp_path, python=False)
    finished(a)
    finished(b)
    proc = memhook("diff", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--json")
    assert proc.returncode == 0, proc.stderr
    grown = [r for r in json.loads(proc.stdout)["sites"] if r["status"] != "same"]
    assert len(grown) == 1 and "cydriver" in grown[0]["name"], grown
    assert grown[0]["change"]["never_freed_bytes"] == LEAK


def test_names_from_a_trace_are_printed_escaped(runs: tuple[Path, Path], tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.jsonl"
    lines = []
    for r in records(runs[1]):
        for frame in r.get("python", []):
            frame["file"] = "/home/u/\x1b[2Jevil\nfake line.py"
        lines.append(json.dumps(r))
    hostile.write_text("\n".join(lines) + "\n")
    proc = memhook("diff", str(runs[0]), str(hostile))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\\x1b[2Jevil\\nfake line.py" in proc.stdout


def _on_a_terminal(*args: str) -> tuple[int, bytes]:
    """``memhook ARGS`` with stderr on a pseudo-terminal (stdout piped):
    (status, what the terminal got)."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "memhook", *args], stdout=subprocess.DEVNULL,
                            stderr=slave)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return proc.wait(timeout=60), got


def test_a_progress_bar_on_a_terminal_only(runs: tuple[Path, Path], tmp_path: Path) -> None:
    status, terminal = _on_a_terminal("diff", str(runs[0]), str(runs[1]))
    assert status == 0, terminal
    assert re.search(rb"\rmemhook diff \[[#.]{30}\] +[\d.]+% [\d.]+/[\d.]+ MiB", terminal), \
        terminal
    assert terminal.endswith(b"\r\x1b[K")  # and wiped when done
    status, terminal = _on_a_terminal("merge", str(runs[0]), str(runs[1]), "-o",
                                      str(tmp_path / "m.json"))
    assert status == 0 and b"memhook merge [" in terminal, terminal
    piped = memhook("diff", str(runs[0]), str(runs[1]))
    assert piped.returncode == 0 and piped.stderr == ""
    piped = memhook("merge", str(runs[0]), str(runs[1]), "-o", str(tmp_path / "m.json"))
    assert piped.returncode == 0 and "[" not in piped.stderr.split("\n")[0]


def test_a_reader_that_stops_early_is_not_an_error(runs: tuple[Path, Path]) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "memhook", "diff", str(runs[0]), str(runs[1]),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head -0`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and b"Traceback" not in err, err


def test_the_fast_path_reads_what_the_general_path_reads(runs: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    """Lines as memhook writes them take a fast path; the same records laid
    out otherwise (other spacing) take json's: the events are the same."""
    from memhook.tracing.tracefile import TraceFile

    other = tmp_path / "respaced.jsonl"
    other.write_text("".join(json.dumps(r, separators=(", ", ": ")) + "\n"
                             for r in records(runs[1])))
    fast = [e._replace(line=b"") for e in TraceFile(str(runs[1])).events()]
    general = [e._replace(line=b"") for e in TraceFile(str(other)).events()]
    assert fast == general and len(fast) == 11
    assert any(e.python for e in fast) and all(e.caller for e in fast)
