"""GOTCHA: what bistro cannot patch safely it refuses -- no byte written --
with a reason that names the function, its library and the bytes."""

from __future__ import annotations

import errno

import pytest

CASES = [
    # (fixture, jump size, words the reason must contain, a, b, expected result)
    ("fx_backjump", 5, "jumps back into", 3, 4, 12),
    ("fx_backjump", 12, "11 bytes long", 3, 4, 12),
    ("fx_short_xor_ret", 5, "3 bytes long, shorter than the 5-byte patch", 1, 1, 0),
    ("fx_short_xor_ret", 12, "shorter than the 12-byte patch", 1, 1, 0),
    ("fx_short_mov_ret", 12, "6 bytes long, shorter than the 12-byte patch", 1, 1, 801),
    ("fx_cudart_tailjmp", 12, "10 bytes long", 7, 2, 5),
    ("fx_jrcxz", 5, "relocate", 7, 2, 9),
    ("fx_call_early", 12, "returns to +6, inside the 12-byte patch", 7, 2, 16),
]


@pytest.mark.parametrize("name,size,words,a,b,result", CASES,
                         ids=[f"{c[0][3:]}-{c[1]}" for c in CASES])
def test_refused_with_reason(bistro, name, size, words, a, b, result):
    before = bistro.code(name, 16)
    rc, why, original, patch = bistro.install(name, hook=2, jump_size=size)
    assert rc == errno.ENOEXEC, why
    assert original is None and patch is None
    assert words in why
    assert name in why, "the reason names the function"
    assert bistro.fixlib.name in why, "the reason names the library"
    hexbytes = " ".join(f"{x:02x}" for x in before[:3])
    assert hexbytes in why, "the reason shows the prologue bytes"
    assert bistro.code(name, 16) == before, "nothing may be written on a refusal"
    assert bistro.call(name, a, b) == result


def test_call_early_is_fine_with_5_bytes(bistro):
    """push; call returns to +6, outside a 5-byte patch: allowed."""
    rc, why, original, _ = bistro.install("fx_call_early", hook=2, jump_size=5)
    assert rc == 0, why
    assert bistro.call("fx_call_early", 7, 2) == 16 + 1_000_000
    assert bistro.call(original, 7, 2) == 16


def test_bad_arguments(bistro):
    rc, why, _, _ = bistro.install("fx_egl", hook=0, jump_size=7)
    assert rc == errno.EINVAL and "jump_size 7" in why
    assert bistro.mh.memhook_bistro_remove(None) == errno.EINVAL
