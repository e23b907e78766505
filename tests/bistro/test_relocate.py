"""The relocator and the entry analysis: RIP-relative operands re-encoded,
branches re-targeted and widened, and the refusals (out of reach, back
branch into the window, too short, undecodable), with capstone as the oracle
for where each relocated instruction really points."""

from __future__ import annotations

import struct

import pytest

capstone = pytest.importorskip("capstone")
from capstone import x86 as csx86  # noqa: E402

from memhook._binding.core import ffi, lib  # noqa: E402

GIB = 1 << 30
SRC = 0x7F12_3456_0000
OK, DECODE_FAILED, RIP_OUT_OF_RANGE, BRANCH_OUT_OF_RANGE, UNSUPPORTED, TOO_SHORT, \
    BRANCH_INTO_WINDOW, NO_ROOM = range(8)


def le32(v: int) -> str:
    return struct.pack("<i", v).hex()


def relocate(hexcode: str, need: int = 5, src: int = SRC, dst: int | None = None,
             cap: int = 128, avail: int | None = None):
    code = bytes.fromhex(hexcode.replace(" ", ""))
    dst = src + GIB if dst is None else dst
    out = ffi.new("uint8_t[]", max(cap, 1))
    consumed, written = ffi.new("size_t *"), ffi.new("size_t *")
    reason = ffi.new("char[]", 200)
    rc = lib.memhook_x86_relocate(code, src, len(code) if avail is None else avail, need, out,
                                  dst, cap, consumed, written, reason, 200)
    return rc, bytes(ffi.buffer(out, written[0])), consumed[0], ffi.string(reason).decode()


def disasm(code: bytes, addr: int):
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    insns = list(md.disasm(code, addr))
    assert sum(i.size for i in insns) == len(code), "relocated bytes do not decode cleanly"
    return insns


def rip_target(insn) -> int:
    for op in insn.operands:
        if op.type == csx86.X86_OP_MEM and op.mem.base == csx86.X86_REG_RIP:
            return insn.address + insn.size + op.mem.disp
    raise AssertionError(f"no rip-relative operand in {insn.mnemonic} {insn.op_str}")


def branch_target(insn) -> int:
    op = insn.operands[0]
    assert op.type == csx86.X86_OP_IMM
    return op.imm


def analyze(hexcode: str, jump_size: int = 5, symbol_size: int | None = None,
            address: int = SRC, tramp: int | None = None, avail: int | None = None):
    code = bytes.fromhex(hexcode.replace(" ", ""))
    out = ffi.new("memhook_bistro_analysis *")
    rc = lib.memhook_bistro_analyze(code, len(code) if avail is None else avail, address,
                                    len(code) if symbol_size is None else symbol_size, jump_size,
                                    address + GIB if tramp is None else tramp, b"cuMemAlloc_v2",
                                    b"libcuda.so.1", out)
    assert rc == 0
    return out, ffi.string(out.reason).decode()


@pytest.mark.parametrize("library", [b"libcuda.so.1", b"/" + b"deep/" * 60 + b"libcuda.so.1"])
def test_a_refusal_keeps_the_bytes_whatever_the_library_path(library: bytes) -> None:
    """The refusal names the function, its object and its first bytes in a
    fixed buffer; a long path (site-packages, a deep build tree) is
    shortened from its left - the object's own name and the bytes stay."""
    code = bytes.fromhex("c3 90")  # too short for a 5-byte jump
    out = ffi.new("memhook_bistro_analysis *")
    assert lib.memhook_bistro_analyze(code, len(code), SRC, len(code), 5, SRC + GIB,
                                      b"cuMemAlloc_v2", library, out) == 0
    reason = ffi.string(out.reason).decode()
    assert not out.patchable
    assert reason.startswith("cuMemAlloc_v2 in "), reason
    assert "libcuda.so.1 at " in reason and reason.endswith("bytes: c3 90"), reason


# ---------------------------------------------------------------- RIP-relative

