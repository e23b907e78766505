#!/usr/bin/env python3
"""Where a hooked alloc+free pair's ns go: the core as it is, beside the core
built with one piece of the hook path left out at a time, each measured
against the originals in the same process (bench/hooks/hook_cost_split.c).

The pieces (each a copy of csrc/ with the lines below replaced):

  stamp    both events' timestamps (coarse: CLOCK_MONOTONIC_COARSE; with
           --precise: lfence+rdtsc, rdtsc)
  fence    (--precise only) the lfence before the ALLOC's rdtsc
  links    the drain's order words: the address chain's read and write,
           the marker epoch
  device   the ALLOC's device: cuCtxGetDevice where the driver shows
           several devices (with one, a load: this piece is then ~0)
  live     (--exact only: outside exact sizes the drain sizes FREEs) the
           live table (insert at ALLOC, find and forget at FREE), and
           with it the fences its CASes lend the pending flag
  table    (--exact only) the live table's own work: a fence in place of
           its CASes
  caller   caller attribution (the wrapper's note, the event's compare)
  all      stamp, links, device, live, caller: what is left is the
           wrappers and writing two events into the queue

The drainer thread calls memhook_events_drain_background where the core
has it (it reads each lane's count once and stays 16 events behind a lane
being written, off the lines its producer writes next: issue 26 item 4),
memhook_events_drain in a core from before (--compare an older revision:
the before/after of that change).

A piece's cost is the core's added ns minus the variant's, in the same run
(variants interleaved, --reps times, medians).  The variants are for
measuring only: they record wrong events.  --compare REV adds the core of
another revision (git archive REV csrc/), as built: the before of a
before/after, in the same run.

    python3 bench/hooks/hook_cost_split.py             # stub driver, a drainer thread
    python3 bench/hooks/hook_cost_split.py --same      # drained by the measured thread
    python3 bench/hooks/hook_cost_split.py --precise   # precise timestamps
    python3 bench/hooks/hook_cost_split.py --exact     # FREEs sized in the hook (as under the trace)
    python3 bench/hooks/hook_cost_split.py --real      # the system's libcuda.so.1
    python3 bench/hooks/hook_cost_split.py --compare 018144a --pieces all

If a replacement no longer matches csrc/, this script says which: update
KNOCKOUTS with the code.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CSRC = ROOT / "csrc"
CFLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
          f"-I{CSRC / 'include'}"]

# piece -> [(file under csrc/, text, replacement)]
KNOCKOUTS: dict[str, list[tuple[str, str, str]]] = {
    "stamp": [("cuda/cuda_hooks.h",
               "s.at = mh_clock_stamp(&s.flags, mh_stamp_precise(), ordered);",
               "s.at = 0;\n    (void)ordered;")],
    "fence": [("queue/queue.h", "        if (ordered)\n            __builtin_ia32_lfence();\n",
               "        (void)ordered;\n")],
    "links": [("cuda/emit_inline.h", "    if (link == 0 && addr != 0)\n        link = mh_addr_chain_last(addr);\n",
               ""),
              ("cuda/emit_inline.h", "    if (addr != 0 && self != 0)\n        mh_addr_chain_note(addr, self);\n",
               "    (void)self;\n"),
              ("cuda/emit_inline.h", "((flags & MH_EVENT_MARKER) ? 0 : mh_epoch_flags())", "0")],
    "device": [("cuda/emit_inline.h", "device = result == 0 ? mh_alloc_device() : mh_current_device();",
                "device = 0;")],
    "live": [("cuda/emit_inline.h", "if (exact && result == 0 && addr != 0 && mh_hooks[f].tracked)\n",
              "if (0)\n"),
             ("cuda/emit.c", "plan->from_table = mh_live_find(addr, &plan->rec, &plan->table_slot);",
              "plan->from_table = false;\n    plan->rec = (mh_live){.size = 64, .mem_type = 1};"),
             ("cuda/emit.c", "plan->known = plan->from_table;", "plan->known = true;")],
    "caller": [("cuda/emit_inline.h", "e->caller = mh_caller_get();", "e->caller = 0;"),
               ("cuda/cuda_signatures.h", "        return real_ args;                                                    \\\n    MH_CALLER_NOTE();",
                "        return real_ args;")],
}
# The live table's own work, without the fences its locked instructions
# lend the pending flag (event_lane.h): a seq_cst fence in their place.
KNOCKOUTS["table"] = [*KNOCKOUTS["live"],
                      ("cuda/emit_inline.h", "    mh_lane_announce(fenced);",
                       "    (void)fenced;\n    atomic_thread_fence(memory_order_seq_cst);\n"
                       "    mh_lane_announce(true);"),
                      ("cuda/emit.c", "    mh_lane_announce(plan->from_table);",
                       "    atomic_thread_fence(memory_order_seq_cst);\n"
                       "    mh_lane_announce(true);")]
KNOCKOUTS["all"] = [k for piece in ("stamp", "links", "device", "live", "caller")
                    for k in KNOCKOUTS[piece]]
PRECISE_ONLY = {"fence"}


def make_variant(tmp: Path, name: str, compare: str | None = None) -> Path:
    """csrc/ with `name`'s replacements (or, for "compare", revision
    `compare`'s csrc/ as it is), built; returns its libmemhook.so."""
    src = tmp / f"src-{name}" / "csrc"
    if name == "compare":
        src.parent.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", str(compare), "csrc"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src.parent)], input=archive, check=True)
    else:
        shutil.copytree(CSRC, src)
    for rel, old, new in KNOCKOUTS.get(name, []):
        path = src / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"hook_cost_split: knockout {name!r} no longer matches {rel}: "
                             f"{old!r} (update KNOCKOUTS in {__file__})")
        path.write_text(text.replace(old, new))
    out = tmp / f"core-{name}"
    subprocess.run([sys.executable, str(src / "build_native.py"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out / "memhook" / "libmemhook.so"


def run_once(exe: Path, core: Path, libcuda: str, same: bool,
             clock: str) -> dict[str, float]:
    proc = subprocess.run([str(exe), str(core), libcuda, "same" if same else "drainer", clock],
                          capture_output=True, text=True, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="store_true", help="the system's libcuda.so.1")
    ap.add_argument("--same", action="store_true", help="drain in the measured thread")
    ap.add_argument("--precise", action="store_true",
                    help="precise timestamps, as under memhook trace")
    ap.add_argument("--exact", action="store_true",
                    help="exact sizes (FREEs sized in the hook, precise stamps), as "
                         "subscribe(exact=True) and memhook trace")
    ap.add_argument("--compare", metavar="REV",
                    help="also the core of git revision REV, as built (a before/after)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pieces", default=None,
                    help="comma list (default: stamp,links,device,live,caller,all; "
                         "with --precise also fence)")
    args = ap.parse_args()
    if args.exact:
        args.precise = True
    clock = "exact" if args.exact else "precise" if args.precise else "coarse"
    default = "stamp,fence,links,device,live,caller,all" if args.exact else \
        "stamp,fence,links,device,caller,all" if args.precise else "stamp,links,device,caller,all"
    pieces = [p for p in (args.pieces or default).split(",") if p]
    for p in pieces:
        if p not in KNOCKOUTS:
            raise SystemExit(f"unknown piece {p!r}; valid: {', '.join(KNOCKOUTS)}")
        if p in PRECISE_ONLY and not args.precise:
            raise SystemExit(f"piece {p!r} is in the precise path only: add --precise")
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        exe = tmp / "hook_cost_split"
        subprocess.run([cc, *CFLAGS, str(HERE / "hook_cost_split.c"), "-o", str(exe), "-ldl",
                        "-lpthread"], check=True)
        if args.real:
            libcuda = "libcuda.so.1"
        else:
            (tmp / "stub").mkdir()
            libcuda = str(tmp / "stub" / "libcuda.so.1")
            subprocess.run([cc, *CFLAGS, "-fPIC", "-shared", "-fvisibility=hidden",
                            "-fno-optimize-sibling-calls", str(ROOT / "bench" / "common" / "hook_bench_stub_driver.c"),
                            "-o", libcuda, "-Wl,-soname,libcuda.so.1"], check=True)
        names = ["core", *pieces, *(["compare"] if args.compare else [])]
        with concurrent.futures.ThreadPoolExecutor() as pool:
            cores = dict(zip(names, pool.map(lambda n: make_variant(tmp, n, args.compare),
                                             names)))
        results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for _ in range(args.reps):
            for n in names:
                results[n].append(run_once(exe, cores[n], libcuda, args.same, clock))
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in results.items()}
    print(f"driver {'real' if args.real else 'stub'}, drained by "
          f"{'the measured thread' if args.same else 'a drainer thread'}, "
          f"{'exact sizes, ' if args.exact else ''}"
          f"{'precise' if args.precise else 'coarse'} timestamps, bistro, "
          f"cuMemAllocAsync+cuMemFreeAsync, {args.reps} runs interleaved (medians)")
    print(f"original pair: {med['core']['original_ns']:.1f} ns")
    print(f"{'core':<10} {'added mean':>11} {'added median':>13} {'piece costs (mean)':>19}")
    base = med["core"]
    print(f"{'as built':<10} {base['mean_added_ns']:>11.1f} {base['median_added_ns']:>13.1f}")
    for n in pieces:
        m = med[n]
        print(f"{'- ' + n:<10} {m['mean_added_ns']:>11.1f} {m['median_added_ns']:>13.1f} "
              f"{base['mean_added_ns'] - m['mean_added_ns']:>19.1f}")
    if args.compare:
        m = med["compare"]
        print(f"{args.compare[:10]:<10} {m['mean_added_ns']:>11.1f} {m['median_added_ns']:>13.1f} "
              f"{'(that revision, as built)':>19}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
