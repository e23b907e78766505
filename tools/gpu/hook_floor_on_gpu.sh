#!/usr/bin/env bash
# Issue 37's figures on the GPU host in ONE device call, each beside its
# baseline in the same run: which clock the core chose there (and what each
# read costs), the stub pair of this core beside .base's (the same core
# with MEMHOOK_CLOCK=coarse as a third), the real async pair outside and
# under exact sizes, hook_cost_split on the real driver; then the GPU suite
# and the in-process query tests with the real driver initialised.  Carry
# .whl/ and .base/ (see issues_34_37_on_gpu.sh's header):
#     run(command="bash tools/gpu/hook_floor_on_gpu.sh", carry=[".whl", ".base"])
# Everything lands in $OUT/gpu.tgz, each step's tail on stdout.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
. tools/gpu/steps.sh
rc=0
. tools/gpu/device_setup.sh >/dev/null || exit 1
TAIL=4 step clock sh -c 'for c in auto coarse tsc; do MEMHOOK_CLOCK=$c MEMHOOK_LOG_LEVEL=debug \
    LD_PRELOAD=memhook/libmemhook.so /bin/true 2>&1 | grep -i "clock" || echo "$c: (no line)"; done;
    cat /sys/devices/system/clocksource/clocksource0/current_clocksource'
TAIL=10 step real-pair timeout 100 python3 bench/hooks/hook_bench.py --real --no-stub --api async --threads 1
TAIL=10 step real-pair-coarse env MEMHOOK_CLOCK=coarse timeout 100 python3 bench/hooks/hook_bench.py \
    --real --no-stub --api async --threads 1
step old-core sh -c "cd .base && python3 csrc/build_native.py ../build/old-core" >/dev/null
for turn in $(seq 1 "${TURNS:-2}"); do  # (interleaved: the host wanders)
    for side in old auto coarse; do
        core=memhook; clock=auto
        [ $side = old ] && core=build/old-core/memhook
        [ $side = coarse ] && clock=coarse
        TAIL=5 step "stub-pair-$turn-$side" env MEMHOOK_CLOCK=$clock timeout 60 \
            python3 bench/hooks/hook_bench.py --core "$core" --quick --no-sim --api sync \
            --threads 1 --no-profile
    done
done
TAIL=14 step cost-split timeout 100 python3 bench/hooks/hook_cost_split.py --real --reps 3
TAIL=8 step gpu-suite timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu || rc=1
TAIL=10 step real-pair-exact timeout 100 python3 bench/hooks/hook_bench.py --real --no-stub \
    --api async --exact
TAIL=8 step in-process-with-driver timeout 150 python3 -c "
import ctypes, sys
assert ctypes.CDLL('libcuda.so.1').cuInit(0) == 0
import pytest
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/hooks/test_query_grad_tensors.py',
                      'tests/hooks/test_query_in_c.py', 'tests/cache', 'tests/native_cache']))" || rc=1
exit $rc
