#!/usr/bin/env bash
# memhook's whole GPU suite in ONE device call, from a fresh machine:
#
#     run(command="bash tools/gpu-run.sh", carry=[".whl"], timeout_s=560)
#
# 1. tools/gpu/device_setup.sh: the carried wheels (.whl/: cffi, pycparser,
#    sortedcontainers) into /tmp/site, memhook built in place;
# 2. the nvcc-built program (-cudart static and shared) and module (-cubin)
#    of tools/gpu/cuda/;
# 3. the bistro census over the loaded libcuda.so.1 and libcudart.so.13, both
#    jump forms: every hook_table.def entry point must be patchable;
# 4. pytest -m gpu tests/gpu (every case in every mode, each a fresh
#    process), junit in $OUT/gpu-junit.xml, one JSON line per (case, mode)
#    in $OUT/gpu-results.jsonl and the (case x mode) table;
# 5. the figures: hook overhead per cuMemAllocAsync+cuMemFreeAsync pair
#    (bench/hooks/hook_bench.py --real --no-stub --api async), memory_type single and
#    batch against cuda-python's cuPointerGetAttribute (bench/queries/cache_vs_driver.py),
#    install time per mode (tools/gpu/install_time.py).
# Everything printed also lands in $OUT/gpu-run.log.  Exit status 0 only when
# the census and every test pass.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${OUT:-/tmp/memhook-gpu-out}
mkdir -p "$out"
exec > >(tee "$out/gpu-run.log") 2>&1
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
rc=0
stamp "setup"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. tools/gpu/device_setup.sh || { echo "device_setup failed"; exit 1; }
export HOOKS_ON_GPU_BUILD=/tmp/memhook-gpu-build
stamp "nvcc: tools/gpu/cuda (-cudart static, -cudart shared, -cubin)"
python3 tests/gpu/hooks_on_gpu.py --build || rc=1
stamp "census over the loaded libcuda.so.1 and libcudart.so.13"
timeout 120 python3 tools/gpu/census_on_gpu.py "$out/census.json" || rc=1
stamp "pytest -m gpu tests/gpu"
rm -f "$out/gpu-results.jsonl"
xdist=""
python3 -c "import xdist" 2>/dev/null && xdist="-n 8"
HOOKS_ON_GPU_RESULTS="$out/gpu-results.jsonl" timeout 300 python3 -m pytest -m gpu tests/gpu \
    -p no:cacheprovider -p no:benchmark $xdist -q -rfE --junitxml="$out/gpu-junit.xml" || rc=1
stamp "(case x mode)"
python3 tests/gpu/hooks_on_gpu.py --summarize "$out/gpu-results.jsonl" || rc=1
stamp "figure: hook overhead per cuMemAllocAsync+cuMemFreeAsync pair, real driver"
timeout 120 python3 bench/hooks/hook_bench.py --real --no-stub --api async \
    --json "$out/hook_bench_real_async.json" || echo "hook_bench failed"
stamp "figure: memory_type vs cuPointerGetAttribute"
timeout 180 python3 bench/queries/cache_vs_driver.py || echo "cache_vs_driver failed"
stamp "figure: install time per mode"
timeout 90 python3 tools/gpu/install_time.py 7 || echo "install_time failed"
stamp "done, exit $rc"
exit $rc
