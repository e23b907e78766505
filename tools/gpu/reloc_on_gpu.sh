#!/usr/bin/env bash
# reloc against NVIDIA's real runtime, on a GPU machine (device tool):
#   bash tools/gpu/reloc_on_gpu.sh
# Builds libmemhook there, then the reloc test program tests/reloc/fixtures/
# cuda_app.c (cudaMalloc + cudaFree, with cuMemAlloc_v2/cuMemFree_v2 hooked
# by reloc from a constructor, i.e. memhook installed first) against the real
# libcudart: linked statically (libcudart_static.a, what `nvcc -cudart static`
# does) and dynamically.  "alloc_calls=1 free_calls=1" means reloc saw the
# runtime's driver calls through dlsym + cuGetProcAddress.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
tmp=$(mktemp -d)
python3 csrc/build_native.py "$tmp/out" --only libmemhook >/dev/null || exit 1
core="$tmp/out/memhook"
cc -std=c11 -shared -fPIC -Icsrc/include tests/reloc/fixtures/cuda_hooks.c -o "$tmp/libmhcudahooks.so" \
   -L"$core" -lmemhook -Wl,-rpath,"$core" || exit 1
cuda=${CUDA_HOME:-/usr/local/cuda}
static="$cuda/lib64/libcudart_static.a"
shared=$(python3 - <<'PY'
import glob, site
hits = [h for b in site.getsitepackages() for h in glob.glob(b + "/nvidia/**/libcudart.so.13", recursive=True)]
print(hits[0] if hits else "")
PY
)
common=(-std=c11 -Icsrc/sim/runtime/include tests/reloc/fixtures/cuda_app.c -L"$tmp" -lmhcudahooks -Wl,-rpath,"$tmp")
if [ -f "$static" ]; then
    cc "${common[@]}" "$static" -ldl -lpthread -lrt -o "$tmp/app_static" && \
        { echo -n "static runtime ($static): "; "$tmp/app_static"; echo "exit $?"; }
else
    echo "static runtime: $static not found"
fi
if [ -n "$shared" ]; then
    cc "${common[@]}" "$shared" -Wl,-rpath,"$(dirname "$shared")" -o "$tmp/app_shared" && \
        { echo -n "shared runtime ($shared): "; "$tmp/app_shared"; echo "exit $?"; }
fi