@pytest.mark.parametrize("prefix,suffix,mnemonic", [
    ("83 3d", "00", "cmp"),             # cmpl $imm8, disp32(%rip)
    ("81 3d", "78 56 34 12", "cmp"),    # cmpl $imm32, disp32(%rip)
    ("48 8b 05", "", "mov"),            # mov disp32(%rip), %rax
    ("48 8d 05", "", "lea"),            # lea disp32(%rip), %rax
    ("c5 f9 6f 05", "", "vmovdqa"),     # VEX
    ("62 f1 7c 48 10 05", "", "vmovups"),  # EVEX: disp32 is not scaled
])
@pytest.mark.parametrize("disp", [0x1234, -0x2000_0000, 0x7000_0000])
def test_rip_relative_operand_keeps_its_target(prefix: str, suffix: str, mnemonic: str,
                                               disp: int) -> None:
    insn = f"{prefix} {le32(disp)} {suffix}"
    code = "55 " + insn + " c3"  # push %rbp first: the operand is not at offset 0
    n = len(bytes.fromhex(insn.replace(" ", "")))
    original = disasm(bytes.fromhex(code.replace(" ", "")), SRC)[1]
    rc, out, consumed, reason = relocate(code, need=5)
    assert rc == OK, reason
    assert consumed == 1 + n
    moved = disasm(out, SRC + GIB)
    assert moved[1].mnemonic == mnemonic
    assert rip_target(moved[1]) == rip_target(original) == SRC + 1 + n + disp
    k = len(bytes.fromhex(suffix.replace(" ", "")))
    if k:  # the immediate after the displacement is intact
        assert moved[1].bytes[-k:] == original.bytes[-k:]


def test_rip_relative_out_of_reach_is_refused() -> None:
    # The target is 2 GiB - 1 above the source; a trampoline 1 GiB below the
    # source is 3 GiB away from it.
    rc, _, _, reason = relocate(f"48 8b 05 {le32(0x7FFF_FFF0)} c3", need=5, dst=SRC - GIB)
    assert rc == RIP_OUT_OF_RANGE
    assert "rip-relative" in reason and "GiB" in reason
    out, text = analyze(f"48 8b 05 {le32(0x7FFF_FFF0)} c3", tramp=SRC - GIB)
    assert not out.patchable and out.refusal == RIP_OUT_OF_RANGE
    assert "cuMemAlloc_v2" in text and "libcuda.so.1" in text and "48 8b 05" in text


# ---------------------------------------------------------------- branches

def test_jcc_rel8_inside_the_window_stays_relative_to_the_copy() -> None:
    # je +1 (to offset 3), nop, nop, nop: all inside a 5-byte window.
    rc, out, consumed, reason = relocate("74 01 90 90 90 c3", need=5)
    assert rc == OK, reason
    assert consumed == 5
    moved = disasm(out, SRC + GIB)
    assert out[:2] == b"\x0f\x84"  # widened, same condition
    # offset 3 of the original is the third moved instruction's copy
    assert branch_target(moved[0]) == moved[2].address


def test_jcc_rel8_leaving_the_window_is_widened_to_rel32() -> None:
    rc, out, consumed, reason = relocate("48 85 ff 75 10 90 90 c3", need=5)
    assert rc == OK, reason
    assert consumed == 5
    moved = disasm(out, SRC + GIB)
    assert moved[1].mnemonic == "jne" and moved[1].size == 6
    assert branch_target(moved[1]) == SRC + 5 + 0x10


@pytest.mark.parametrize("code,size", [
    ("eb 20 90 90 90", 5),                     # jmp rel8 -> jmp rel32
    (f"e9 {le32(0x12345)}", 5),                # jmp rel32
    (f"e8 {le32(-0x4000)}", 5),                # call rel32: a tail of the prologue
    (f"0f 8f {le32(0x777)}", 6),               # jg rel32
    (f"66 66 48 e8 {le32(0x100)}", 8),         # TLS GD call __tls_get_addr
])
def test_relative_branches_are_retargeted(code: str, size: int) -> None:
    raw = bytes.fromhex(code.replace(" ", ""))
    original = disasm(raw, SRC)[0]
    rc, out, _, reason = relocate(code, need=5)
    assert rc == OK, reason
    moved = disasm(out, SRC + GIB)[0]
    assert moved.mnemonic == original.mnemonic
    assert branch_target(moved) == branch_target(original)
    assert moved.size >= size


def test_branch_out_of_reach_is_refused() -> None:
    rc, _, _, reason = relocate(f"e9 {le32(0x7FFF_FF00)}", need=5, dst=SRC - GIB)
    assert rc == BRANCH_OUT_OF_RANGE and "GiB" in reason


def test_loop_leaving_the_window_is_refused() -> None:
    rc, _, _, reason = relocate("e2 10 90 90 90 90", need=5)
    assert rc == UNSUPPORTED and "loop" in reason


def test_loop_inside_the_window_is_kept() -> None:
    rc, out, _, reason = relocate("90 90 e2 fc 90 90", need=5)  # loop back to offset 0
    assert rc == OK, reason
    moved = disasm(out, SRC + GIB)
    assert moved[2].mnemonic == "loop" and branch_target(moved[2]) == SRC + GIB


def test_branch_into_the_middle_of_a_moved_instruction_is_refused() -> None:
    rc, _, _, reason = relocate("eb 01 b8 01 00 00 00", need=5)  # into mov's imm
    assert rc == UNSUPPORTED and "inside the instruction" in reason


