#!/usr/bin/env bash
# Runs a wick command with its data loader threads (named wick-loader-N) limited to
# PERCENT (decimals allowed, from 0.1) of one core, to check the profiler's input-bound verdict against a known cause.
# Needs root and the cgroup v1 cpu controller (/sys/fs/cgroup/cpu).
#   scripts/throttle-loader.sh 2 target/release/examples/train_resnet --data-dir D ...
set -euo pipefail
percent=$1; shift
group=/sys/fs/cgroup/cpu/wick-loader-$$
mkdir "$group"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
# A one-second period, so that shares down to 0.1% (1 ms a second) can be set.
echo 1000000 > "$group/cpu.cfs_period_us"
awk -v p="$percent" 'BEGIN { printf "%d\n", p * 10000 }' > "$group/cpu.cfs_quota_us"
"$@" &
pid=$!
moved=0
while kill -0 "$pid" 2>/dev/null; do
    for task in /proc/"$pid"/task/*; do
        if [[ $(cat "$task/comm" 2>/dev/null) == wick-loader-* ]] &&
            ! grep -qx "${task##*/}" "$group/tasks"; then
            # A thread that ends before it is moved is not counted.
            echo "${task##*/}" 2>/dev/null > "$group/tasks" && moved=$(( moved + 1 ))
        fi
    done
    sleep 0.05
done
wait "$pid"
status=$?
echo "throttle-loader: $moved loader thread(s) limited to $percent% of a core;" \
    "$(tr '\n' ' ' < "$group/cpu.stat")" >&2
exit $status
