#!/usr/bin/env bash
# Issue 36's GPU evidence in one device call (after tools/gpu/device_setup.sh):
#   1. a PyTorch program runs the GPU out of memory while cuBLAS and a CuPy
#      array hold memory: the trace's OOM report (text summary and jsonl
#      "oom" record), and the --oom-snapshot pickle opened by
#      torch.cuda._memory_viz;
#   2. torchrun --nproc-per-node 2 (gloo, one GPU), each worker under
#      `memhook trace -o t-%r.jsonl`, merged into one Perfetto JSON.
set -u
out=${OUT:-/tmp/memhook-gpu-out}/trace-questions
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
rc=0
echo "== 1. OOM: PyTorch fills the device beside cuBLAS and CuPy"
python3 -m memhook trace -f jsonl -o "$out/oom.jsonl" --python --stacks \
    --oom-snapshot "$out/oom-snapshot.pickle" -- python3 "$here/tools/gpu/oom_torch_cupy.py" \
    2> "$out/oom-summary.txt" || rc=1
sed -n '/OOM/,$p' "$out/oom-summary.txt" | head -60
python3 - "$out" <<'PY' || rc=1
import json, pickle, sys
from pathlib import Path
out = Path(sys.argv[1])
ooms = [r for r in map(json.loads, open(out / "oom.jsonl")) if r.get("kind") == "oom"]
print(f"jsonl oom records: {len(ooms)}")
if ooms:
    first = ooms[0]
    print(json.dumps({k: first[k] for k in first if k not in ("largest", "live")}, default=str)[:1500])
from torch.cuda import _memory_viz
snap = pickle.load(open(out / "oom-snapshot.pickle", "rb"))
html = _memory_viz.segment_plot(snap)
(out / "oom-segments.html").write_text(html)
print(f"_memory_viz.segment_plot: {len(html)} bytes of HTML, segments {len(snap['segments'])}")
assert ooms and snap["segments"], "no OOM report or empty snapshot"
PY
echo "== 2. torchrun --nproc-per-node 2 (gloo) traced per rank and merged"
(cd "$out" && rm -f t-*.jsonl && timeout 300 torchrun --nproc-per-node 2 --no-python \
    python3 -m memhook trace -f jsonl -o "t-%r.jsonl" -- python3 "$here/tools/gpu/torchrun_worker.py") || rc=1
ls -la "$out"/t-*.jsonl
python3 -m memhook merge "$out"/t-*.jsonl -f chrome -o "$out/merged.json" || rc=1
python3 - "$out/merged.json" <<'PY' || rc=1
import json, sys, collections
doc = json.load(open(sys.argv[1]))
events = doc["traceEvents"] if isinstance(doc, dict) else doc
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
per = collections.Counter(e["pid"] for e in events if e.get("ph") not in ("M",))
print("process tracks:", names)
print("events per track:", dict(per))
assert len(names) >= 2, "fewer than 2 rank tracks"
PY
python3 -m memhook merge "$out"/t-*.jsonl -f jsonl -o "$out/merged.jsonl" 2>&1 | tail -15 || rc=1
exit $rc
