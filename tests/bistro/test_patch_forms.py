"""GOTCHA: the jump forms.  5-byte jmp rel32 when the hook (or a jump slot in
an island near the target) is reachable, 12-byte movabs/jmp *%rax when
demanded or forced by MEMHOOK_BISTRO_FAR_JUMP=1."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import textwrap

from bistro_testing import HERE, HOOK_MARK

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000


def far_hook(bistro, hook_index: int) -> int:
    """An executable stub > 4 GiB away from the fixtures that jumps to
    fx_hook<n>: a hook no rel32 can reach."""
    near = bistro.addr("fx_egl")
    for delta in (1 << 36, -(1 << 36), 1 << 38, -(1 << 38), 1 << 33):
        want = (near + delta) & ~0xFFF
        if want <= 0x10000 or want >= 0x7FFF00000000:
            continue
        p = libc.mmap(want, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                      MAP_FIXED_NOREPLACE, -1, 0)
        if p not in (None, ctypes.c_void_p(-1).value) and p == want:
            break
    else:
        raise AssertionError("could not map a far page")
    code = b"\x48\xb8" + struct.pack("<Q", bistro.hooks[hook_index]) + b"\xff\xe0"
    ctypes.memmove(p, code, len(code))
    assert libc.mprotect(p, 4096, PROT_READ | PROT_EXEC) == 0
    assert abs(p - near) > (1 << 32)
    return p


def install_hook_at(bistro, name, hook_addr, hook_index, jump_size):
    original, patch = ctypes.c_void_p(), ctypes.c_void_p()
    why = ctypes.create_string_buffer(512)
    rc = bistro.mh.memhook_bistro_install(bistro.addr(name), hook_addr, jump_size,
                                          ctypes.byref(original), ctypes.byref(patch),
                                          why, len(why))
    assert rc == 0, why.value.decode()
    bistro.orig[hook_index] = original.value
    bistro.live[name] = patch.value
    return original.value, patch.value


def test_auto_is_5_byte_when_hook_is_near(bistro):
    rc, why, original, patch = bistro.install("fx_cudart_pushmov", hook=3)
    assert rc == 0, why
    assert bistro.jump_size(patch) == 5
    code = bistro.code("fx_cudart_pushmov", 5)
    dest = bistro.addr("fx_cudart_pushmov") + 5 + struct.unpack("<i", code[1:5])[0]
    assert code[0] == 0xE9 and dest == bistro.hooks[3], "a near hook is jumped to directly"
    assert bistro.call("fx_cudart_pushmov", 4, 1) == 19 + HOOK_MARK


def test_demanded_12_byte(bistro):
    rc, why, original, patch = bistro.install("fx_cudart_pushmov", hook=3, jump_size=12)
    assert rc == 0, why
    code = bistro.code("fx_cudart_pushmov", 12)
    assert code[:2] == b"\x48\xb8" and code[10:12] == b"\xff\xe0"
    assert struct.unpack("<Q", code[2:10])[0] == bistro.hooks[3]
    assert bistro.call("fx_cudart_pushmov", 4, 1) == 19 + HOOK_MARK
    assert bistro.call(original, 4, 1) == 19


def test_far_hook_goes_through_a_jump_slot(bistro):
    """A hook beyond +-2 GiB: still a 5-byte patch, to a slot in an island
    near the target that jumps on to the hook."""
    hook = far_hook(bistro, 4)
    original, patch = install_hook_at(bistro, "fx_libcuda_entry", hook, 4, 0)
    assert bistro.jump_size(patch) == 5
    at = bistro.addr("fx_libcuda_entry")
    code = bistro.code("fx_libcuda_entry", 5)
    slot = at + 5 + struct.unpack("<i", code[1:5])[0]
    assert abs(slot - at) < (1 << 31)
    assert ctypes.string_at(slot, 6) == b"\xff\x25\x00\x00\x00\x00"
    assert struct.unpack("<Q", ctypes.string_at(slot + 6, 8))[0] == hook
    assert bistro.call("fx_libcuda_entry", 1, 1) == 10 + HOOK_MARK
    assert bistro.call(original, 1, 1) == 10
    # the trampoline lives near the target too
    assert abs(original - at) < (1 << 31)


def test_far_hook_12_byte(bistro):
    hook = far_hook(bistro, 5)
    original, patch = install_hook_at(bistro, "fx_cudart11_pushes", hook, 5, 12)
    assert bistro.jump_size(patch) == 12
    assert bistro.call("fx_cudart11_pushes", 3, 4) == 13 + HOOK_MARK
    assert bistro.call(original, 3, 4) == 13


CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {here!r})
    from pathlib import Path
    from bistro_testing import Bistro
    b = Bistro(Path({core!r}), Path({fixlib!r}))
    out = {{}}
    for name in ("fx_libcuda_entry", "fx_endbr_pushmov", "fx_rip_lea", "fx_short_mov_ret"):
        rc, why, original, patch = b.install(name, hook=0, jump_size=0)
        out[name] = dict(rc=rc, why=why, size=b.jump_size(patch) if rc == 0 else 0,
                         hooked=b.call(name, 2, 1) if rc == 0 else None,
                         orig=b.call(original, 2, 1) if rc == 0 else None)
        if rc == 0:
            b.remove(name)
    print(json.dumps(out))
""")


def test_env_forces_12_byte(native, fixture_lib):
    env = dict(os.environ, MEMHOOK_BISTRO_FAR_JUMP="1")
    src = CHILD.format(here=str(HERE), core=str(native.core), fixlib=str(fixture_lib))
    proc = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["fx_libcuda_entry"]["size"] == 12
    assert out["fx_libcuda_entry"]["hooked"] == 11 + HOOK_MARK
    assert out["fx_libcuda_entry"]["orig"] == 11
    assert out["fx_endbr_pushmov"]["size"] == 12
    assert out["fx_endbr_pushmov"]["orig"] == 9
    assert out["fx_rip_lea"]["size"] == 12
    assert out["fx_rip_lea"]["orig"] == 102
    # 6 bytes cannot take a 12-byte patch: refused, not silently 5
    assert out["fx_short_mov_ret"]["rc"] != 0
    assert "shorter than the 12-byte patch" in out["fx_short_mov_ret"]["why"]
