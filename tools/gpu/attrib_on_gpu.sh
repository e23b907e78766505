#!/usr/bin/env bash
# Issue 18's GPU evidence, for the device tool (carry .whl as trace_on_gpu.sh does):
#     bash tools/gpu/attrib_on_gpu.sh "$OUT"
# Under `memhook trace --stacks` (mode bistro,reloc): a PyTorch training step
# (small MLP on cuda:0, a cuBLAS matmul) and, if jax imports, a JAX program.
# Writes to OUTDIR: torch.txt / jax.txt (the summaries: bytes by calling
# library - libtorch_cuda, libcublasLt, NCCL/cuDNN where present, XLA),
# torch.jsonl (callers and stacks), torch.pickle (memviz, frames for
# torch.cuda._memory_viz), and libraries.txt (bytes per calling library,
# from the jsonl).
set -u
out=${1:?usage: attrib_on_gpu.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
# cffi from the carried .whl/, memhook built in place (device_setup.sh).
. tools/gpu/device_setup.sh || exit 1

trace() {  # name format file workload
    python3 -m memhook trace -m bistro,reloc --stacks -f "$2" -o "$3" -- \
        python3 tools/gpu/attrib_step.py "$4" >"$out/$1.txt" 2>&1
    echo "$1 ($2): trace exit $?"
}

trace torch jsonl "$out/torch.jsonl" torch
trace torch-memviz memviz "$out/torch.pickle" torch
sed -n '/^peak live bytes by calling library/,/^collector:/p' "$out/torch.txt"
if python3 -c "import jax" 2>/dev/null; then
    trace jax jsonl "$out/jax.jsonl" jax
    sed -n '/^peak live bytes by calling library/,/^collector:/p' "$out/jax.txt"
else
    echo "jax: not importable here; skipped" | tee "$out/jax.txt"
fi

python3 - "$out" <<'PY' | tee "$out/libraries.txt"
import collections, json, os, pickle, sys
out = sys.argv[1]
for name in ("torch", "jax"):
    path = os.path.join(out, f"{name}.jsonl")
    if not os.path.exists(path):
        continue
    by = collections.Counter()
    n = collections.Counter()
    for line in open(path):
        e = json.loads(line)
        if e["kind"] == "alloc" and e["result"] == 0:
            lib = os.path.basename((e.get("caller") or {}).get("object") or "?")
            by[lib] += e["size"]
            n[lib] += 1
    print(f"{name}: bytes allocated per calling library")
    for lib, b in by.most_common():
        print(f"  {lib:<40} {n[lib]:>6} allocs  {b / 2**20:10.1f} MiB")
snap = pickle.load(open(os.path.join(out, "torch.pickle"), "rb"))
frames = [f for t in snap["device_traces"] for e in t for f in e["frames"]]
print(f"memviz: {sum(len(t) for t in snap['device_traces'])} entries, "
      f"{len(frames)} frames; e.g. {frames[1:4]}")
PY
