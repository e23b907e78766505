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
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace >/tmp/memhook-build.log 2>&1 || { tail -30 /tmp/memhook-build.log; exit 1; }
python3 -m memhook trace -m bistro,reloc -f jsonl -o "$out/workers.jsonl" -- \
    python3 tools/gpu/trace_workers.py run "$out/workers.pids" >"$out/workers.txt" 2>&1
echo "trace exit $?"
cat "$out/workers.txt" | tail -40
python3 tools/gpu/trace_workers.py check "$out/workers.pids" "$out/workers.jsonl" | tee "$out/check.txt"
