#!/usr/bin/env bash
# What UCX pays per message with UCX_MEMTYPE_CACHE=n on a CUDA buffer:
#     bash tools/gpu/ucx_why.sh [OUTDIR]        (OUTDIR default: $OUT)
#
# One ucx_perftest pair (server, then a client naming 127.0.0.1, as in
# tools/gpu/ucx_perftest.sh), -t tag_bw -s 8 -m $MEM, run:
#   1. plain, for the message rate of each configuration:
#        n            UCX_MEMTYPE_CACHE=n
#        n,nodmabuf   =n, UCX_CUDA_COPY_DMABUF=n (no dmabuf export per query)
#        n,nodmabuf,noreg  ... and UCX_CUDA_COPY_REG_WHOLE_ALLOC=off (no
#                     cuMemGetAddressRange per query)
#        y            UCX_MEMTYPE_CACHE=y
#   2. with =n under `strace -f -c` (both processes), when strace exists;
#   3. under tools/gpu/ucx_count_shim.c (built here with cc), both
#      processes, in configurations n, n,nodmabuf and y.
# Steps 2 and 3 run each case at ITERS and 2*ITERS iterations (same warmup)
# and print the difference divided by ITERS: the calls and time per message
# with start-up and tear-down cancelled out.  Per process (client: sends;
# server: receives).  Raw files land in OUTDIR.
#
# UCX: as tools/gpu/ucx_perftest.sh finds it ($MEMHOOK_UCX, an installed
# libucx, .whl/libucx*.whl).  Knobs: ITERS (5000), STRACE_ITERS (1000),
# WARMUP (200), SIZE (8), PORT (13450), MEM (cuda,cuda; host,host tries the
# script's mechanics on a machine without a GPU).
set -u
out=${1:-${OUT:-}}
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
ITERS=${ITERS:-5000}
STRACE_ITERS=${STRACE_ITERS:-1000}
WARMUP=${WARMUP:-200}
SIZE=${SIZE:-8}
PORT=${PORT:-13450}
MEM=${MEM:-cuda,cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$out" ] || out=$tmp/out
mkdir -p "$out" || exit 1

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

shim=$tmp/ucx_count_shim.so
if ! cc -std=c11 -O2 -Wall -Wextra -shared -fPIC -o "$shim" tools/gpu/ucx_count_shim.c \
        -ldl -lpthread 2>"$out/shim_build.log"; then
    echo "(shim build failed, see $out/shim_build.log: step 3 skipped)"
    shim=""
fi

echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "== UCX: $ucx ($("$ucx/bin/ucx_info" -v 2>/dev/null | head -1))"
echo "== tag_bw, size $SIZE, -m $MEM, warmup $WARMUP"

# The environment of a configuration, as VAR=value words.
cfg_env() {
    case $1 in
        n) echo "UCX_MEMTYPE_CACHE=n" ;;
        n,nodmabuf) echo "UCX_MEMTYPE_CACHE=n UCX_CUDA_COPY_DMABUF=n" ;;
        n,nodmabuf,noreg) echo "UCX_MEMTYPE_CACHE=n UCX_CUDA_COPY_DMABUF=n UCX_CUDA_COPY_REG_WHOLE_ALLOC=off" ;;
        y) echo "UCX_MEMTYPE_CACHE=y" ;;
    esac
}

# pair CFG ITERS WRAP...: one server+client pair, each run as
# `env CFG-VARS UCX_COUNT_LABEL=server|client WRAP... perftest ...`; WRAP may
# use @ROLE@, replaced by server or client.  Prints the client's CSV line.
pair() {
    local cfg=$1 iters=$2; shift 2
    local vars srv csv
    read -r -a vars <<<"$(cfg_env "$cfg")"
    PORT=$((PORT + 1))
    env "${vars[@]}" UCX_COUNT_LABEL=server $(printf '%s\n' "$@" | sed 's/@ROLE@/server/g') \
        "$perftest" -p "$PORT" >"$tmp/server.log" 2>&1 &
    srv=$!
    sleep 1
    csv=$(timeout 300 env "${vars[@]}" UCX_COUNT_LABEL=client \
          $(printf '%s\n' "$@" | sed 's/@ROLE@/client/g') \
          "$perftest" 127.0.0.1 -p "$PORT" -t tag_bw -m "$MEM" -s "$SIZE" -n "$iters" \
          -w "$WARMUP" -v 2>"$tmp/client.err" | grep -E '^ *[0-9]+,' | tr -d ' ' | tail -1)
    wait "$srv" 2>/dev/null
    if [ -z "$csv" ]; then
        tail -n 3 "$tmp/client.err" "$tmp/server.log" >&2
    fi
    echo "$csv"
}

