"""Child of test_agreement.py: for every function of LIB (nm -D -S), the
verdict of memhook_bistro_analyze on its bytes equals install's, with the
5- and the 12-byte jump.  Installs go through memhook_bistro_install_batch
(one protocol pass per form), are removed the same way, and the bytes are
checked to be back.  Prints "AGREE n" or the disagreements.

    python agreement_child.py CORE LIB
"""

from __future__ import annotations

import ctypes
import subprocess
import sys


class Analysis(ctypes.Structure):
    _fields_ = [("patchable", ctypes.c_int), ("jump_size", ctypes.c_int),
                ("patch_offset", ctypes.c_size_t), ("consumed", ctypes.c_size_t),
                ("refusal", ctypes.c_int), ("reason", ctypes.c_char * 256)]


class Request(ctypes.Structure):
    _fields_ = [("target", ctypes.c_void_p), ("hook", ctypes.c_void_p),
                ("jump_size", ctypes.c_int), ("original", ctypes.POINTER(ctypes.c_void_p)),
                ("patch", ctypes.c_void_p), ("err", ctypes.c_int), ("why", ctypes.c_char * 256)]


def main() -> int:
    core, path = sys.argv[1], sys.argv[2]
    mh = ctypes.CDLL(core)
    lib = ctypes.CDLL(path)
    mh.memhook_bistro_install_batch.restype = ctypes.c_size_t
    mh.memhook_bistro_remove_batch.restype = ctypes.c_size_t
    mh.memhook_bistro_analyze.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64,
                                          ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64,
                                          ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.POINTER(Analysis)]
    nm = subprocess.run(["nm", "-D", "-S", "--defined-only", path], capture_output=True,
                        text=True, check=True).stdout
    funcs = []
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in ("T", "t"):
            size = int(parts[1], 16)
            addr = ctypes.cast(getattr(lib, parts[3]), ctypes.c_void_p).value
            funcs.append((parts[3], addr, size))
    hook = ctypes.cast(mh.memhook_bistro_analyze, ctypes.c_void_p).value  # any code
    bad = []
    for jump in (5, 12):
        verdict = {}
        for name, addr, size in funcs:
            out = Analysis()
            mh.memhook_bistro_analyze(addr, size, addr, size, jump, addr + (1 << 20),
                                      name.encode(), path.encode(), ctypes.byref(out))
            verdict[name] = (bool(out.patchable), out.reason.decode(errors="replace"))
        before = {name: ctypes.string_at(addr, min(size, 16)) for name, addr, size in funcs}
        originals = (ctypes.c_void_p * len(funcs))()
        reqs = (Request * len(funcs))()
        for i, (name, addr, size) in enumerate(funcs):
            reqs[i].target, reqs[i].hook, reqs[i].jump_size = addr, hook, jump
            reqs[i].original = ctypes.cast(ctypes.byref(originals, i * 8),
                                           ctypes.POINTER(ctypes.c_void_p))
        mh.memhook_bistro_install_batch(reqs, len(funcs))
        live = []
        for i, (name, addr, size) in enumerate(funcs):
            ok = reqs[i].err == 0
            if ok != verdict[name][0]:
                bad.append(f"{jump}-byte {name}: analyze says {verdict[name][0]} "
                           f"({verdict[name][1]}), install says {ok} "
                           f"({reqs[i].why.decode(errors='replace')})")
            if ok:
                live.append(reqs[i].patch)
        patches = (ctypes.c_void_p * max(1, len(live)))(*live)
        errs = (ctypes.c_int * max(1, len(live)))()
        removed = mh.memhook_bistro_remove_batch(patches, errs, len(live))
        if removed != len(live):
            bad.append(f"{jump}-byte: removed {removed} of {len(live)}: {list(errs)[:8]}")
        for name, addr, size in funcs:
            if ctypes.string_at(addr, min(size, 16)) != before[name]:
                bad.append(f"{jump}-byte {name}: bytes not restored")
    for b in bad[:40]:
        print("DISAGREE", b)
    print(f"AGREE {len(funcs) * 2 - len(bad)} of {len(funcs) * 2}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
