#!/usr/bin/env bash
# The query side's GPU figures in one device call, each beside its baseline
# in the same run.  Carry .whl/ (cffi's wheels) and build/base-src/, the csrc/
# of the commit to compare with:
#     mkdir -p build/base-src && git archive REV csrc | tar -x -C build/base-src
#     run(command="bash tools/gpu/queries_on_gpu.sh", carry=[".whl", "build/base-src"])
#   1. tools/gpu-run.sh: census, the GPU suite, the real async pair,
#      memory_type beside cuda-python, install time;
#   2. the torch cases of tests/cache and tests/hooks on the GPU;
#   3. bench/queries/native_query_bench.py beside the older core, then alone
#      (its Python flush() baseline);
#   4. bench/queries/pointer_attr_bench.py, bistro and reloc, beside the older core;
#   5. tools/gpu/query_frameworks_on_gpu.py and tools/gpu/pointer_attr_clients.py.
# Every step's output lands in one archive, $OUT/queries.tgz (the device
# tool brings back a few files only), and its tail on stdout.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
work=$(mktemp -d)
step() {
    local name=$1; shift
    echo "== $name ($(date +%T))"
    "$@" >"$work/$name.txt" 2>&1
    local rc=$?
    tail -"${TAIL:-30}" "$work/$name.txt"
    return $rc
}
rc=0
OUT=$work/suite TAIL=45 step gpu-run bash tools/gpu-run.sh || rc=1
. tools/gpu/device_setup.sh >/dev/null || exit 1
TAIL=6 step torch-tests timeout 180 python3 -m pytest -q -p no:cacheprovider -k "torch or tensor" \
    tests/cache tests/hooks/test_query_grad_tensors.py tests/hooks/test_query_in_c.py || rc=1
step base-core python3 build/base-src/csrc/build_native.py build/base-core --only libmemhook
export MEMHOOK_BENCH_REAL_DRIVER=1
TAIL=40 step native-query timeout 240 python3 bench/queries/native_query_bench.py \
    --baseline build/base-core/memhook --repeats 3 --parts query,batch,backlog,contention
TAIL=12 step native-query-python timeout 120 python3 bench/queries/native_query_bench.py --parts backlog,python
for m in bistro reloc; do
    TAIL=24 step "pointer-attr-$m" timeout 150 python3 bench/queries/pointer_attr_bench.py 1000000 $m \
        --core build/base-core/memhook --core . --repeat 2
done
unset MEMHOOK_BENCH_REAL_DRIVER
TAIL=16 step frameworks timeout 150 python3 tools/gpu/query_frameworks_on_gpu.py
TAIL=16 step attr-clients timeout 150 python3 tools/gpu/pointer_attr_clients.py
tar czf "${OUT:-/tmp}/queries.tgz" -C "$work" .
exit $rc
