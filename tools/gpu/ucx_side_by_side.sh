#!/usr/bin/env bash
# memhook beside UCX 1.22's CUDA memory hooks on a GPU machine, in one device
# call:
#     bash tools/gpu/ucx_side_by_side.sh [OUTDIR [BENCH-ARGS...]]   (OUTDIR default: $OUT)
#
# BENCH-ARGS go to both runs of bench/ucx/ucx_side_by_side.py (e.g. --quick,
# --procs 7).
# UCX: the libucx-cu13 wheel, found by bench/ucx/ucx_side_by_side.py (first hit):
# $MEMHOOK_UCX (an unzipped wheel, or the .whl), .ucx/ in the repository root
# (an unzipped wheel, or a libucx*.whl inside it), an installed libucx, or
# .whl/libucx*.whl.  The wheel's .so files match .gitignore's *.so, so an
# unzipped copy travels to the device only when carried.  Simplest, before
# the device call (here, in the checkout that travels):
#     python3 bench/ucx/ucx_side_by_side.py --slim-wheel PATH/libucx_cu13-1.22.0-*.whl
# writes .ucx/libucx_cu13-1.22.0-slim.whl (2.4 MB: libucs, libucm,
# libucm_cuda, the wheel's libcudart), untracked and not ignored, so it
# travels.  The whole wheel (43 MB) works too, in .ucx/ or in .whl/ (carried;
# device_setup.sh then installs it as the libucx package), but counts against
# the 64 MiB working-tree limit.
# Without UCX every step prints "skipped: ..." and the script exits 0.
#
# Needs only python3 and cc there (no cffi): libmemhook and the simulator are
# built with csrc/build_native.py; the bench builds its own C program.
#   1. the real driver (goal: memhook adds at most half of what UCX adds, in
#      every mode; plus install times and region types);
#   2. the stub driver (a pair of a few ns: the hooks' own cost on this CPU).
# Each run's figures also land in OUTDIR/ucx_side_by_side_*.json.
set -u
out=${1:-${OUT:-}}
shift $(( $# > 0 ? 1 : 0 ))
[ -z "$out" ] || mkdir -p "$out" || exit 1
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
export PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
python3 csrc/build_native.py "$tmp/out" >/dev/null || exit 1
core="$tmp/out/memhook"
json() { [ -n "$out" ] && echo "--json $out/$1"; }
echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
# memhook importable (cffi from .whl/) only for the memory_type column of the
# types table; everything else runs without it.
. tools/gpu/device_setup.sh >/dev/null 2>&1 ||
    echo "(tools/gpu/device_setup.sh failed: memhook.memory_type is not asked)"
rc=0
echo "== 1. real driver: cuMemAllocAsync+cuMemFreeAsync, memhook beside UCX"
python3 bench/ucx/ucx_side_by_side.py --real --core "$core" $(json ucx_side_by_side_real.json) "$@" ||
    rc=1
echo "== 2. stub driver on this host (the hooks' own cost)"
python3 bench/ucx/ucx_side_by_side.py --driver stub --core "$core" \
    $(json ucx_side_by_side_stub.json) "$@" || rc=1
rm -rf "$tmp"
exit $rc
