"""`memhook info`: versions, libraries, per-mode coverage, bistro refusals."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from cli_testing import memhook


def test_info_json_on_the_simulator() -> None:
    proc = memhook("info", "--sim", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    driver = info["driver"]
    assert driver["loaded"] and driver["path"].endswith("sim/lib/libcuda.so.1")
    assert driver["version"] == 13000 and driver["cuInit"] == "CUDA_SUCCESS"
    assert driver["devices"] and "memhook simulator" in driver["devices"][0]["name"]
    assert [rt["version"] for rt in info["runtimes"]] == [13000]
    assert any(p.endswith("sim/lib/libcuda.so.1") for p in info["loaded_libraries"])
    assert any(p.endswith("libmemhook.so") for p in info["loaded_libraries"])
    rows = {row["function"]: row for row in info["functions"]}
    alloc = rows["cuMemAlloc_v2"]
    assert alloc["present"] and alloc["api"] == "driver"
    assert alloc["modes"]["bistro"]["mechanism"].startswith("bistro(")
    assert alloc["modes"]["reloc"]["mechanism"] == "reloc"
    assert alloc["modes"]["bistro,reloc"]["mechanism"].endswith(",reloc")
    analysis = alloc["bistro_analysis"]
    assert analysis["jmp_rel32"]["patchable"] and analysis["movabs_jmp"]["patchable"]
    assert len(bytes.fromhex(analysis["prologue"])) == min(analysis["symbol_size"], 32)
    runtime = rows["cudaMalloc"]
    assert runtime["api"] == "runtime" and runtime["present"]
    assert runtime["modes"]["bistro"]["mechanism"] == "none"
    assert "reloc only" in runtime["modes"]["bistro"]["reason"]
    assert runtime["modes"]["reloc"]["mechanism"] == "reloc"


def test_info_text_without_a_driver(tmp_path) -> None:
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))  # an empty folder first
    probe = memhook("info", env=env)
    assert probe.returncode == 0, probe.stderr
    if "no driver" not in probe.stdout:
        pytest.skip("this host has a CUDA driver on the default library path")
    assert "driver:  no driver (libcuda.so.1: cannot open shared object file" in probe.stdout
    assert "hooked functions: the mechanism covering each, per MEMHOOK_CUDA_MODE" in probe.stdout
    row = next(ln for ln in probe.stdout.splitlines() if ln.strip().startswith("cuMemAlloc_v2 "))
    assert row.split()[1:] == ["driver", "no", "none", "reloc", "reloc"]
    assert "(no driver loaded: bistro has nothing to patch)" in probe.stdout


def test_info_names_a_bistro_refusal_with_its_bytes(programs) -> None:
    """A driver whose cuMemAlloc_v2 is 3 bytes long: bistro refuses it, and
    info says so with the reason and the prologue bytes."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(programs.tiny_driver_dir))
    proc = memhook("info", env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"driver:  {programs.tiny_driver_dir}/libcuda.so.1: CUDA 13.0 (13000); " \
           "cuInit: CUDA_ERROR_NO_DEVICE" in out
    section = out.split("where bistro refuses (reason and prologue bytes):\n", 1)[1]
    assert section.startswith("  cuMemAlloc_v2: ")
    assert "shorter than the 5-byte patch" in section
    assert "(3 bytes): 31 c0 c3" in section
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("cuMemAlloc_v2 "))
    assert row.split()[1:] == ["driver", "yes", "none", "reloc", "reloc"]
    jsonproc = memhook("info", "--json", env=env)
    info = json.loads(jsonproc.stdout)
    row = next(r for r in info["functions"] if r["function"] == "cuMemAlloc_v2")
    assert row["bistro_analysis"]["prologue"] == "31 c0 c3"
    assert not row["bistro_analysis"]["jmp_rel32"]["patchable"]
    assert "bistro" in info["mode_errors"]  # bistro alone patched nothing


def test_info_escapes_control_bytes_in_paths(native, tmp_path) -> None:
    """A driver loaded from a folder whose name holds ESC, BEL and a
    newline: the text report shows it escaped on one line (before: the
    bytes reached the terminal raw); --json keeps the path exact."""
    folder = tmp_path / "cuda\x1b[31m\x07\nforged line"  # (no ";": LD_LIBRARY_PATH splits there)
    folder.mkdir()
    shutil.copy(native.sim_dir / "libcuda.so.1", folder / "libcuda.so.1")
    env = {**os.environ, "LD_LIBRARY_PATH": str(folder)}
    text = memhook("info", env=env)
    assert text.returncode == 0, text.stderr
    bad = [c for c in text.stdout if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]
    assert not bad, text.stdout
    shown = str(folder).replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\n", "\\n")
    assert f"driver:  {shown}/libcuda.so.1: CUDA " in text.stdout, text.stdout
    assert not any(line.startswith("forged line") for line in text.stdout.splitlines())
    info = json.loads(memhook("info", "--json", env=env).stdout)
    assert info["driver"]["path"] == str(folder / "libcuda.so.1")
