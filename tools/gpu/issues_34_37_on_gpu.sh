#!/usr/bin/env bash
# Issues 34, 35 and 37's GPU figures and the GPU suite in ONE device call,
# each figure beside its baseline in the same run.  Carry .whl/ (cffi's
# wheels), build/base-src/ (the csrc/ of the commit to compare the queries
# with) and .base/ (the csrc/ of the commit to compare the hook path and
# the pointer attributes with):
#     mkdir -p build/base-src && git archive REV csrc | tar -x -C build/base-src
#     mkdir -p .base && git archive OLD csrc | tar -x -C .base
#     run(command="bash tools/gpu/issues_34_37_on_gpu.sh",
#         carry=[".whl", "build/base-src", ".base"])
#   1. tools/gpu-run.sh: census, the GPU suite, the real async pair (FREEs
#      sized by the drain), memory_type beside cuda-python, install time;
#   2. pointer_attr_bench beside .base's core, query_frameworks_on_gpu.py;
#   3. the stub pair of this core beside .base's, twice, interleaved;
#      native_query_bench beside build/base-src's core;
#   4. hook_cost_split on the real driver, the real async pair with exact
#      sizes (as under memhook trace), the torch cases of the suite on the
#      GPU, pointer_attr_clients.py.
# Every step's output lands in one archive, $OUT/gpu.tgz (the device tool
# brings back a few files only), and its tail on stdout.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
. tools/gpu/steps.sh
rc=0
OUT=$work/suite TAIL=40 step gpu-run bash tools/gpu-run.sh || rc=1
. tools/gpu/device_setup.sh >/dev/null || exit 1
step cores sh -c "python3 build/base-src/csrc/build_native.py build/base-core &&
    cd .base && python3 csrc/build_native.py ../build/old-core"
# (what a short budget must reach first: the queries' and pointer
# attributes' figures, then the hook path's)
export MEMHOOK_BENCH_REAL_DRIVER=1
TAIL=24 step pointer-attr timeout 90 python3 bench/queries/pointer_attr_bench.py 1000000 bistro \
    --core build/old-core/memhook --core .
unset MEMHOOK_BENCH_REAL_DRIVER
TAIL=16 step frameworks timeout 90 python3 tools/gpu/query_frameworks_on_gpu.py
for turn in 1 2; do  # (interleaved: the host wanders)
    for core in build/old-core/memhook memhook; do
        TAIL=5 step "stub-pair-$turn-${core%%/*}" timeout 60 python3 bench/hooks/hook_bench.py --core "$core" \
            --quick --no-sim --api sync --threads 1 --no-profile
    done
done
export MEMHOOK_BENCH_REAL_DRIVER=1
TAIL=40 step native-query timeout 150 python3 bench/queries/native_query_bench.py \
    --baseline build/base-core/memhook --repeats 1 --parts query,batch,backlog,contention
unset MEMHOOK_BENCH_REAL_DRIVER
TAIL=24 step cost-split timeout 90 python3 bench/hooks/hook_cost_split.py --real --reps 3
TAIL=14 step real-pair-exact timeout 90 python3 bench/hooks/hook_bench.py --real --no-stub --api async --exact
TAIL=6 step torch-tests timeout 90 python3 -m pytest -q -p no:cacheprovider -k "torch or tensor" \
    tests/cache tests/hooks/test_query_grad_tensors.py tests/hooks/test_query_in_c.py || rc=1
TAIL=16 step attr-clients timeout 90 python3 tools/gpu/pointer_attr_clients.py
exit $rc
