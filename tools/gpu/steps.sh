# Sourced by the one-call GPU scripts (issues_34_37_on_gpu.sh,
# hook_floor_on_gpu.sh): `step NAME CMD...` runs CMD with its output in
# $work/NAME.txt and prints its tail (TAIL lines, default 30).  Steps run in
# order of need; once BUDGET_S seconds (default 400) have passed the rest
# are skipped, and say so, so that the call ends inside the device tool's
# limit.  After each step, and at exit, $work is archived into
# $OUT/gpu.tgz: the device tool brings back a few files only, and a call
# cut short still brings back what ran.
work=$(mktemp -d)
archive="${OUT:-/tmp}/gpu.tgz"
t_end=$(( $(date +%s) + ${BUDGET_S:-400} ))
finish() { tar czf "$archive" -C "$work" .; }
step() {
    local name=$1; shift
    if [ "$(date +%s)" -gt "$t_end" ]; then echo "== $name: skipped (time budget spent)"; return 0; fi
    echo "== $name ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$@" >"$work/$name.txt" 2>&1
    local rc=$?
    tail -"${TAIL:-30}" "$work/$name.txt"
    finish
    return $rc
}
trap finish EXIT
