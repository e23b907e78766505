"""Fixtures of the CLI tests: the C programs they trace, compiled once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cli_testing import HERE
from memhook_testing import NativeBuild, skip_unless_traced_programs_build


@dataclasses.dataclass(frozen=True)
class Programs:
    static_app: Path     # linked with libcudart_static.a; argv[1] = exit status
    fork_exec: Path      # fork, exec, events pending across fork
    event_storm: Path    # argv[1] events through memhook_events_record
    tiny_driver_dir: Path  # holds a libcuda.so.1 bistro must refuse
    handoff_storm: Path  # threads recording FREE then ALLOC of addresses they pass on
    raw_fork: Path       # a child of the raw fork system call that records events
    module_caller: Path  # events called from a dlopened library, or from a moved exe
    module_lib: Path     # the library it loads (lib_record), small
    module_lib_big: Path  # the same lib_record, with a symbol table far past the small's end
    pairs: Path          # argv[1] ALLOC/FREE pairs, then "pairs: pid P traced T preload L"
    spawn_env: Path      # a program started with an environment of its own, every way


@pytest.fixture(scope="session")
def programs(native: NativeBuild, c_test_dir: Path) -> Programs:
    skip_unless_traced_programs_build(native)
    src = HERE / "fixtures"
    static = [str(native.sim_dir / "libcudart_static.a"), "-ldl", "-lpthread"]
    static_app = native.compile(src / "static_app.c", c_test_dir / "cli_static_app", extra=static)
    fork_exec = native.compile(src / "fork_exec.c", c_test_dir / "cli_fork_exec", extra=static)
    storm = native.compile(src / "event_storm.c", c_test_dir / "cli_event_storm",
                           extra=["-O2", "-ldl"])
    driver_dir = c_test_dir / "cli_tiny_driver"
    driver_dir.mkdir(exist_ok=True)
    native.compile(src / "tiny_driver.c", driver_dir / "libcuda.so.1",
                   extra=["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"])
    handoff = native.compile(src / "handoff_storm.c", c_test_dir / "cli_handoff_storm",
                             extra=["-O2", "-ldl", "-lpthread"])
    raw_fork = native.compile(src / "raw_fork.c", c_test_dir / "cli_raw_fork", extra=["-ldl"])
    caller = native.compile(src / "module_caller.c", c_test_dir / "cli_module_caller",
                            extra=["-ldl"])
    lib = native.compile(src / "module_lib.c", c_test_dir / "libcli_module.so",
                         extra=["-shared", "-fPIC", "-ldl"])
    lib_big = native.compile(src / "module_lib.c", c_test_dir / "libcli_module_big.so",
                             extra=["-shared", "-fPIC", "-DBIG", "-ldl"])
    pairs = native.compile(src / "pairs.c", c_test_dir / "cli_pairs", extra=["-ldl"])
    spawn_env = native.compile(src / "spawn_env.c", c_test_dir / "cli_spawn_env",
                               extra=["-lpthread"])
    return Programs(static_app, fork_exec, storm, driver_dir, handoff, raw_fork, caller, lib,
                    lib_big, pairs, spawn_env)
