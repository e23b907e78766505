"""Helpers for the bistro patch-engine tests (imported as
``from bistro_testing import ...``): where the fixtures are, a ctypes view of
the patch engine and the fixture functions, and /proc/self/maps parsing.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["Bistro", "FIXTURES", "HERE", "HOOK_MARK", "maps_of"]

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
HOOK_MARK = 1_000_000


class Bistro:
    """ctypes access to the patch engine and the fixture functions."""

    def __init__(self, core: Path, fixlib: Path):
        self.mh = ctypes.CDLL(str(core))
        self.fx = ctypes.CDLL(str(fixlib))
        self.fixlib = fixlib
        self.mh.memhook_bistro_install.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
        self.mh.memhook_bistro_install.restype = ctypes.c_int
        self.mh.memhook_bistro_remove.argtypes = [ctypes.c_void_p]
        self.mh.memhook_bistro_remove.restype = ctypes.c_int
        self.mh.memhook_bistro_patch_jump_size.argtypes = [ctypes.c_void_p]
        self.mh.memhook_bistro_patch_jump_size.restype = ctypes.c_int
        self.fx.fx_call.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
        self.fx.fx_call.restype = ctypes.c_long
        self.orig = (ctypes.c_void_p * 8).in_dll(self.fx, "fx_orig")
        self.hooks = (ctypes.c_void_p * 8).in_dll(self.fx, "fx_hooks")
        self.live: dict[str, int] = {}

    def addr(self, name: str) -> int:
        return ctypes.cast(getattr(self.fx, name), ctypes.c_void_p).value

    def call(self, target: int | str, a: int, b: int) -> int:
        if isinstance(target, str):
            target = self.addr(target)
        return self.fx.fx_call(target, a, b)

    def code(self, name: str, n: int = 16) -> bytes:
        return ctypes.string_at(self.addr(name), n)

    def install(self, name: str, hook: int = 0, jump_size: int = 0):
        """(rc, why, original, patch); on success fx_orig[hook] = original."""
        original, patch = ctypes.c_void_p(), ctypes.c_void_p()
        why = ctypes.create_string_buffer(512)
        rc = self.mh.memhook_bistro_install(self.addr(name), self.hooks[hook], jump_size,
                                            ctypes.byref(original), ctypes.byref(patch),
                                            why, len(why))
        if rc == 0:
            self.orig[hook] = original.value
            self.live[name] = patch.value
        return rc, why.value.decode(), original.value, patch.value

    def remove(self, name: str) -> int:
        rc = self.mh.memhook_bistro_remove(self.live[name])
        if rc == 0:
            del self.live[name]
        return rc

    def jump_size(self, patch: int) -> int:
        return self.mh.memhook_bistro_patch_jump_size(patch)

    def remove_all(self) -> None:
        for name in list(self.live):
            assert self.remove(name) == 0


def maps_of(pid: int | str = "self") -> list[tuple[int, int, str, str]]:
    rows = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            rows.append((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return rows
