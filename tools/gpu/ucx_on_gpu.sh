#!/usr/bin/env bash
# Issue 35's UCX evidence in one device call (carry .whl/ with the
# libucx-cu13 wheel beside cffi's):
#   1. tools/gpu/ucx_matrix.py: order x memhook mode x UCX mode, each a
#      fresh process, counts seen by each side;
#   2. tools/gpu/ucx_perftest.sh: ucx_perftest -m cuda,cuda, tag_lat and
#      tag_bw, =n, =n under memhook run --pointer-attributes, =y, =y under
#      memhook run;
#   3. what UCX pays per operation with UCX_MEMTYPE_CACHE=n: the CUDA API
#      calls of one tag_bw 8 B client, counted by nsys where it is installed.
set -u
out=${OUT:-/tmp/memhook-gpu-out}/ucx
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
. tools/gpu/device_setup.sh >/dev/null || exit 1
python3 -c "import zipfile,glob;zipfile.ZipFile(glob.glob('.whl/libucx*.whl')[0]).extractall('/tmp/ucx')"
chmod +x /tmp/ucx/libucx/bin/* 2>/dev/null
export MEMHOOK_UCX=/tmp/ucx
rc=0
echo "== 1. coexistence matrix"
timeout 420 python3 tools/gpu/ucx_matrix.py --json "$out/ucx_matrix.json" || rc=1
echo "== 2. ucx_perftest"
timeout 300 bash tools/gpu/ucx_perftest.sh "$out" || rc=1
echo "== 3. CUDA API calls per tag_bw 8 B operation with UCX_MEMTYPE_CACHE=n"
if command -v nsys >/dev/null; then
    U=/tmp/ucx/libucx
    export LD_LIBRARY_PATH=$U/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    UCX_MEMTYPE_CACHE=n timeout 60 "$U/bin/ucx_perftest" -p 13999 >/dev/null 2>&1 &
    sleep 2
    UCX_MEMTYPE_CACHE=n timeout 90 nsys profile -o /tmp/ucx-n --trace=cuda --force-overwrite=true \
        "$U/bin/ucx_perftest" 127.0.0.1 -p 13999 -t tag_bw -m cuda,cuda -s 8 -n 5000 | tail -5
    nsys stats -q -r cuda_api_sum /tmp/ucx-n.nsys-rep 2>&1 | head -40
    wait
else
    echo "no nsys on this machine"
fi
exit $rc
