"""What tools/gpu/pyframes_on_gpu.sh's traces say (issue 28's evidence):
``python3 tools/gpu/pyframes_check.py OUTDIR``.

For each program traced (OUTDIR/NAME.jsonl): which ALLOCs got Python
frames and which did not, and why (python_note), by thread and by calling
library; which of the workload's ``# SITE:`` lines the ALLOCs name. For
each memviz file (OUTDIR/NAME.pickle): PyTorch's own reader,
torch.cuda._memory_viz, formats the snapshot's frames, and the workload's
lines must be in what it prints.  Exit status 1 if a check fails.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "pyframes_workloads.py")


def sites() -> dict[int, str]:
    """line -> site name, from the workload's ``# SITE: name`` comments."""
    out = {}
    with open(WORKLOADS) as f:
        for i, line in enumerate(f, 1):
            m = re.search(r"# SITE: (\w+)$", line.rstrip())
            if m:
                out[i] = m.group(1)
    return out


def report_jsonl(name: str, path: str) -> bool:
    events = [json.loads(line) for line in open(path) if line.strip()]
    allocs = [e for e in events if e["kind"] == "alloc" and e["result"] == 0]
    if not allocs:
        print(f"{name}: no allocations traced")
        return False
    pids = collections.Counter(e["pid"] for e in allocs)
    main_pid = min(pids)  # (the traced command starts first)
    with_py = [e for e in allocs if e.get("python")]
    print(f"{name}: {len(allocs)} ALLOCs, {len(with_py)} with Python frames, "
          f"{len(allocs) - len(with_py)} without; processes {dict(pids)}")
    why = collections.Counter()
    for e in allocs:
        if e.get("python"):
            continue
        lib = os.path.basename((e.get("caller") or {}).get("object") or "?")
        thread = "main thread" if e["tid"] == e["pid"] else f"thread {e['tid']}"
        why[(e.get("python_note", "?"), lib, thread, e["function"])] += 1
    for (note, lib, thread, fn), n in why.most_common(20):
        print(f"  without: {n:>5} x {fn} from {lib} on {thread}: {note}")
    by_thread = collections.Counter(("main" if e["tid"] == e["pid"] else "other", bool(e.get("python")))
                                    for e in allocs)
    print(f"  by thread (kind, has frames): {dict(by_thread)}")
    known = sites()
    named = collections.Counter()
    for e in with_py:
        for f in e["python"]:
            if f["file"] == WORKLOADS and f["line"] in known:
                named[known[f["line"]]] += 1
                break
    print(f"  workload lines named: {dict(named)}")
    tops = collections.Counter()
    for e in with_py:
        f = e["python"][0]
        tops[f"{os.path.basename(f['file'])}:{f['line']} ({f['function']})"] += e["size"]
    for site, b in tops.most_common(8):
        print(f"  innermost frame {site:<60} {b / 2**20:10.1f} MiB")
    return bool(named)


def check_memviz(name: str, path: str) -> bool:
    from torch.cuda import _memory_viz as mv

    snap = pickle.load(open(path, "rb"))
    # PyTorch's own formatting of the snapshot's frames: the flamegraph
    # lines of segments() and memory() (given a formatter that returns
    # them as they are: the default one downloads flamegraph.pl).
    text = []
    for fn in (mv.segments, mv.memory):
        try:
            text.append(fn(snap, format_flamegraph=lambda lines: lines))
        except TypeError:  # an older signature
            text.append(fn(snap))
    entries = [e for t in snap["device_traces"] for e in t]
    # _frames_fmt gives one string per frame.
    text.append("\n".join("\n".join(mv._frames_fmt(e["frames"], full_filename=True)) if
                          hasattr(mv, "_frames_fmt") else str(e["frames"]) for e in entries))
    blob = "\n".join(str(t) for t in text)
    known = sites()
    found = sorted({label for line, label in known.items()
                    if f"pyframes_workloads.py:{line}:" in blob})
    print(f"{name} memviz: {len(snap['segments'])} segments, {len(entries)} trace entries; "
          f"torch.cuda._memory_viz shows workload lines {found or 'NONE'}")
    return bool(found)


def main() -> int:
    out = sys.argv[1]
    ok = True
    for name in ("torch", "jax", "cupy"):
        jsonl = os.path.join(out, f"{name}.jsonl")
        if os.path.exists(jsonl):
            ok = report_jsonl(name, jsonl) and ok
        pkl = os.path.join(out, f"{name}.pickle")
        if os.path.exists(pkl):
            try:
                ok = check_memviz(name, pkl) and ok
            except ImportError:
                print(f"{name} memviz: torch not importable; not checked")
    print("CHECKS PASSED" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