echo
echo "== 1. message rate (iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr)"
for cfg in n n,nodmabuf n,nodmabuf,noreg y; do
    csv=$(pair "$cfg" "$ITERS")
    printf '%-18s %s\n' "$cfg" "${csv:-failed}"
    echo "$cfg,$csv" >>"$out/rates.csv"
done

# per_message A B N: rows "role name calls ns" of B minus A, over N.
per_message() {
    awk -v n="$3" 'FNR == NR { c[$1" "$2] = $3; t[$1" "$2] = $4; next }
        { k = $1" "$2; dc = $3 - c[k]; dt = $4 - t[k]
          if (dc > 0) printf "%-7s %-44s %9.2f %11.0f %11.0f\n", $1, $2, dc / n, dt / dc, dt / n
          if (dc > 0 && $2 ~ /^cu/ && $2 !~ /:/) { sc[$1] += dc; st[$1] += dt } }
        END { for (r in sc) printf "%-7s %-44s %9.2f %11s %11.0f\n", r, "all_cu_calls",
                                   sc[r] / n, "-", st[r] / n }' \
        "$1" "$2" | sort -k1,1 -k5,5nr
}

echo
echo "== 2. system calls per message under strace -f -c, =n"
if command -v strace >/dev/null 2>&1; then
    for it in "$STRACE_ITERS" $((2 * STRACE_ITERS)); do
        pair n "$it" strace -f -c -o "$out/strace.n.$it.@ROLE@" >/dev/null
        for role in server client; do
            # strace -c: "% time seconds usecs/call calls [errors] syscall"
            awk -v r="$role" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
                    printf "%s %s %d %d\n", r, $NF, $4, $2 * 1e9 }' \
                "$out/strace.n.$it.$role" 2>/dev/null
        done >"$tmp/strace.$it"
    done
    echo "role    syscall                                       per msg    ns/call     ns/msg"
    per_message "$tmp/strace.$STRACE_ITERS" "$tmp/strace.$((2 * STRACE_ITERS))" "$STRACE_ITERS"
    echo "(strace's own cost inflates the times; the counts are exact)"
else
    echo "skipped: no strace on this machine (step 3 counts ioctl and close instead)"
fi

echo
echo "== 3. driver calls per message (tools/gpu/ucx_count_shim.c)"
if [ -n "$shim" ]; then
    for cfg in n n,nodmabuf y; do
        for it in "$ITERS" $((2 * ITERS)); do
            rm -f "$tmp"/cnt.*
            pair "$cfg" "$it" "UCX_COUNT_OUT=$tmp/cnt.@ROLE@" "LD_PRELOAD=$shim" >/dev/null
            cat "$tmp"/cnt.* 2>/dev/null | tee "$out/shim.$cfg.$it.tsv" |
                awk -F'\t' '{ printf "%s %s %s %s\n", $1, $3, $4, $5 }' >"$tmp/shim.$cfg.$it"
        done
        echo
        echo "-- $cfg"
        echo "role    call (gets:<attributes>:mt=<type answered>)   per msg    ns/call     ns/msg"
        per_message "$tmp/shim.$cfg.$ITERS" "$tmp/shim.$cfg.$((2 * ITERS))" "$ITERS"
    done
    echo "(attributes: 1 CONTEXT, 2 MEMORY_TYPE, 8 IS_MANAGED, 9 DEVICE_ORDINAL, 11 RANGE_START_ADDR,"
    echo " 12 RANGE_SIZE; mt: 1 host, 2 device, -1 not asked/answered. ioctl and close: every fd;"
    echo " unwrapped:<name>: an entry point cuGetProcAddress handed out that the shim could not wrap)"
fi
echo
echo "raw files: $out"
