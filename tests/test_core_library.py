"""libmemhook.so: one core, found by path, versioned, logging by env."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import memhook
from memhook._binding.core import ffi, lib, native_version

ROOT = Path(__file__).resolve().parent.parent


def test_library_path_is_the_loaded_core() -> None:
    path = memhook.library_path()
    assert os.path.isabs(path) and os.path.basename(path) == "libmemhook.so"
    assert os.path.isfile(path)
    with open("/proc/self/maps", encoding="utf-8") as maps:
        # field 6 is the path; a rebuild while we run appends " (deleted)"
        mapped = {line.split(maxsplit=5)[5].strip().removesuffix(" (deleted)")
                  for line in maps if "libmemhook" in line}
    assert mapped == {path}, "exactly one libmemhook.so is mapped, the one reported"


def test_extension_binds_the_core_beside_it() -> None:
    """The extension's rpath is $ORIGIN: it must not pick up another copy."""
    import memhook._native as extension  # (the cffi extension, beside the core)
    ext = Path(extension.__file__).parent
    assert Path(memhook.library_path()).parent == ext


def test_versions_agree() -> None:
    header = (ROOT / "csrc/include/memhook/memhook.h").read_text()
    c_version = re.search(r'#define MEMHOOK_VERSION_STRING "([^"]+)"', header).group(1)
    assert native_version() == c_version == memhook.__version__
    major, minor, patch = map(int, c_version.split("."))
    assert lib.memhook_version_number() == major * 10000 + minor * 100 + patch


def test_log_level_api() -> None:
    assert [lib.memhook_log_level_parse(n) for n in (b"error", b"WARN", b"info", b"Debug")] == [0, 1, 2, 3]
    assert lib.memhook_log_level_parse(b"verbose") == -1
    assert lib.memhook_log_level_parse(ffi.NULL) == -1
    assert ffi.string(lib.memhook_log_level_name(3)) == b"debug"
    assert lib.memhook_log_level_name(4) == ffi.NULL
    before = lib.memhook_log_level_get()
    try:
        assert lib.memhook_log_level_set(3) == before
        assert lib.memhook_log_level_get() == 3
        assert lib.memhook_log_level_set(7) == -1 and lib.memhook_log_level_get() == 3
    finally:
        lib.memhook_log_level_set(before)


def _import_with_log_level(value: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("MEMHOOK_LOG_LEVEL", None)
    if value is not None:
        env["MEMHOOK_LOG_LEVEL"] = value
    code = ("import memhook; from memhook._binding.core import lib; "
            "lib.memhook_log_write(2, b'hello-info'); lib.memhook_log_write(0, b'hello-error')")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)


def test_log_level_from_environment() -> None:
    quiet = _import_with_log_level(None)
    assert quiet.returncode == 0
    assert "hello-error" in quiet.stderr and "hello-info" not in quiet.stderr
    assert "loaded" not in quiet.stderr

    chatty = _import_with_log_level("info")
    assert "hello-info" in chatty.stderr
    line = next(ln for ln in chatty.stderr.splitlines() if "libmemhook" in ln and "loaded" in ln)
    assert re.match(r"memhook\[\d+:\d+\] info: libmemhook 0\.1\.0 loaded from /", line), line

    errors_only = _import_with_log_level("error")
    assert "hello-error" in errors_only.stderr and "hello-info" not in errors_only.stderr


def test_bad_log_level_is_reported_with_valid_values() -> None:
    proc = _import_with_log_level("loud")
    assert proc.returncode == 0
    assert "MEMHOOK_LOG_LEVEL=loud" in proc.stderr
    assert "error, warn, info, debug" in proc.stderr


def test_long_log_line_is_truncated_not_overflowed() -> None:
    env = dict(os.environ, MEMHOOK_LOG_LEVEL="error")
    code = "from memhook._binding.core import lib; lib.memhook_log_write(0, b'x' * 5000)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and 900 < len(lines[0]) < 1024


def test_preloaded_core_is_reused_not_duplicated(tmp_path) -> None:
    """With another libmemhook.so already in the process (as `memhook trace`
    LD_PRELOADs it), importing memhook binds that one: never two copies."""
    other = tmp_path / "libmemhook.so"
    other.write_bytes(Path(memhook.library_path()).read_bytes())
    code = ("import memhook\n"
            "maps = {l.split()[-1] for l in open('/proc/self/maps') if 'libmemhook' in l}\n"
            "print(memhook.library_path()); print(len(maps))\n")
    env = dict(os.environ, LD_PRELOAD=str(other))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    path, copies = proc.stdout.split()
    assert path == str(other) and copies == "1"


def test_import_and_query_leave_no_writable_executable_page() -> None:
    """memhook never leaves W+X memory in a process: not its own code, not a
    libffi closure (a ctypes callback would make one)."""
    code = ("import memhook\n"
            "memhook.memory_type(0x1000); memhook.lookup(0x2000)\n"
            "rwx = [l for l in open('/proc/self/maps') if l.split()[1].startswith('rwx')]\n"
            "print(len(rwx)); print(''.join(rwx))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n", 1)[0] == "0", proc.stdout
