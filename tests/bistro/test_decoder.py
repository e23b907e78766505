"""The x86-64 length decoder: hand-checked instructions, the NVIDIA prologue
vectors and a million random sequences, against capstone as the oracle.

The random comparison lives in tools/x86_agreement.py (which prints the same
figures for the README); this test runs it on 1,000,000 sequences and fails
on any length disagreement, or on any instruction capstone decodes that we
refuse unless it is on the short deliberate list there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

capstone = pytest.importorskip("capstone")
np = pytest.importorskip("numpy")

from memhook._binding.core import ffi, lib  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import x86_agreement  # noqa: E402

VECTORS = ROOT / "tests" / "data" / "nvidia-prologues.json"

TRUNCATED, UNKNOWN, INVALID = -1, -2, -3


def length(hexbytes: str, avail: int | None = None) -> int:
    code = bytes.fromhex(hexbytes.replace(" ", ""))
    return lib.memhook_x86_insn_length(code, len(code) if avail is None else avail)


# (bytes, length, what) - lengths checked against the SDM by hand.
KNOWN = [
    ("55", 1, "push %rbp"),
    ("48 89 e5", 3, "mov %rsp,%rbp"),
    ("41 54", 2, "push %r12"),
    ("48 83 ec 18", 4, "sub $0x18,%rsp"),
    ("48 81 ec 00 01 00 00", 7, "sub $0x100,%rsp"),
    ("83 3d 11 22 33 44 00", 7, "cmpl $0,disp32(%rip)"),
    ("81 3d 11 22 33 44 78 56 34 12", 10, "cmpl $imm32,disp32(%rip)"),
    ("48 8b 05 11 22 33 44", 7, "mov disp32(%rip),%rax"),
    ("48 8d 05 11 22 33 44", 7, "lea disp32(%rip),%rax"),
    ("f3 0f 1e fa", 4, "endbr64"),
    ("48 b8 88 77 66 55 44 33 22 11", 10, "movabs $imm64,%rax"),
    ("b8 01 00 00 00", 5, "mov $1,%eax"),
    ("66 b8 01 00", 4, "mov $1,%ax"),
    ("48 a1 88 77 66 55 44 33 22 11", 10, "movabs moffs64,%rax"),
    ("67 a1 44 33 22 11", 6, "mov moffs32,%eax (addr32)"),
    ("ff e0", 2, "jmp *%rax"),
    ("e8 00 00 00 00", 5, "call rel32"),
    ("e9 00 00 00 00", 5, "jmp rel32"),
    ("eb fe", 2, "jmp rel8"),
    ("74 05", 2, "je rel8"),
    ("0f 84 00 01 00 00", 6, "je rel32"),
    ("e3 10", 2, "jrcxz"),
    ("66 66 48 e8 00 00 00 00", 8, "TLS GD call __tls_get_addr"),
    ("64 48 8b 04 25 28 00 00 00", 9, "mov %fs:0x28,%rax"),
    ("f0 48 0f b1 0f", 5, "lock cmpxchg %rcx,(%rdi)"),
    ("66 0f 1f 44 00 00", 6, "nopw 0(%rax,%rax)"),
    ("66 2e 0f 1f 84 00 00 00 00 00", 10, "cs nopw"),
    ("0f 1f 80 00 00 00 00", 7, "nopl disp32"),
    ("c2 08 00", 3, "ret $8"),
    ("c8 10 00 01", 4, "enter"),
    ("f6 c1 01", 3, "test $1,%cl"),
    ("f7 c1 01 00 00 00", 6, "test $1,%ecx"),
    ("66 f7 c1 01 00", 5, "test $1,%cx"),
    ("f7 d9", 2, "neg %ecx"),
    ("c7 44 24 08 01 00 00 00", 8, "movl $1,8(%rsp)"),
    ("66 0f 3a 0f c1 08", 6, "palignr $8"),
    ("66 0f 38 00 c1", 5, "pshufb"),
    ("0f 20 c0", 3, "mov %cr0,%rax (no SIB/disp whatever mod says)"),
    ("0f 20 05", 3, "mov %cr0,%rbp"),
    ("c5 f8 77", 3, "vzeroupper"),
    ("c5 f9 6f 05 00 00 00 00", 8, "vmovdqa disp32(%rip),%xmm0"),
    ("c4 e3 7d 18 c1 01", 6, "vinsertf128 $1"),
    ("c5 f9 73 d8 04", 5, "vpsrldq $4 (VEX map 1 with imm8)"),
    ("62 f1 7c 48 10 05 00 00 00 00", 10, "vmovups disp32(%rip),%zmm0"),
    ("62 f1 fd 48 73 d0 01", 7, "vpsrlq $1,%zmm0 (EVEX map 1 imm8)"),
    ("62 f3 7d 48 03 c0 01", 7, "valignd (EVEX map 3)"),
    ("c6 f8 01", 3, "xabort"),
    ("c7 f8 00 00 00 00", 6, "xbegin rel32"),
    ("2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 90", 14, "13 prefixes + nop"),
    ("d9 ee", 2, "fldz"),
    ("dd 44 24 08", 4, "fldl 8(%rsp)"),
    ("f3 48 0f b8 c1", 5, "popcnt"),
]


@pytest.mark.parametrize("hexbytes,expected,what", KNOWN, ids=[k[2] for k in KNOWN])
def test_known_lengths(hexbytes: str, expected: int, what: str) -> None:
    assert length(hexbytes) == expected, what
    # capstone agrees on every one of them.
    code = bytes.fromhex(hexbytes.replace(" ", ""))
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    cs = next(md.disasm_lite(code, 0, 1), None)
    assert cs is not None and cs[1] == expected, (what, cs)


@pytest.mark.parametrize("hexbytes,status,what", [
    ("06", INVALID, "push %es: invalid in 64-bit mode"),
    ("27", INVALID, "daa"),
    ("ea 00 00 00 00 00 00", INVALID, "jmp far"),
    ("0f 04", UNKNOWN, "undefined 0F 04"),
    ("0f 0f c0 b4", UNKNOWN, "3DNow!: deliberately refused"),
    ("8f e8 78 9e 00 00", UNKNOWN, "XOP: deliberately refused"),
    ("66 e8 00 00 00 00", UNKNOWN, "66 call rel32: vendor-dependent"),
    ("0f 38 c0 c0", UNKNOWN, "undefined 0F38 C0"),
    ("0f 38 20 c0", INVALID, "pmovsxbw without its mandatory 66"),
    ("66 c5 f8 10 c0", INVALID, "66 before VEX"),
    ("48 c5 f8 10 c0", INVALID, "REX before VEX"),
    ("c4 e4 fc 10 c0", UNKNOWN, "VEX map 4"),
    ("62 f9 7c 48 10 c0", INVALID, "EVEX reserved bit set"),
    ("ff f8", INVALID, "FF /7"),
    ("48 8d c0", INVALID, "lea with a register operand"),
    ("2e " * 15 + "90", INVALID, "16 bytes: over the 15-byte limit"),
])
def test_refusals(hexbytes: str, status: int, what: str) -> None:
    assert length(hexbytes) == status, what


@pytest.mark.parametrize("hexbytes", [
    "48 8b 05 11 22 33 44", "48 b8 88 77 66 55 44 33 22 11", "0f 84 00 01 00 00",
    "62 f1 7c 48 10 05 00 00 00 00", "f3 0f 1e fa", "66 66 48 e8 00 00 00 00",
])
def test_truncated_at_every_cut(hexbytes: str) -> None:
    n = len(bytes.fromhex(hexbytes.replace(" ", "")))
    for cut in range(0, n):
        assert length(hexbytes, cut) == TRUNCATED, cut
    assert length(hexbytes, n) == n


def test_bulk_api_matches_single() -> None:
    buf = x86_agreement.generate(5000, seed=7)
    bulk = x86_agreement.our_lengths(buf)
    single = [lib.memhook_x86_insn_length(bytes(row), len(row)) for row in buf]
    assert bulk.tolist() == single
    out = np.zeros(5000, np.int8)
    ok = lib.memhook_x86_lengths(ffi.from_buffer(buf), buf.shape[1], buf.shape[0],
                                 ffi.from_buffer("int8_t[]", out))
    assert ok == sum(1 for v in single if v > 0)


def _walk(code: bytes, md) -> list[tuple[int, int, int]]:
    """(offset, ours, capstone's) for each instruction both decode within
    the known bytes."""
    rows = []
    off = 0
    while off < len(code):
        ours = lib.memhook_x86_insn_length(code[off:], len(code) - off)
        cs = next(md.disasm_lite(code[off:], 0, 1), None)
        if ours == TRUNCATED and (cs is None or off + cs[1] > len(code) or cs[1] == 0):
            break  # the vector ends inside this instruction
        rows.append((off, ours, cs[1] if cs else -1))
        if ours <= 0 or cs is None or ours != cs[1]:
            break
        off += ours
    return rows


def test_prologue_vectors_agree_with_capstone() -> None:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    libraries = json.loads(VECTORS.read_text())["libraries"]
    insns = 0
    bad = []
    for library, symbols in libraries.items():
        for name, (size, hexbytes) in symbols.items():
            code = bytes.fromhex(hexbytes)[:size] if size else bytes.fromhex(hexbytes)
            for off, ours, theirs in _walk(code, md):
                insns += 1
                if ours != theirs:
                    bad.append(f"{library}: {name} +{off}: ours={ours} capstone={theirs} "
                               f"{code[off:off + 16].hex()}")
    print(f"prologue vectors: {insns} instructions, {len(bad)} disagreements")
    assert not bad, "\n".join(bad[:20])
    assert insns > 10000


def test_deliberate_lists_are_tiny_and_explained() -> None:
    entries = x86_agreement.DELIBERATE + x86_agreement.DELIBERATE_LENGTH
    assert len(entries) <= 6
    for name, reason, pred in entries:
        assert name and len(reason) > 30 and callable(pred)


def test_a_million_random_sequences_agree_with_capstone() -> None:
    count = int(os.environ.get("MEMHOOK_X86_AGREEMENT_COUNT", "1000000"))
    t0 = time.monotonic()
    result = x86_agreement.compare(x86_agreement.generate(count, seed=20240611), keep_examples=10)
    elapsed = time.monotonic() - t0
    c = result["counts"]
    print(f"\nx86 agreement: {c.get('agree', 0)}/{c['cs_decodes']} of {count} sequences where "
          f"capstone decodes ({c.get('deliberate', 0)} deliberate: "
          + ", ".join(f"{k.split(':', 1)[1]}={v}" for k, v in sorted(c.items())
                      if k.startswith("deliberate:"))
          + f"); decoded only by us: {c.get('cs_refuses', 0)} "
          f"(VEX/EVEX {c.get('cs_refuses:vex', 0)}, legacy {c.get('cs_refuses:legacy', 0)}); "
          f"both refuse: {c.get('both_refuse', 0)}; {elapsed:.1f} s")
    assert c["total"] == count
    assert c.get("len_mismatch", 0) == 0, result["examples"].get("len_mismatch")
    assert c.get("we_refuse", 0) == 0, result["examples"].get("we_refuse")
    assert c["agree"] + c.get("deliberate", 0) == c["cs_decodes"]
    assert c["agree"] > count // 2
