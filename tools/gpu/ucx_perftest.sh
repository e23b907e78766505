#!/usr/bin/env bash
# UCX's own benchmark, unmodified, with and without memhook's answers:
#     bash tools/gpu/ucx_perftest.sh [OUTDIR]        (OUTDIR default: $OUT)
#
# ucx_perftest (the libucx-cu13 wheel's bin/) runs as two processes on one
# GPU over localhost (a server with no address, then a client naming
# 127.0.0.1; -p picks the TCP port of their handshake), -m cuda,cuda, for
# -t tag_lat and -t tag_bw, at each size in SIZES, in three configurations:
#   n        UCX_MEMTYPE_CACHE=n: UCX asks the driver per operation
#   n+mh     the same, both processes under `memhook run --pointer-attributes`
#            (plain `memhook run` where that flag is missing)
#   y        UCX_MEMTYPE_CACHE=y: UCX's own CUDA hooks and cache
#   y+mh     =y under `memhook run`: memhook's hooks are in before UCX's cache
#            asks for its own, so memhook feeds UCX's cache (the
#            memhook-first order of docs/design/ucx-coexistence.md)
# and prints, per test and size, the p50 and average latency (us) and the
# message rate (msg/s) of each.  Client CSV lines land in OUTDIR too.
#
# UCX: $MEMHOOK_UCX (an unzipped wheel or its libucx folder), an installed
# libucx package, or .whl/libucx*.whl (unzipped to a temporary folder).
# memhook: tools/gpu/device_setup.sh (cffi from .whl/), for `memhook run`.
# Knobs: SIZES (default 8 64 512 4096 32768 65536), ITERS_LAT (2000),
# ITERS_BW (20000), PORT (13350), MEM (cuda,cuda; host,host tries the
# script on a machine without a GPU).
set -u
out=${1:-${OUT:-}}
[ -z "$out" ] || mkdir -p "$out" || exit 1
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
SIZES=${SIZES:-"8 64 512 4096 32768 65536"}
ITERS_LAT=${ITERS_LAT:-2000}
ITERS_BW=${ITERS_BW:-20000}
PORT=${PORT:-13350}
MEM=${MEM:-cuda,cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ucx=""
if [ -n "${MEMHOOK_UCX:-}" ]; then
    for c in "$MEMHOOK_UCX" "$MEMHOOK_UCX/libucx"; do [ -x "$c/bin/ucx_perftest" ] && ucx=$c; done
fi
if [ -z "$ucx" ]; then
    ucx=$(python3 -c 'import libucx, os; print(os.path.dirname(libucx.__file__))' 2>/dev/null)
    [ -n "$ucx" ] && [ -x "$ucx/bin/ucx_perftest" ] || ucx=""
fi
if [ -z "$ucx" ]; then
    whl=$(ls .whl/libucx*.whl 2>/dev/null | head -1)
    if [ -n "$whl" ]; then
        python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
            "$whl" "$tmp/ucx" && ucx="$tmp/ucx/libucx" && chmod +x "$ucx"/bin/* 2>/dev/null
    fi
fi
if [ -z "$ucx" ] || [ ! -x "$ucx/bin/ucx_perftest" ]; then
    echo "skipped: no UCX found (MEMHOOK_UCX, an installed libucx, .whl/libucx*.whl)"
    exit 0
fi
perftest="$ucx/bin/ucx_perftest"
export LD_LIBRARY_PATH="$ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$ucx/lib/ucx"
export UCX_WARN_UNUSED_ENV_VARS=n

. tools/gpu/device_setup.sh >/dev/null 2>&1 ||
    echo "(tools/gpu/device_setup.sh failed: the n+mh configuration will fail)"
memhook_run=(python3 -m memhook run)
if "${memhook_run[@]}" --help 2>/dev/null | grep -q -- --pointer-attributes; then
    memhook_run+=(--pointer-attributes)
    mh_label="memhook run --pointer-attributes"
else
    mh_label="memhook run (no --pointer-attributes in this memhook)"
fi
echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "== UCX: $ucx ($("$perftest" -h >/dev/null 2>&1; "$ucx/bin/ucx_info" -v 2>/dev/null | head -1))"
echo "== n+mh: $mh_label"

# one client run: prints "p50 avg mr" (or "- - -" on failure)
one() {  # config test size
    local cfg=$1 test=$2 size=$3 iters=$ITERS_LAT cache=n pre=()
    [ "$test" = tag_bw ] && iters=$ITERS_BW
    case $cfg in y*) cache=y ;; esac
    case $cfg in *+mh) pre=("${memhook_run[@]}" --) ;; esac
    PORT=$((PORT + 1))
    UCX_MEMTYPE_CACHE=$cache "${pre[@]}" "$perftest" -p "$PORT" >"$tmp/server.log" 2>&1 &
    local srv=$!
    sleep 1
    local csv
    csv=$(UCX_MEMTYPE_CACHE=$cache timeout 300 "${pre[@]}" "$perftest" 127.0.0.1 -p "$PORT" \
          -t "$test" -m "$MEM" -s "$size" -n "$iters" -w $((iters / 10)) -v 2>"$tmp/client.err" |
          grep -E '^ *[0-9]+,' | tr -d ' ' | tail -1)
    wait "$srv" 2>/dev/null
    [ -n "$out" ] && echo "$cfg,$test,$size,$csv" >>"$out/ucx_perftest.csv"
    if [ -z "$csv" ]; then
        echo "- - -"
        tail -n 3 "$tmp/client.err" "$tmp/server.log" >&2
        return
    fi
    # iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
    echo "$csv" | awk -F, '{ printf "%s %s %s\n", $2, $3, $8 }'
}

[ -n "$out" ] && echo "config,test,size,iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr" \
    >"$out/ucx_perftest.csv"
for test in tag_lat tag_bw; do
    echo
    echo "== $test, -m $MEM: p50 / average latency (us), message rate (msg/s)"
    printf "%8s | %-30s | %-30s | %-30s | %-30s\n" size "MEMTYPE_CACHE=n" "=n under memhook" \
        "MEMTYPE_CACHE=y" "=y under memhook"
    for size in $SIZES; do
        row=$(printf "%8s" "$size")
        for cfg in n n+mh y y+mh; do
            read -r p50 avg mr < <(one "$cfg" "$test" "$size")
            row+=$(printf " | %8s %9s %11s" "$p50" "$avg" "$mr")
        done
        echo "$row"
    done
done
