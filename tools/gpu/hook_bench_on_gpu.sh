#!/usr/bin/env bash
# The hooks' cost per alloc+free pair on a GPU machine, for the device tool:
#   bash tools/gpu/hook_bench_on_gpu.sh [OUTDIR]      (OUTDIR default: $OUT)
#
# Needs only python3 and cc there (no cffi): the native tree - libmemhook and
# the simulator - is built with csrc/build_native.py, and bench/hooks/hook_bench.py
# compiles bench/hooks/hook_bench.c, which dlopens libcuda and libmemhook itself.
#   1. the real driver (system libcuda.so.1): cuMemAllocAsync+cuMemFreeAsync
#      (goal: at most 10% added) and cuMemAlloc_v2+cuMemFree_v2, modes
#      bistro, reloc, bistro+reloc, 1 and 2 threads; then bistro with the
#      12-byte jump forced (MEMHOOK_BISTRO_FAR_JUMP=1);
#   2. the simulator and the stub driver on that machine's CPU (a quieter
#      host than a shared dev box; goal: at most 60 ns added, one thread).
# Each run's rows also land in OUTDIR/hook_bench_*.json.
set -u
out=${1:-${OUT:-}}
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
export PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
python3 csrc/build_native.py "$tmp/out" >/dev/null || exit 1
core="$tmp/out/memhook"
json() { [ -n "$out" ] && echo "--json $out/$1"; }
echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus; clocksource" \
     "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
rc=0
echo "== 1. real driver: cuMemAllocAsync+cuMemFreeAsync"
python3 bench/hooks/hook_bench.py --core "$core" --real --no-stub --api async \
    $(json hook_bench_real_async.json) || rc=1
echo "== 1b. real driver: cuMemAlloc_v2+cuMemFree_v2 (slower pairs: fewer of them)"
python3 bench/hooks/hook_bench.py --core "$core" --real --no-stub --api sync --pairs 2000 \
    $(json hook_bench_real_sync.json) || rc=1
echo "== 1c. real driver, bistro with the 12-byte jump forced"
MEMHOOK_BISTRO_FAR_JUMP=1 python3 bench/hooks/hook_bench.py --core "$core" --real --no-stub \
    --api async --modes bistro $(json hook_bench_real_far.json) || rc=1
echo "== 2. simulator and stub driver on this host"
python3 bench/hooks/hook_bench.py --core "$core" $(json hook_bench_sim.json) || rc=1
exit $rc
