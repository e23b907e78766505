#!/usr/bin/env bash
# Issue 28's GPU evidence, for the device tool (carry .whl as trace_on_gpu.sh does):
#     bash tools/gpu/pyframes_on_gpu.sh "$OUT"
# Under `memhook trace --python --stacks` (mode bistro,reloc): a PyTorch
# training step with a DataLoader (2 workers, pin_memory), a JAX program and
# a CuPy program (each where it imports), as jsonl and as memviz.  Writes to
# OUTDIR: NAME.jsonl, NAME.pickle (memviz), NAME.txt / NAME-memviz.txt (the
# runs' output and summaries: by calling library and by Python call site),
# check.txt (tools/gpu/pyframes_check.py: which ALLOCs got Python frames and
# which did not and why, and torch.cuda._memory_viz reading the memviz
# files: the workload's lines must be there), bench.txt
# (bench/hooks/pyframes_bench.py: the cost per allocation, with and without
# --python, and the capture alone).  Exit status: the checker's.
set -u
out=${1:?usage: pyframes_on_gpu.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
# cffi from the carried .whl/, memhook built in place (device_setup.sh).
. tools/gpu/device_setup.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 --version

trace() {  # name format file workload
    timeout 240 python3 -m memhook trace -m bistro,reloc --python --stacks -f "$2" -o "$3" -- \
        python3 tools/gpu/pyframes_workloads.py "$4" >"$out/$1.txt" 2>&1
    echo "$1 ($2): trace exit $?"
}

for w in torch jax cupy; do
    if python3 -c "import $w" 2>/dev/null; then
        trace "$w" jsonl "$out/$w.jsonl" "$w"
        trace "$w-memviz" memviz "$out/$w.pickle" "$w"
        sed -n '/^peak live bytes by calling library/,/^collector:/p' "$out/$w.txt"
    else
        echo "$w: not importable here; skipped" | tee "$out/$w.txt"
    fi
done
python3 tools/gpu/pyframes_check.py "$out" 2>&1 | tee "$out/check.txt"
status=${PIPESTATUS[0]}
# The cost: through the simulator (the path is the hooks' and the trace's,
# the driver's own cost left out), then the capture alone.
timeout 300 python3 bench/hooks/pyframes_bench.py --rounds 3 2>&1 | tee "$out/bench.txt"
timeout 120 python3 bench/hooks/pyframes_bench.py --walk --depths 1,10,40 2>&1 | tee -a "$out/bench.txt"
exit "$status"
