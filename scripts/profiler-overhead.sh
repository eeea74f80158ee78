#!/usr/bin/env bash
# The profiler's cost per training step, by CPU time (user + system) and wall time, at
# verbosity 1 (phases) and 2 (every op, with the memory counter) against no profiler.
# Each setting runs `profile_resnet` for N1 and N2 iterations; the difference over N2 - N1
# is the cost of one step with everything per process (startup, the peak probes, the
# report) cancelled. Rounds alternate the verbosities in a rotating order; medians.
#   scripts/profiler-overhead.sh [ROUNDS] [NAME:ARGS:N1:N2 ...]
# Default: 7 rounds of a small step (ResNet-18 CIFAR stem, batch 1, 16x16) and a
# realistic one (ResNet-18, batch 8, 64x64).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
shift || true
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(
    "small:--model resnet18 --stem cifar --batch-size 1 --image-size 16:10:210"
    "realistic:--model resnet18 --batch-size 8 --image-size 64:5:45"
)
cargo build --release --example profile_resnet -q
exe=target/release/examples/profile_resnet
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# CPU and wall seconds of one run: "cpu wall".
measure() { # <verbosity> <iterations> <args...>
    local v=$1 n=$2
    shift 2
    /usr/bin/time -f "%U %S %e" -o "$out" "$exe" "$@" --iterations "$n" --skip 1 --verbosity "$v" > /dev/null 2>&1
    awk '{printf "%.4f %.4f\n", $1 + $2, $3}' "$out"
}
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
for config in "${configs[@]}"; do
    IFS=: read -r name args n1 n2 <<<"$config"
    read -ra argv <<<"$args"
    declare -A cpu=() wall=()
    for r in $(seq "$rounds"); do
        order=(0 1 2)
        order=("${order[@]:$((r % 3))}" "${order[@]:0:$((r % 3))}")
        for v in "${order[@]}"; do
            read -r c1 w1 < <(measure "$v" "$n1" "${argv[@]}")
            read -r c2 w2 < <(measure "$v" "$n2" "${argv[@]}")
            cpu[$v]+="$(awk -v a="$c1" -v b="$c2" -v d=$((n2 - n1)) 'BEGIN {printf "%.6f", (b - a) / d}') "
            wall[$v]+="$(awk -v a="$w1" -v b="$w2" -v d=$((n2 - n1)) 'BEGIN {printf "%.6f", (b - a) / d}') "
        done
    done
    base_cpu=$(tr ' ' '\n' <<<"${cpu[0]}" | grep . | median)
    base_wall=$(tr ' ' '\n' <<<"${wall[0]}" | grep . | median)
    echo "== $name ($args; $rounds rounds, $n1 and $n2 iterations):"
    for v in 0 1 2; do
        c=$(tr ' ' '\n' <<<"${cpu[$v]}" | grep . | median)
        w=$(tr ' ' '\n' <<<"${wall[$v]}" | grep . | median)
        awk -v v="$v" -v c="$c" -v w="$w" -v bc="$base_cpu" -v bw="$base_wall" 'BEGIN {
            printf "  verbosity %d: CPU %.3f ms per step (%+.1f%%), wall %.3f ms per step (%+.1f%%)\n",
                v, 1e3 * c, 100 * (c / bc - 1), 1e3 * w, 100 * (w / bw - 1) }'
    done
    unset cpu wall
done
