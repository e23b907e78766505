#!/usr/bin/env bash
# Issue 14's GPU evidence, for the device tool:
#     bash tools/gpu/trace_workers_on_gpu.sh "$OUT"   (carry .whl as trace_on_gpu.sh does)
# A DataLoader (num_workers=2) and a torch.multiprocessing spawn job whose
# workers allocate CUDA and pinned memory, traced in mode bistro,reloc;
# then every worker's events are counted in the trace.
set -u
out=${1:?usage: trace_workers_on_gpu.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
# cffi from the carried .whl/, memhook built in place (device_setup.sh).
. tools/gpu/device_setup.sh || exit 1
python3 -m memhook trace -m bistro,reloc -f jsonl -o "$out/workers.jsonl" -- \
    python3 tools/gpu/trace_workers.py run "$out/workers.pids" >"$out/workers.txt" 2>&1
echo "trace exit $?"
cat "$out/workers.txt" | tail -40
python3 tools/gpu/trace_workers.py check "$out/workers.pids" "$out/workers.jsonl" | tee "$out/check.txt"
