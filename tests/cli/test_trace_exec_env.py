"""A program that gives its child an environment of its own keeps that
child in the trace (issue 33, item 1): every member of the exec and
posix_spawn family, with an environment that drops LD_PRELOAD and the
trace's socket, replaces LD_PRELOAD with a preload of its own, or is
empty; subprocess with env=, env -i, env LD_PRELOAD=...  And a program the
core cannot follow into (set-user-ID, static with CUDA) is named in the
summary, with status 70.

Before: the child ran untraced - 0 of its events, exit status 0, no word.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_testing import DEGRADED, memhook, read_jsonl, warnings_of

import memhook as memhook_pkg

PAIRS = 25
CORE = memhook_pkg.library_path()


def _run(tmp_path: Path, *cmd: str, env: dict[str, str] | None = None
         ) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--", *cmd, env=env)
    return proc, read_jsonl(out)


def _pairs_lines(stdout: str) -> list[tuple[int, int, str]]:
    """(pid, traced, preload) of each "pairs:" line."""
    return [(int(p), int(t), pre) for p, t, pre in
            re.findall(r"^pairs: pid (\d+) traced (\d) preload (\S+)$", stdout, re.M)]


def _assert_traced(proc: subprocess.CompletedProcess[str], events: list[dict], children: int,
                   own_preload: str | None) -> None:
    assert proc.returncode == 0, proc.stderr
    lines = _pairs_lines(proc.stdout)
    assert len(lines) == children, proc.stderr
    want = CORE if own_preload is None else f"{CORE}:{own_preload}"
    for pid, traced, preload in lines:
        assert (traced, preload) == (1, want), proc.stderr
        mine = [e["kind"] for e in events if e["pid"] == pid]
        assert mine.count("alloc") == PAIRS and mine.count("free") == PAIRS, (pid, proc.stderr)
    assert warnings_of(proc.stderr) == [], proc.stderr


CASES = [
    ("execve", "drop"), ("execve", "replace"), ("execve", "empty"),
    ("execv", "drop"), ("execv", "empty"),
    ("execvp", "replace"), ("execvpe", "drop"), ("execvpe", "empty"),
    ("execl", "drop"), ("execle", "replace"), ("execlp", "empty"),
    ("fexecve", "drop"), ("execveat", "empty"),
    ("posix_spawn", "drop"), ("posix_spawn", "replace"), ("posix_spawnp", "drop"),
    ("posix_spawnp", "empty"),
    ("vfork", "drop"), ("threads", "replace"),
]


@pytest.mark.parametrize("how, env", CASES, ids=[f"{h}-{e}" for h, e in CASES])
def test_the_exec_family_keeps_the_child_traced(programs, tmp_path: Path, how: str,
                                                env: str) -> None:
    """The child gets the core first in LD_PRELOAD (its own preload after
    it) and reports to the same collector: all its events are traced."""
    # The p-forms search PATH (the fixture's folder first) for a bare name;
    # with an empty environment they search glibc's default, so a path.
    prog = str(programs.pairs)
    if how in ("execvp", "execvpe", "execlp", "posix_spawnp") and env != "empty":
        prog = programs.pairs.name
    path_env = dict(os.environ, PATH=f"{programs.pairs.parent}{os.pathsep}{os.environ['PATH']}")
    proc, events = _run(tmp_path, str(programs.spawn_env), how, env, prog, str(PAIRS),
                        env=path_env)
    _assert_traced(proc, events, 20 if how == "threads" else 1,
                   "libm.so.6" if env == "replace" else None)


def test_subprocess_with_an_environment_without_ld_preload(programs, tmp_path: Path) -> None:
    """subprocess.run(env=...) (a vfork + execve in _posixsubprocess)."""
    script = ("import os, subprocess, sys\n"
              "e = dict(os.environ)\n"
              "e.pop('LD_PRELOAD'); e.pop('MEMHOOK_TRACE_SOCKET')\n"
              "subprocess.run([sys.argv[1], sys.argv[2]], env=e, check=True)\n")
    proc, events = _run(tmp_path, sys.executable, "-c", script, str(programs.pairs), str(PAIRS))
    _assert_traced(proc, events, 1, None)


@pytest.mark.parametrize("env_args, own", [(["-i"], None), (["LD_PRELOAD=libm.so.6"], "libm.so.6"),
                                           (["-u", "LD_PRELOAD"], None)],
                         ids=["env-i", "env-LD_PRELOAD", "env-u"])
def test_env_command(programs, tmp_path: Path, env_args: list[str], own: str | None) -> None:
    proc, events = _run(tmp_path, "env", *env_args, str(programs.pairs), str(PAIRS))
    _assert_traced(proc, events, 1, own)


def test_an_environment_of_another_trace_is_left_alone(programs, tmp_path: Path) -> None:
    """A child given another collector's socket (a nested memhook trace
    does that) is that trace's: its environment is not touched."""
    sock = tmp_path / "no-collector"
    proc, events = _run(tmp_path, "env", "-u", "LD_PRELOAD", f"MEMHOOK_TRACE_SOCKET={sock}",
                        str(programs.pairs), str(PAIRS))
    assert proc.returncode == 0, proc.stderr
    assert [(t, p) for _, t, p in _pairs_lines(proc.stdout)] == [(0, "-")], proc.stderr
    assert events == []


