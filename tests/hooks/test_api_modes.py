"""HookMode and MEMHOOK_CUDA_MODE: the grammar, every error path, the
environment, agreement with the core's parser, and that a bad mode installs
nothing."""

from __future__ import annotations

import errno

import pytest
from hooks_api_testing import run_sim_script
from hypothesis import given, settings
from hypothesis import strategies as st

from memhook import HookMode
from memhook._binding.core import ffi, lib

B, R, N = HookMode.BISTRO, HookMode.RELOC, HookMode.NONE
BOTH = B | R


@pytest.fixture(autouse=True)
def _no_mode_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMHOOK_CUDA_MODE", raising=False)


def test_values_and_spelling() -> None:
    assert (int(N), int(B), int(R)) == (0, 1, 2)
    assert HookMode.default() == BOTH
    for mode in (N, B, R, BOTH):
        assert HookMode.parse(str(mode)) == mode
    assert str(BOTH) == "bistro,reloc" and str(N) == "none"


@pytest.mark.parametrize(("text", "expected"), [
    ("none", N), ("bistro", B), ("reloc", R), ("bistro,reloc", BOTH), ("reloc,bistro", BOTH),
    ("BISTRO", B), ("Reloc", R), ("NoNe", N), ("  bistro , RELOC\t", BOTH), ("none,bistro", B),
    ("bistro,bistro", B), ("none,none", N), ("0", N), ("1", B), ("2", R), ("3", BOTH),
    (" 2 ", R), ("\t3\n", BOTH), ("", BOTH), ("   ", BOTH),
])
def test_text(text: str, expected: HookMode) -> None:
    got = HookMode.parse(text)
    assert got == expected and type(got) is HookMode


@pytest.mark.parametrize("value", [0, 1, 2, 3, N, B, R, BOTH])
def test_ints_and_modes(value: int) -> None:
    assert HookMode.parse(value) == int(value)


def test_bytes_are_text() -> None:
    assert HookMode.parse(b"reloc") == R


@pytest.mark.parametrize(("text", "token"), [
    ("bistr", "bistr"), ("bistro,relocs", "relocs"), ("gdb", "gdb"), ("4", "4"),
    ("03", "03"), ("-1", "-1"), ("1,2", "1"), ("0x3", "0x3"), ("bistro reloc", "bistro reloc"),
    ("bistro;reloc", "bistro;reloc"), ("bistro,,reloc", "empty token"), ("bistro,", "empty token"),
    (",reloc", "empty token"), ("3 1", "3 1"), ("1bistro", "1bistro"), ("b\u0131stro", "b\u0131stro"),
])
def test_bad_text_names_the_token_and_the_valid_values(text: str, token: str) -> None:
    with pytest.raises(ValueError) as info:
        HookMode.parse(text)
    message = str(info.value)
    assert token in message
    assert "none, bistro, reloc" in message and "0-3" in message


@pytest.mark.parametrize("value", [4, -1, 1 << 40])
def test_bad_int(value: int) -> None:
    with pytest.raises(ValueError, match=f"{value}.*none, bistro, reloc"):
        HookMode.parse(value)


@pytest.mark.parametrize("value", [True, 1.0, ["bistro"], object()])
def test_bad_type(value: object) -> None:
    with pytest.raises(TypeError, match="hook mode"):
        HookMode.parse(value)  # type: ignore[arg-type]


def test_non_ascii_bytes() -> None:
    with pytest.raises(ValueError, match="not ASCII"):
        HookMode.parse(b"\xffbistro")


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert HookMode.parse(None) == BOTH  # unset: the default
    assert HookMode.parse() == BOTH
    monkeypatch.setenv("MEMHOOK_CUDA_MODE", "reloc")
    assert HookMode.parse(None) == R
    monkeypatch.setenv("MEMHOOK_CUDA_MODE", " 1 ")
    assert HookMode.parse(None) == B
    monkeypatch.setenv("MEMHOOK_CUDA_MODE", "none")
    assert HookMode.parse(None) == N
    monkeypatch.setenv("MEMHOOK_CUDA_MODE", "")
    assert HookMode.parse(None) == BOTH
    # An explicit value wins over the environment.
    monkeypatch.setenv("MEMHOOK_CUDA_MODE", "reloc")
    assert HookMode.parse("bistro") == B
    monkeypatch.setenv("MEMHOOK_CUDA_MODE", "bistro,gdb")
    with pytest.raises(ValueError, match=r"MEMHOOK_CUDA_MODE.*'gdb'.*none, bistro, reloc"):
        HookMode.parse(None)


def _c_parse(text: str) -> int | None:
    mode = ffi.new("unsigned *")
    why = ffi.new("char[]", 256)
    rc = lib.memhook_mode_parse(text.encode(), mode, why, len(why))
    if rc:
        assert rc == errno.EINVAL
        assert b"none" in ffi.string(why) and b"0-3" in ffi.string(why)
        return None
    return int(mode[0])


def _py_parse(text: str) -> int | None:
    try:
        return int(HookMode.parse(text))
    except ValueError:
        return None


_PIECES = ["none", "bistro", "reloc", "NONE", "Bistro", "rElOc", ",", " ", "\t", "0", "1", "2",
           "3", "4", "x", "bistr", "-", "\u0131", "k"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=6).map("".join))
def test_python_and_core_parsers_agree(text: str) -> None:
    assert _py_parse(text) == _c_parse(text), repr(text)


def test_python_and_core_parsers_agree_on_the_tables() -> None:
    for text in ["", " ", "none", "bistro,reloc", " 3 ", "03", "bistro,", ",", "none,", "4",
                 "1,2", "reloc , none", "RELOC", "3x", "x3", "bistro reloc"]:
        assert _py_parse(text) == _c_parse(text), repr(text)


def test_bad_mode_installs_nothing(native, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In a child (a mistake here would install hooks for good): a bad mode,
    by argument or by environment, is a ValueError and nothing changes - no
    mode, no hook, no GOT slot."""
    env = native.env(MEMHOOK_CUDA_MODE="bistro,gdb")
    run_sim_script(native, tmp_path, """
        from memhook._binding.core import lib
        import memhook
        def nothing_installed():
            r = memhook.status()
            assert r.mode == memhook.HookMode.NONE, r.mode
            assert not [h.name for h in r.hooks if h.installed]
            assert lib.memhook_reloc_patched_slots() == 0
            assert int(lib.memhook_hooks_mode()) == 0
        for bad in ("gdb", "bistro,gdb", "4", 7, -1, "bistro,,reloc"):
            try:
                memhook.install(bad)
            except ValueError as exc:
                assert "none, bistro, reloc" in str(exc), exc
            else:
                raise AssertionError(f"install({bad!r}) did not fail")
            nothing_installed()
        try:
            memhook.install()
        except ValueError as exc:
            assert "MEMHOOK_CUDA_MODE" in str(exc) and "gdb" in str(exc), exc
        else:
            raise AssertionError("install() with MEMHOOK_CUDA_MODE=bistro,gdb did not fail")
        nothing_installed()
        # And the environment's good values are used.
        os.environ["MEMHOOK_CUDA_MODE"] = "reloc"
        report = memhook.install()
        assert report.mode == memhook.HookMode.RELOC, report.mode
        assert memhook.status().mode == memhook.HookMode.RELOC
        memhook.uninstall()
        nothing_installed()
        print("ALL OK")
        """, env=env)
