"""The MEMHOOK_* knobs read when the core loads: blanks around a value are
ignored alike (MEMHOOK_LOG_LEVEL as MEMHOOK_CUDA_MODE), and a plain
LD_PRELOAD of the core with MEMHOOK_CUDA_MODE set says at info level why it
installs nothing."""

from __future__ import annotations

import os
import subprocess

import pytest

import memhook
from memhook import HookMode
from memhook._binding.core import lib


def _preload(**env: str) -> str:
    """stderr of /bin/true run with the core LD_PRELOADed and `env`."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEMHOOK_")}
    full.update(env, LD_PRELOAD=memhook.library_path())
    return subprocess.run(["/bin/true"], env=full, capture_output=True, text=True, timeout=60,
                          check=True).stderr


@pytest.mark.parametrize("text", ["info ", " info", "\tINFO\n", "info"])
def test_log_level_accepts_blanks_as_the_mode_does(text: str) -> None:
    assert lib.memhook_log_level_parse(text.encode()) == 2
    assert HookMode.parse(text.lower().replace("info", "reloc")) == HookMode.parse("reloc")
    err = _preload(MEMHOOK_LOG_LEVEL=text)
    assert "not a log level" not in err and "info: libmemhook" in err, err


def test_a_bad_log_level_is_named_with_what_is_valid() -> None:
    assert lib.memhook_log_level_parse(b"in fo") == -1
    err = _preload(MEMHOOK_LOG_LEVEL="verbose ")
    assert 'MEMHOOK_LOG_LEVEL=verbose  is not a log level; valid: error, warn, info' in err


def test_preload_with_a_mode_says_why_it_installs_nothing() -> None:
    err = _preload(MEMHOOK_CUDA_MODE="reloc", MEMHOOK_LOG_LEVEL="info")
    assert ('MEMHOOK_CUDA_MODE="reloc" is set, but loading libmemhook.so installs no hooks by '
            "itself: memhook.install() reads it") in err, err
    assert "MEMHOOK_CUDA_MODE" not in _preload(MEMHOOK_CUDA_MODE="reloc")  # (warn level)
    assert "MEMHOOK_CUDA_MODE" not in _preload(MEMHOOK_LOG_LEVEL="info")


@pytest.mark.parametrize("name, junk, valid", [
    ("MEMHOOK_CLOCK", "banana", "valid: auto (the default: the cheaper of the TSC and the coarse "
                                "clock where nobody asked for precise time), monotonic"),
    ("MEMHOOK_BISTRO_FAR_JUMP", "yes", "valid: 1 (always the 12-byte jump) or 0"),
])
def test_a_junk_switch_value_gets_one_warning_naming_the_valid_ones(name: str, junk: str,
                                                                    valid: str) -> None:
    """Before, MEMHOOK_CLOCK=banana was taken silently as the default."""
    err = _preload(**{name: junk})
    lines = [line for line in err.splitlines() if name in line]
    assert len(lines) == 1, err
    assert f"{name}={junk} is not a valid value; {valid}" in lines[0]
    assert lines[0].endswith("(using the default)")
    assert name not in _preload(**{name: junk, "MEMHOOK_LOG_LEVEL": "error"})


@pytest.mark.parametrize("name, value", [("MEMHOOK_CLOCK", "monotonic"),
                                         ("MEMHOOK_CLOCK", " auto "), ("MEMHOOK_CLOCK", ""),
                                         ("MEMHOOK_CLOCK", "tsc"), ("MEMHOOK_CLOCK", "coarse "),
                                         ("MEMHOOK_BISTRO_FAR_JUMP", "1"),
                                         ("MEMHOOK_BISTRO_FAR_JUMP", "0 ")])
def test_a_valid_switch_value_says_nothing(name: str, value: str) -> None:
    assert name not in _preload(**{name: value})


@pytest.mark.parametrize("name", ["MEMHOOK_TRACE_STACKS", "MEMHOOK_TRACE_PYTHON"])
def test_a_junk_depth_gets_one_warning_naming_the_valid_ones(name: str, tmp_path) -> None:
    """The depth knobs are read as text with the others (mh_options.c) and
    parsed by the trace: a junk value is named with its range, and the
    default (no frames) is used."""
    sock = str(tmp_path / "no-collector")  # (nobody listens: the process runs untraced)
    err = _preload(MEMHOOK_TRACE_SOCKET=sock, **{name: "banana"})
    lines = [line for line in err.splitlines() if name in line]
    assert len(lines) == 1 and f"{name}=banana is not 0-128; using 0" in lines[0], err
    assert name not in _preload(MEMHOOK_TRACE_SOCKET=sock, **{name: "16"})