# ---- what still escapes: named, and status 70 ----


def _setuid_copy(programs, tmp_path: Path) -> Path:
    """A copy of pairs that runs as uid 65534 (set-user-ID)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a set-user-ID program of another user")
    folder = tmp_path / "suid"
    folder.mkdir()
    folder.chmod(0o755)
    target = folder / "pairs_setuid"
    shutil.copy(programs.pairs, target)
    os.chown(target, 65534, 65534)
    target.chmod(0o4755)
    check = subprocess.run([str(target), "1"], capture_output=True, text=True, check=True,
                           env={"LD_PRELOAD": CORE})
    if "traced 0" not in check.stdout:
        pytest.skip(f"{tmp_path} ignores set-user-ID bits (nosuid)")
    return target


@pytest.mark.parametrize("how", ["execve", "posix_spawn"])
def test_a_setuid_program_is_named_and_the_status_is_70(programs, tmp_path: Path,
                                                         how: str) -> None:
    target = _setuid_copy(programs, tmp_path)
    proc, events = _run(tmp_path, str(programs.spawn_env), how, "drop", str(target),
                        str(PAIRS))
    assert proc.returncode == DEGRADED, proc.stderr
    lines = _pairs_lines(proc.stdout)
    assert [t for _, t, _ in lines] == [0], proc.stderr  # it did run, untraced
    said = warnings_of(proc.stderr)
    verb = "spawned" if how == "posix_spawn" else "exec'd"
    assert len(said) == 1 and re.fullmatch(
        rf"pid \d+ {verb} {re.escape(str(target))}, which is not traced: a set-user-ID or "
        rf"set-group-ID program .*LD_PRELOAD", said[0]), proc.stderr


def test_a_setuid_program_run_by_a_shell(programs, tmp_path: Path) -> None:
    target = _setuid_copy(programs, tmp_path)
    proc, _ = _run(tmp_path, "sh", "-c", f"{target} 3; true")
    assert proc.returncode == DEGRADED, proc.stderr
    assert any(str(target) in w and "set-user-ID" in w for w in warnings_of(proc.stderr)), \
        proc.stderr


@pytest.fixture(scope="module")
def static_programs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """static_cuda.c linked -static twice: naming libcuda, and not."""
    folder = tmp_path_factory.mktemp("static")
    src = Path(__file__).parent / "fixtures" / "static_cuda.c"
    out = []
    for name, extra in (("static_cuda", ["-DNAMES_CUDA"]), ("static_plain", [])):
        target = folder / name
        built = subprocess.run(["cc", "-static", "-O1", *extra, str(src), "-o", str(target)],
                               capture_output=True, text=True, check=False)
        if built.returncode != 0:
            pytest.skip(f"no static C library here: {built.stderr.strip()[:200]}")
        out.append(target)
    return out[0], out[1]


def test_a_static_program_that_names_cuda_is_named_and_the_status_is_70(
        programs, static_programs: tuple[Path, Path], tmp_path: Path) -> None:
    cuda, _ = static_programs
    proc, _ = _run(tmp_path, "sh", "-c", f"{cuda}; {programs.pairs} {PAIRS}")
    assert proc.returncode == DEGRADED, proc.stderr
    assert "static_cuda: ok" in proc.stdout
    said = warnings_of(proc.stderr)
    assert len(said) == 1 and re.fullmatch(
        rf"pid \d+ exec'd {re.escape(str(cuda))}, which is not traced: a statically linked "
        rf"program that names a CUDA library: .*", said[0]), proc.stderr


def test_a_static_program_without_cuda_is_no_loss(programs, static_programs: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    """It can make no CUDA call (ctypes.util.find_library runs the static
    ldconfig in every Python program that looks for a library): nothing
    to miss, nothing said."""
    _, plain = static_programs
    proc, events = _run(tmp_path, "sh", "-c", f"{plain}; {programs.pairs} {PAIRS}")
    assert proc.returncode == 0, proc.stderr
    assert "static_cuda: ok" in proc.stdout
    assert warnings_of(proc.stderr) == [], proc.stderr
    assert len(events) == 2 * PAIRS


def test_cmd_itself_static_with_cuda_is_named(static_programs: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    """CMD is started by memhook, not by a traced process: checked there."""
    cuda, plain = static_programs
    proc, _ = _run(tmp_path, str(cuda))
    assert proc.returncode == DEGRADED, proc.stderr
    said = warnings_of(proc.stderr)
    assert len(said) == 1 and said[0].endswith(
        f"exec'd {cuda}, which is not traced: a statically linked program that names a CUDA "
        f"library: no loader runs for it, so nothing reads LD_PRELOAD"), proc.stderr
    proc, _ = _run(tmp_path, str(plain))
    assert proc.returncode == 0 and warnings_of(proc.stderr) == [], proc.stderr


def test_cmd_itself_setuid_is_named(programs, tmp_path: Path) -> None:
    target = _setuid_copy(programs, tmp_path)
    proc, events = _run(tmp_path, str(target), str(PAIRS))
    assert proc.returncode == DEGRADED, proc.stderr
    assert events == []
    assert any(w.endswith(f"exec'd {target}, which is not traced: a set-user-ID or "
                          f"set-group-ID program (or one with file capabilities): the kernel "
                          f"runs it in secure mode, where the loader ignores LD_PRELOAD")
               for w in warnings_of(proc.stderr)), proc.stderr


def test_a_script_is_its_interpreter(static_programs: tuple[Path, Path], tmp_path: Path) -> None:
    """A "#!" script whose interpreter is a static program with CUDA: the
    interpreter is what runs untraced, and is named."""
    cuda, _ = static_programs
    script = tmp_path / "run-me"
    script.write_text(f"#!{cuda}\n")
    script.chmod(0o755)
    proc, _ = _run(tmp_path, "sh", "-c", f"{script}; true")
    assert proc.returncode == DEGRADED, proc.stderr
    said = warnings_of(proc.stderr)
    assert len(said) == 1 and f"exec'd {cuda}, which is not traced" in said[0], proc.stderr


@pytest.mark.parametrize("how", ["execve", "posix_spawn"])
def test_exec_of_a_fifo_fails_as_it_does_untraced(programs, tmp_path: Path, how: str) -> None:
    """The check of the program opens it: a FIFO there must not block the
    exec (which then fails with EACCES, as untraced)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc, _ = _run(tmp_path, str(programs.spawn_env), how, "drop", str(fifo))
    assert proc.returncode == 127, proc.stderr
    assert "Permission denied" in proc.stderr, proc.stderr


