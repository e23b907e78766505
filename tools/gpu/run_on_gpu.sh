#!/usr/bin/env bash
# Everything memhook checks against a real NVIDIA driver, in one go, for the
# device tool:  bash tools/gpu/run_on_gpu.sh "$OUT"
#
# 1. probe_driver.py / probe_runtime.py record the real driver's and runtime's
#    behaviour (copy the JSON into tests/data/ to update the recordings);
# 2. the cuda-python session that tests/sim/test_cuda_python.py runs on the
#    simulator, run on the GPU: the script's expectations are the driver's;
# 3. the simulator's C test programs, compiled against the REAL libcuda and
#    libcudart: every check that fails here encodes a belief about the driver
#    that the hardware does not share (some checks are simulator-only: the
#    memory-size knob, the 32-bit window).  Informational, never fatal.
set -u
out=${1:?usage: run_on_gpu.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
export PYTHONUNBUFFERED=1

echo "== probes"
python3 tools/gpu/probe_driver.py "$out/h200-driver-facts.json" && echo "driver probe ok"
python3 tools/gpu/probe_runtime.py "$out/h200-runtime-facts.json" && echo "runtime probe ok"

echo "== cuda-python session on the GPU"
python3 tests/sim/scripts/cuda_python_session.py 2>&1 | tail -3

libcuda=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
cudart=$(python3 - <<'PY'
import glob, site
hits = [h for b in site.getsitepackages() for h in glob.glob(b + "/nvidia/**/libcudart.so.13", recursive=True)]
print(hits[0] if hits else "")
PY
)
echo "libcuda: $libcuda  libcudart: $cudart"
cflags="-std=c11 -D_GNU_SOURCE -O1 -g -Icsrc/include -Icsrc/sim/driver -Icsrc/sim/runtime/include"
tmp=$(mktemp -d)
echo "== simulator C tests against the real driver"
if cc $cflags tests/sim/fixtures/test_sim_memory.c -o "$tmp/mem" "$libcuda" -lpthread 2>"$out/build-mem.txt"; then
    (cd "$tmp" && timeout 120 ./mem) >"$out/real-test_sim_memory.txt" 2>&1; echo "test_sim_memory exit $?"
else echo "test_sim_memory: build failed"; fi
if cc $cflags tests/sim/fixtures/test_sim_control.c -o "$tmp/ctl" "$libcuda" -ldl -lpthread 2>"$out/build-ctl.txt"; then
    total=$(python3 -c "import json;print(json.load(open('$out/h200-driver-facts.json'))['device_total_mem'])")
    (cd "$tmp" && timeout 120 ./ctl 1 "$total" "$tmp") >"$out/real-test_sim_control.txt" 2>&1; echo "test_sim_control exit $?"
else echo "test_sim_control: build failed"; fi
if [ -n "$cudart" ] && cc $cflags tests/sim/fixtures/test_cudart.c -o "$tmp/rt" "$cudart" -Wl,-rpath,"$(dirname "$cudart")" -ldl -lpthread 2>"$out/build-rt.txt"; then
    (cd "$tmp" && timeout 120 ./rt) >"$out/real-test_cudart.txt" 2>&1; echo "test_cudart exit $?"
else echo "test_cudart: build failed or no libcudart"; fi
grep -h -c "FAIL" "$out"/real-*.txt 2>/dev/null | paste -sd' ' | sed 's/^/failure lines per program: /'
