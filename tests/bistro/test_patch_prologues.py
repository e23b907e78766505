"""GOTCHA: every prologue family NVIDIA ships can be patched, called through
the hook and through the trampoline, and restored.

The families come from clustering the first instructions of
tests/data/nvidia-prologues.json (libcuda 580.159.04: 682 exports,
libcudart 11.8/12.9/13.0: ~420 each, libc10_cuda from torch 2.11).  Each is
rebuilt as a real assembly function in fixtures/prologues.S that starts with
the same instructions:

| family (fixture)     | example symbol                          | first instructions                                   |
|----------------------|-----------------------------------------|------------------------------------------------------|
| libcuda_entry        | libcuda cuArray3DCreate (672 of 682)    | push rbp; mov rsp,rbp; push r12; sub $8,rsp; cmpl $imm32,disp32(rip); mov; je rel32; call *disp32(rip) |
| endbr_libcuda        | (the same built with -fcf-protection)   | endbr64 + the above                                  |
| cmp_rip_imm          | libcuda cuArray3DCreate at +10          | cmpl $imm32,disp32(rip) as the first instruction     |
| cudart_pushmov       | cudart 12/13 __cudaPopCallConfiguration | push rbp; mov rsp,rbp; push r15; mov rdx,r15; push r14 ... |
| endbr_pushmov        | (cudart built with -fcf-protection)     | endbr64 + the above                                  |
| cudart11_pushes      | cudart 11.8 cudaArrayGetMemoryRequirements | push r15; push r14; push r13; push r12; mov edx,r13d |
| cudart_tailjmp       | cudart __cudaLaunchKernel (10 bytes)    | push rbp; mov rsp,rbp; pop rbp; jmp rel32            |
| jmp_thunk            | c10 GetDeviceCount (5 bytes)            | jmp rel32                                            |
| rip_load             | libcuda cudbgReportDriverApiError (16)  | mov disp32(rip),eax; add $1,eax; mov eax,disp32(rip) |
| rip_lea              | libcuda cudbgApiDetach                  | lea disp32(rip),rax; mov (rax),ecx; test; jne        |
| jcc_rel8             | libcuda cudbgApiInit                    | cmp $1,edi; je rel8; cmp $2,edi; je rel32            |
| short_mov_ret        | libcuda cuMemGetAttribute (6 bytes)     | mov $imm32,eax; ret                                  |
| c10_sub_call         | c10 set_device                          | sub $8,rsp; movzbl sil,esi; movsbl dil,edi; call     |
| c10_rip_movzb        | c10 FreeCudaMemoryCallbacksRegistry     | movzbl disp32(rip),eax; test al,al; je rel8; mov disp32(rip),rax |
| jmp_indirect         | c10 hasPrimaryContext (10 bytes)        | movsbl dil,edi; jmp *disp32(rip)                     |
| movabs_first         | c10 vector::_M_realloc_insert           | movabs $imm64,rcx; push r15                          |
| egl                  | libcuda cuEGLApiInit                    | push rbp; xor eax,eax; mov $imm32,ecx; lea disp32(rip),rdx |

Functions shorter than 12 bytes (tailjmp 10, jmp_thunk 5, rip_load 16 is
fine, short_mov_ret 6, jmp_indirect 10) are patched with 5 bytes only; the
12-byte attempt is refused (see test_patch_refusals.py).
"""

from __future__ import annotations

import pytest
from bistro_testing import HOOK_MARK

EXPECT = {
    "fx_libcuda_entry": lambda a, b: a + 2 * b + 7,
    "fx_endbr_libcuda": lambda a, b: a + 2 * b + 7,
    "fx_cmp_rip_imm": lambda a, b: 3 * a + b,
    "fx_cudart_pushmov": lambda a, b: 5 * a - b,
    "fx_endbr_pushmov": lambda a, b: 5 * a - b,
    "fx_cudart11_pushes": lambda a, b: a * b + 1,
    "fx_cudart_tailjmp": lambda a, b: a - b,
    "fx_jmp_thunk": lambda a, b: a - b,
    "fx_rip_load": lambda a, b: 101 + a,
    "fx_rip_lea": lambda a, b: 100 + a,
    "fx_jcc_rel8": lambda a, b: {1: 111, 2: 222}.get(a, a + b + 10),
    "fx_short_mov_ret": lambda a, b: 801,
    "fx_c10_sub_call": lambda a, b: 2 * a + b,
    "fx_c10_rip_movzb": lambda a, b: 4242 + a,
    "fx_jmp_indirect": lambda a, b: a + b,
    "fx_movabs_first": lambda a, b: (a & 0xFFF) + b,
    "fx_egl": lambda a, b: 145 + a,
}
SHORTER_THAN_12 = {"fx_cudart_tailjmp", "fx_jmp_thunk", "fx_short_mov_ret", "fx_jmp_indirect"}
ARGS = [(5, 3), (1, 9), (2, 4), (40, 2)]

CASES = [(name, size) for name in EXPECT for size in (5, 12)
         if not (size == 12 and name in SHORTER_THAN_12)]


@pytest.mark.parametrize("name,size", CASES, ids=[f"{n[3:]}-{s}" for n, s in CASES])
def test_family_patch_call_restore(bistro, name, size):
    expect = EXPECT[name]
    before = bistro.code(name, 32)
    for a, b in ARGS:
        assert bistro.call(name, a, b) == expect(a, b), "fixture is wrong before patching"

    rc, why, original, patch = bistro.install(name, hook=0, jump_size=size)
    assert rc == 0, why
    assert bistro.jump_size(patch) == size
    after = bistro.code(name, 32)
    at = 4 if before.startswith(b"\xf3\x0f\x1e\xfa") else 0
    assert after[:at] == before[:at], "endbr64 must stay at the entry"
    assert after[at] == (0xE9 if size == 5 else 0x48)
    assert after[at + size:] == before[at + size:], "only the jump's bytes change"

    for a, b in ARGS:
        assert bistro.call(name, a, b) == expect(a, b) + HOOK_MARK, "not through the hook"
        assert bistro.call(original, a, b) == expect(a, b), "trampoline differs from original"

    assert bistro.remove(name) == 0
    assert bistro.code(name, 32) == before
    for a, b in ARGS:
        assert bistro.call(name, a, b) == expect(a, b)


def test_reinstall_reuses_and_switches_forms(bistro):
    """install/remove cycles in both forms on one function keep working."""
    name = "fx_libcuda_entry"
    before = bistro.code(name, 32)
    for size in (5, 12, 5, 12, 0):
        rc, why, original, patch = bistro.install(name, hook=1, jump_size=size)
        assert rc == 0, why
        assert bistro.call(name, 2, 3) == 15 + HOOK_MARK
        assert bistro.call(original, 2, 3) == 15
        assert bistro.remove(name) == 0
        assert bistro.code(name, 32) == before


def test_already_patched_is_eexist(bistro):
    import errno
    rc, why, _, _ = bistro.install("fx_egl", hook=0)
    assert rc == 0, why
    rc2, why2, _, _ = bistro.install("fx_egl", hook=1)
    assert rc2 == errno.EEXIST
    assert "fx_egl" in why2 and "already patched" in why2
    assert bistro.call("fx_egl", 1, 0) == 146 + HOOK_MARK