def test_an_environment_too_large_to_mend_is_named(programs, tmp_path: Path) -> None:
    """The mended environment is built on the stack (a vfork child's is its
    parent's), up to 32 KiB: one of 5,000 entries without the trace is
    not mended, and the summary says which program ran untraced."""
    script = ("import os, subprocess, sys\n"
              "e = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}\n"
              "e.update((f'FILLER_{i}', 'x') for i in range(5000))\n"
              "subprocess.run([sys.argv[1], sys.argv[2]], env=e, check=True)\n")
    proc, events = _run(tmp_path, sys.executable, "-c", script, str(programs.pairs), str(PAIRS))
    assert proc.returncode == DEGRADED, proc.stderr
    assert [t for _, t, _ in _pairs_lines(proc.stdout)] == [0], proc.stdout
    said = warnings_of(proc.stderr)
    assert len(said) == 1 and re.fullmatch(
        rf"pid \d+ exec'd {re.escape(str(programs.pairs))}, which is not traced: its "
        rf"environment was too large .*", said[0]), proc.stderr


CUDA_PAIRS = ("from cuda.bindings import driver as cu\n"
              "assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS, 'no driver'\n"
              "_, dev = cu.cuDeviceGet(0)\n"
              "_, ctx = cu.cuDevicePrimaryCtxRetain(dev)\n"
              "cu.cuCtxSetCurrent(ctx)\n"
              "for _ in range(7):\n"
              "    err, p = cu.cuMemAlloc(4096)\n"
              "    assert err == cu.CUresult.CUDA_SUCCESS, err\n"
              "    cu.cuMemFree(p)\n")


def test_env_i_under_sim_runs_on_the_simulator(tmp_path: Path) -> None:
    """--sim puts the simulator's folder first in LD_LIBRARY_PATH; a child
    given no environment gets it back with the trace (before: no driver,
    or the host's), and its own entries stay after it."""
    pytest.importorskip("cuda.bindings")
    proc, events = _run(tmp_path, "env", "-i", "LD_LIBRARY_PATH=/opt/theirs", sys.executable,
                        "-c", CUDA_PAIRS + "import os; print('libpath', "
                        "os.environ['LD_LIBRARY_PATH'])")
    assert proc.returncode == 0, proc.stderr
    assert f"libpath {memhook_pkg.sim.library_dir()}:/opt/theirs\n" in proc.stdout
    assert [e["function"] for e in events] == ["cuMemAlloc_v2", "cuMemFree_v2"] * 7, proc.stderr


def test_a_loop_of_escapes_is_named_32_times_then_counted(static_programs: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    """A traced program that starts the same untraced program 100 times
    (or sends ESCAPE messages of its own) cannot grow the summary without
    bound."""
    cuda, _ = static_programs
    proc, _ = _run(tmp_path, "sh", "-c", f"for i in $(seq 100); do {cuda} >/dev/null; done")
    assert proc.returncode == DEGRADED, proc.stderr
    said = warnings_of(proc.stderr)
    assert len(said) == 33, proc.stderr
    assert said[-1] == ("68 more programs were started that are not traced (not named: only "
                        "the first 32 are)"), proc.stderr
