#!/usr/bin/env bash
# `memhook trace`, `info` and `demo` on a real GPU, for the device tool:
#     bash tools/gpu/trace_on_gpu.sh "$OUT"        (carry .whl: cffi, pycparser, sortedcontainers)
# Writes info.txt, demo.txt, pytorch-step.txt (+ pytorch-step.perfetto.json,
# the Perfetto/Chrome trace of a PyTorch training step) and cupy.txt.
set -u
out=${1:?usage: trace_on_gpu.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
# cffi from the carried .whl/, memhook built in place (device_setup.sh).
. tools/gpu/device_setup.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m memhook info >"$out/info.txt" 2>&1; echo "info exit $?"
python3 -m memhook demo >"$out/demo.txt" 2>&1; echo "demo exit $?"
python3 -m memhook trace -f chrome -o "$out/pytorch-step.perfetto.json" -- \
    python3 tools/gpu/trace_pytorch_step.py >"$out/pytorch-step.txt" 2>&1
echo "pytorch trace exit $?"
python3 -m memhook trace -- python3 tools/gpu/trace_cupy.py >"$out/cupy-events.txt" 2>&1
echo "cupy trace exit $?"
sed -n '/== memhook trace summary/,$p' "$out/cupy-events.txt" >"$out/cupy.txt"
for f in demo pytorch-step cupy; do echo "== $f"; sed -n '/== memhook trace summary/,$p' "$out/$f.txt"; done
