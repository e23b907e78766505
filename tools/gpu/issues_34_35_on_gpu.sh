#!/usr/bin/env bash
# Issues 34 and 35's GPU figures in one device call, after the whole GPU
# suite (carry .whl/ with cffi's wheels and libucx-cu13's):
#   0. tools/gpu-run.sh (census, pytest -m gpu tests/gpu - the pointer-
#      attribute differential included - hook pair, memory_type, install);
#   1. bench/queries/pointer_attr_bench.py on the real driver, two modes;
#   2. bench/queries/native_query_bench.py on the real driver (memhook_query,
#      batch, contention, backlog);
#   3. tools/gpu/query_frameworks_on_gpu.py (PyTorch tensors, CuPy arrays);
#   4. the stub pair on this host's CPU (bench/hooks/hook_bench.py);
#   5. tools/gpu/ucx_why.sh (what UCX_MEMTYPE_CACHE=n pays per message).
# Each step's output lands in $OUT/<step>.txt as well.
set -u
out=${OUT:-/tmp/memhook-gpu-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
step() { local name=$1; shift; echo "== $name"; "$@" 2>&1 | tee "$out/$name.txt" | tail -${TAIL:-40}; }
TAIL=25 step gpu-run bash tools/gpu-run.sh
. tools/gpu/device_setup.sh >/dev/null || exit 1
export MEMHOOK_BENCH_REAL_DRIVER=1
for m in bistro reloc; do TAIL=14 step "pointer-attr-$m" timeout 90 python3 bench/queries/pointer_attr_bench.py 2000000 $m; done
TAIL=40 step native-query timeout 150 python3 bench/queries/native_query_bench.py
unset MEMHOOK_BENCH_REAL_DRIVER
TAIL=8 step frameworks timeout 120 python3 tools/gpu/query_frameworks_on_gpu.py
TAIL=4 step stub-pair timeout 120 python3 bench/hooks/hook_bench.py --quick --no-sim --api sync --threads 1 --modes bistro
python3 -c "import zipfile,glob;zipfile.ZipFile(glob.glob('.whl/libucx*.whl')[0]).extractall('/tmp/ucx')"
chmod +x /tmp/ucx/libucx/bin/* 2>/dev/null
MEMHOOK_UCX=/tmp/ucx TAIL=70 step ucx-why timeout 200 bash tools/gpu/ucx_why.sh "$out"