def test_operand_size_prefixed_rel8_branch_is_refused() -> None:
    rc, _, _, reason = relocate("66 eb 10 90 90 90", need=5)
    assert rc == UNSUPPORTED and "operand-size" in reason


def test_undecodable_instruction_is_refused() -> None:
    rc, _, _, reason = relocate("55 0f 0f c0 b4 90", need=5)  # 3DNow! at +1
    assert rc == DECODE_FAILED and "+1" in reason


def test_no_room() -> None:
    rc, _, _, reason = relocate("74 01 90 90 90 c3", need=5, cap=4)
    assert rc == NO_ROOM


# ---------------------------------------------------------------- analysis

NVIDIA_PROLOGUE = f"55 48 89 e5 41 54 48 83 ec 18 83 3d {le32(0x123456)} 00 74 20"


def test_nvidia_prologue_both_forms() -> None:
    out5, _ = analyze(NVIDIA_PROLOGUE + " 90" * 40, 5, symbol_size=0x100)
    assert out5.patchable and out5.patch_offset == 0 and out5.consumed == 6
    out12, _ = analyze(NVIDIA_PROLOGUE + " 90" * 40, 12, symbol_size=0x100)
    assert out12.patchable and out12.consumed == 17  # through the cmpl


def test_endbr64_is_kept_and_the_patch_goes_after_it() -> None:
    code = "f3 0f 1e fa 55 48 89 e5 41 57 41 56 c3"
    out, _ = analyze(code, 5)
    assert out.patchable and out.patch_offset == 4 and out.consumed == 6  # push, mov, push
    out, _ = analyze(code, 12, symbol_size=13)
    assert not out.patchable and out.refusal == TOO_SHORT  # 4 + 12 > 13


def test_back_branch_into_the_window_is_refused() -> None:
    # push; mov; (loop body at +4) add; cmp; mov; nop; jne back to +4, which
    # is inside the 14 bytes a 12-byte patch displaces
    code = "55 48 89 e5 48 83 c7 01 48 39 f7 48 89 c0 90 75 f3 5d c3"
    out, text = analyze(code, 12)
    assert not out.patchable and out.refusal == BRANCH_INTO_WINDOW
    assert "cuMemAlloc_v2" in text and "libcuda.so.1" in text and "55 48 89 e5" in text
    assert "+15" in text and "+4" in text
    out, text = analyze(code, 5)  # 5 bytes displace push, mov, add: [0, 8) holds +4 too
    assert not out.patchable and out.refusal == BRANCH_INTO_WINDOW
    # a branch to the first byte after the window is fine
    out, text = analyze("55 48 89 e5 48 83 c7 01 48 39 f7 75 fb 5d c3", 5)
    assert out.patchable, text


def test_back_branch_to_the_entry_itself_is_allowed() -> None:
    # a self tail call (jmp to offset 0) runs the patch, like a call would
    out, text = analyze("55 48 89 e5 5d 48 85 ff 75 f5 c3", 5)
    assert out.patchable, text


def test_function_shorter_than_the_patch_is_refused() -> None:
    out, text = analyze("31 c0 c3", 5)
    assert not out.patchable and out.refusal == TOO_SHORT
    assert "3 bytes" in text and "31 c0 c3" in text and "cuMemAlloc_v2" in text


def test_partial_bytes_end_the_sweep_without_refusal() -> None:
    # 32 known bytes of a 300-byte function: the cut instruction at the end
    # is the end of what is known, not a decode failure.
    code = NVIDIA_PROLOGUE + " 48 8b 05"  # cut movq
    out, text = analyze(code, 5, symbol_size=300)
    assert out.patchable, text
    out, text = analyze(code, 5)  # symbol size = these bytes: truncation is real
    assert not out.patchable and out.refusal == DECODE_FAILED


def test_bad_arguments() -> None:
    out = ffi.new("memhook_bistro_analysis *")
    assert lib.memhook_bistro_analyze(b"\x90" * 16, 16, SRC, 16, 7, SRC, b"f", b"l", out) == -1
    assert lib.memhook_bistro_analyze(ffi.NULL, 16, SRC, 16, 5, SRC, b"f", b"l", out) == -1
    assert lib.memhook_bistro_analyze(b"\x90" * 16, 16, SRC, 16, 5, SRC, ffi.NULL, ffi.NULL,
                                      out) == 0


def test_long_names_do_not_push_the_bytes_out_of_the_reason() -> None:
    out = ffi.new("memhook_bistro_analysis *")
    name = b"_ZN" + b"x" * 400
    lib.memhook_bistro_analyze(b"\x31\xc0\xc3", 3, SRC, 3, 5, SRC + GIB, name, b"libfoo.so", out)
    text = ffi.string(out.reason).decode()
    assert "libfoo.so" in text and "31 c0 c3" in text and "_ZNxxx" in text
