#!/usr/bin/env bash
# Runs a wick command with its data loader threads (named wick-loader-N) held to PERCENT
# (decimals allowed, from 0.1) of one core, to check the profiler's input-bound verdict
# against a known cause:
#   scripts/throttle-loader.sh 5 target/release/examples/train_resnet --data-dir D ...
# How, chosen by what the machine has (THROTTLE=v1|v2|compete forces one):
# - v1: the cgroup v1 cpu controller (/sys/fs/cgroup/cpu), a group with a CFS quota that
#   the loader threads are moved into. Needs root.
# - v2: the unified hierarchy (/sys/fs/cgroup/cgroup.controllers): a threaded subtree
#   whose `loader` cgroup has cpu.max set; the command's threads go to `rest`, the
#   loaders to `loader` through cgroup.threads. Needs root and the cpu controller.
# - compete: no cgroup: every loader thread is pinned (taskset) to the last core beside
#   busy loops that take the rest of it, so they get about PERCENT of it (rounded to
#   1/(k+1) for k loops). Works anywhere taskset does.
set -euo pipefail
percent=$1
shift
mode=${THROTTLE:-}
if [[ -z $mode ]]; then
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
        mode=v2
    elif [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu ]]; then
        mode=v1
    else
        mode=compete
    fi
fi
quota=$(awk -v p="$percent" 'BEGIN { printf "%d\n", p * 10000 }')
helpers=()
cleanup() {
    for h in "${helpers[@]}"; do kill "$h" 2>/dev/null || true; done
    [[ -n ${group:-} ]] && { rmdir "$group"/loader "$group"/rest "$group" 2>/dev/null || rmdir "$group" 2>/dev/null || true; }
}
trap cleanup EXIT

# How a loader thread is held: v1 and v2 move it into the group, compete pins it.
case $mode in
v1)
    group=/sys/fs/cgroup/cpu/wick-loader-$$
    mkdir "$group"
    # A one-second period, so that shares down to 0.1% (1 ms a second) can be set.
    echo 1000000 > "$group/cpu.cfs_period_us"
    echo "$quota" > "$group/cpu.cfs_quota_us"
    hold() { echo "$1" > "$group/tasks"; }
    stat_file=$group/cpu.stat
    ;;
v2)
    group=/sys/fs/cgroup/wick-loader-$$
    mkdir "$group" "$group/rest" "$group/loader"
    echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    echo threaded > "$group/rest/cgroup.type"
    echo threaded > "$group/loader/cgroup.type"
    echo +cpu > "$group/cgroup.subtree_control"
    echo "$quota 1000000" > "$group/loader/cpu.max"
    hold() { echo "$1" > "$group/loader/cgroup.threads"; }
    stat_file=$group/loader/cpu.stat
    ;;
compete)
    core=$(( $(nproc) - 1 ))
    loops=$(awk -v p="$percent" 'BEGIN { k = int(100 / p + 0.5) - 1; print (k < 1 ? 1 : k) }')
    for _ in $(seq "$loops"); do
        taskset -c "$core" bash -c 'while :; do :; done' &
        helpers+=($!)
    done
    hold() { taskset -p -c "$core" "$1" > /dev/null; }
    stat_file=
    echo "throttle-loader: $loops busy loop(s) on core $core beside the loader threads (about $(( 100 / (loops + 1) ))% of it each)" >&2
    ;;
*)
    echo "throttle-loader: THROTTLE=$mode: expected v1, v2 or compete" >&2
    exit 2
    ;;
esac

"$@" &
pid=$!
[[ $mode == v2 ]] && echo "$pid" > "$group/rest/cgroup.procs"
held=" "
moved=0
while kill -0 "$pid" 2>/dev/null; do
    for task in /proc/"$pid"/task/*; do
        tid=${task##*/}
        if [[ $(cat "$task/comm" 2>/dev/null) == wick-loader-* && $held != *" $tid "* ]]; then
            # A thread that ends before it is held is not counted.
            hold "$tid" 2>/dev/null && moved=$(( moved + 1 )) && held+="$tid "
        fi
    done
    sleep 0.05
done
status=0
wait "$pid" || status=$?
echo "throttle-loader ($mode): $moved loader thread(s) held to about $percent% of a core;" \
    "$( [[ -n $stat_file ]] && tr '\n' ' ' < "$stat_file")" >&2
exit $status
