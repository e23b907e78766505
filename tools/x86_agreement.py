#!/usr/bin/env python3
"""Differential check of bistro's x86-64 length decoder against capstone.

Generates byte sequences (uniformly random, and biased toward legacy
prefixes / REX / the 0F maps / ModRM-heavy moves / VEX and EVEX), asks both
decoders for the length of the first instruction, and counts:

  agree         both decode, same length
  both_refuse   neither decodes
  len_mismatch  both decode, different lengths                (a bug)
  we_refuse     capstone decodes, we refuse, not deliberate    (a bug)
  deliberate    capstone decodes, we refuse on purpose (DELIBERATE below)
  cs_refuses    we decode, capstone does not (mostly opcodes capstone
                validates more strictly: mandatory prefixes, EVEX.W, x87
                holes...; the length is still the architectural one)

Our side runs in bulk through memhook_x86_lengths (one C call for all
sequences); capstone runs once per sequence through disasm_lite.

    python tools/x86_agreement.py --count 1000000 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import numpy as np

STRIDE = 16  # 15-byte maximum instruction + 1

# Refused on purpose although capstone decodes them; each entry is
# (name, reason, predicate on the sequence's bytes).  Keep this tiny.
LEGACY_PREFIXES = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3}


def _strip_prefixes(seq: bytes) -> tuple[set[int], bool, bytes]:
    """(legacy prefixes seen, REX right before the opcode?, rest)."""
    seen: set[int] = set()
    rex = False
    i = 0
    while i < len(seq):
        b = seq[i]
        if b in LEGACY_PREFIXES:
            seen.add(b)
            rex = False
        elif 0x40 <= b <= 0x4F:
            rex = True
        else:
            break
        i += 1
    return seen, rex, seq[i:]


def _is_3dnow(seq: bytes) -> bool:
    _, _, rest = _strip_prefixes(seq)
    return rest[:2] in (b"\x0f\x0f", b"\x0f\x0e")


def _is_xop(seq: bytes) -> bool:
    _, _, rest = _strip_prefixes(seq)
    return len(rest) >= 3 and rest[0] == 0x8F and ((rest[1] >> 3) & 7) != 0


def _is_prefixed_vex(seq: bytes) -> bool:
    seen, _, rest = _strip_prefixes(seq)
    return bool(rest) and rest[0] in (0xC4, 0xC5, 0x62) and bool(seen & {0x66, 0xF2, 0xF3})


def _is_opsize_rel32(seq: bytes) -> bool:
    seen, rex, rest = _strip_prefixes(seq)
    if 0x66 not in seen or not rest or (rex and seq[len(seq) - len(rest) - 1] & 8):
        return False
    return (rest[0] in (0xE8, 0xE9) or (len(rest) > 1 and rest[0] == 0x0F and
            0x80 <= rest[1] <= 0x8F) or rest[:2] == b"\xc7\xf8")


def _is_ud0_ud1(seq: bytes) -> bool:
    _, _, rest = _strip_prefixes(seq)
    return rest[:2] in (b"\x0f\xff", b"\x0f\xb9")


DELIBERATE = (
    ("3dnow", "AMD 3DNow! (0F 0F, 0F 0E): gone from AMD CPUs since 2010, never emitted "
     "by the toolchains that build CUDA libraries", _is_3dnow),
    ("xop", "AMD XOP (8F with ModRM.reg != 0): same", _is_xop),
    ("prefixed-vex", "66/F2/F3 before VEX/EVEX: #UD (SDM vol. 2, 2.3.2); capstone ignores it",
     _is_prefixed_vex),
    ("opsize-rel32", "66 (without REX.W) before a rel32 jmp/jcc/call/xbegin: Intel ignores "
     "it, AMD makes it rel16; capstone itself is inconsistent; no compiler emits it",
     _is_opsize_rel32),
)

def _is_ret_imm16_opsize_rexw(seq: bytes) -> bool:
    seen, rex, rest = _strip_prefixes(seq)
    i = len(seq) - len(rest)
    return (0x66 in seen and rex and bool(seq[i - 1] & 8) and rest[:1] in (b"\xc2", b"\xca"))


# Where we and capstone decode different LENGTHS on purpose.
DELIBERATE_LENGTH = (
    ("ud0-ud1", "UD0 (0F FF) / UD1 (0F B9) take a ModRM per the SDM since 2017 (LLVM "
     "emits ud1 with one); capstone follows the older text without", _is_ud0_ud1),
    ("ret-imm16", "ret/retf imm16 with 66 and REX.W: always imm16 (SDM); capstone 5 reads "
     "an imm32 (a capstone bug)", _is_ret_imm16_opsize_rexw),
)


def deliberate_reason(seq: bytes) -> str | None:
    for name, _, pred in DELIBERATE:
        if pred(seq):
            return name
    return None


# ---------------------------------------------------------------- generators

def generate(count: int, seed: int) -> np.ndarray:
    """count x STRIDE bytes; a mix of uniform and biased sequences."""
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 256, size=(count, STRIDE), dtype=np.uint8)
    kind = rng.integers(0, 6, size=count)
    prefixes = np.array(sorted(LEGACY_PREFIXES), dtype=np.uint8)

    def rows(k: int) -> np.ndarray:
        return np.nonzero(kind == k)[0]

    # kind 0: uniform random (already).
    # kind 1: 1-3 legacy prefixes, maybe REX, then the rest random.
    r = rows(1)
    npre = rng.integers(1, 4, size=len(r))
    for j in range(3):
        sel = r[npre > j]
        buf[sel, j] = rng.choice(prefixes, size=len(sel))
    rex_sel = rng.random(len(r)) < 0.5
    pos = npre[rex_sel]
    buf[r[rex_sel], pos] = rng.integers(0x40, 0x50, size=rex_sel.sum(), dtype=np.uint8)
    # kind 2: [66|F2|F3] [REX] 0F xx ...  (and 0F 38 / 0F 3A a third of the time)
    r = rows(2)
    opt = rng.integers(0, 4, size=len(r))  # 0: none, 1: 66, 2: F2, 3: F3
    pfx = np.array([0x90, 0x66, 0xF2, 0xF3], dtype=np.uint8)[opt]
    has_rex = rng.random(len(r)) < 0.4
    for idx, row in enumerate(r):
        out = []
        if opt[idx]:
            out.append(int(pfx[idx]))
        if has_rex[idx]:
            out.append(0x48 | int(rng.integers(0, 8)))
        out.append(0x0F)
        esc = rng.integers(0, 3)
        if esc == 1:
            out.append(0x38)
        elif esc == 2:
            out.append(0x3A)
        buf[row, :len(out)] = out
    # kind 3: REX.W + common one-byte ModRM opcodes (realistic prologue-ish).
    r = rows(3)
    common = np.array([0x01, 0x03, 0x29, 0x2B, 0x31, 0x39, 0x3B, 0x63, 0x69, 0x6B, 0x81, 0x83,
                       0x85, 0x89, 0x8B, 0x8D, 0xC1, 0xC7, 0xF7, 0xFF], dtype=np.uint8)
    buf[r, 0] = rng.integers(0x40, 0x50, size=len(r), dtype=np.uint8)
    buf[r, 1] = rng.choice(common, size=len(r))
    # kind 4: VEX / EVEX with a plausible payload (maps 1-3 mostly).
    r = rows(4)
    lead = rng.choice(np.array([0xC4, 0xC5, 0x62], dtype=np.uint8), size=len(r))
    buf[r, 0] = lead
    c4 = r[lead == 0xC4]
    buf[c4, 1] = (buf[c4, 1] & 0xE0) | rng.integers(1, 4, size=len(c4), dtype=np.uint8)
    e = r[lead == 0x62]
    buf[e, 1] = (buf[e, 1] & 0xF0) | rng.integers(1, 4, size=len(e), dtype=np.uint8)
    buf[e, 2] |= 0x04
    # kind 5: a short sequence from the common prologue vocabulary, then random.
    r = rows(5)
    vocab = [b"\x55", b"\x48\x89\xe5", b"\x41\x54", b"\x48\x83\xec", b"\x83\x3d",
             b"\xf3\x0f\x1e\xfa", b"\x48\x8b\x05", b"\x48\x8d\x05", b"\xe8", b"\xe9", b"\x74",
             b"\x0f\x84", b"\x81\x3d", b"\x66\x0f\x1f\x44", b"\x0f\xb6\x05", b"\xc5\xf9"]
    pick = rng.integers(0, len(vocab), size=len(r))
    for row, p in zip(r, pick):
        v = vocab[p]
        buf[row, :len(v)] = np.frombuffer(v, dtype=np.uint8)
    return buf


# ------------------------------------------------------------------- compare

def our_lengths(buf: np.ndarray) -> np.ndarray:
    from memhook._binding.core import ffi, lib

    buf = np.ascontiguousarray(buf, dtype=np.uint8)
    out = np.zeros(buf.shape[0], dtype=np.int8)
    lib.memhook_x86_lengths(ffi.from_buffer(buf), buf.shape[1], buf.shape[0],
                            ffi.from_buffer("int8_t[]", out))
    return out


def compare(buf: np.ndarray, keep_examples: int = 10) -> dict:
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    disasm = md.disasm_lite
    ours = our_lengths(buf)
    raw = buf.tobytes()
    stride = buf.shape[1]
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    mv = memoryview(raw)
    for i, mine in enumerate(ours.tolist()):
        seq = mv[i * stride:(i + 1) * stride]
        cs = next(disasm(seq, 0, 1), None)
        if cs is not None:
            if mine > 0:
                if mine == cs[1]:
                    counts["agree"] += 1
                    continue
                why = next((name for name, _, pred in DELIBERATE_LENGTH if pred(bytes(seq))), None)
                if why:
                    counts["deliberate"] += 1
                    counts["deliberate:" + why] += 1
                    continue
                key = "len_mismatch"
            else:
                why = deliberate_reason(bytes(seq))
                if why:
                    counts["deliberate"] += 1
                    counts["deliberate:" + why] += 1
                    continue
                key = "we_refuse"
            counts[key] += 1
            if len(examples[key]) < keep_examples:
                examples[key].append(f"{bytes(seq[:cs[1]]).hex()} cs={cs[1]} ours={mine} "
                                     f"({cs[2]} {cs[3]})")
        elif mine > 0:
            counts["cs_refuses"] += 1
            _, _, rest = _strip_prefixes(bytes(seq))
            sub = "cs_refuses:vex" if rest[:1] in (b"\xc4", b"\xc5", b"\x62") else \
                "cs_refuses:legacy"
            counts[sub] += 1
            if len(examples[sub]) < keep_examples:
                examples[sub].append(f"{bytes(seq[:mine]).hex()} ours={mine}")
        else:
            counts["both_refuse"] += 1
    counts["total"] = len(ours)
    counts["cs_decodes"] = counts["agree"] + counts["len_mismatch"] + counts["we_refuse"] + \
        counts["deliberate"]
    return {"counts": dict(counts), "examples": dict(examples)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--examples", type=int, default=10)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    buf = generate(args.count, args.seed)
    result = compare(buf, args.examples)
    dt = time.monotonic() - t0
    c = result["counts"]
    for key, items in sorted(result["examples"].items()):
        print(f"{key}:")
        for item in items:
            print(f"  {item}")
    print(", ".join(f"{k}={v}" for k, v in sorted(c.items())))
    print(f"agreement: {c.get('agree', 0)}/{c.get('cs_decodes', 0)} sequences capstone decodes "
          f"({c.get('deliberate', 0)} deliberately refused, {c.get('cs_refuses', 0)} decoded "
          f"only by us) of {c['total']} in {dt:.1f} s")
    return 0 if c.get("len_mismatch", 0) == 0 and c.get("we_refuse", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
