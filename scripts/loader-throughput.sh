#!/usr/bin/env bash
# The ImageFolder input pipeline, wick against torchvision's DataLoader (PIL), on the same
# folder of 500x375 JPEGs (ImageNet's typical size) at 224: RandomResizedCrop, flip,
# normalise, batches of 32. Each loader-thread count runs ROUNDS times, the two
# alternating; prints every run and the medians (images/s) and their ratio.
#   scripts/loader-throughput.sh [ROUNDS] [THREADS...]   (default: 5 rounds, 1 and 2 threads)
# Needs a Python with torch and torchvision (PYTHON, default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
threads=("${@:-1}")
[[ $# -gt 0 ]] || threads=(1 2)
python=${PYTHON:-python3}
cargo build --release --example make_image_folder --example loader_bench -q
folder=$(mktemp -d)/jpegs
trap 'rm -rf "$(dirname "$folder")"' EXIT
target/release/examples/make_image_folder --out "$folder" --classes 4 --train-per-class 100 \
    --val-per-class 0 --size 500x375 --jpeg-only
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for t in "${threads[@]}"; do
    wick=() torch=()
    for r in $(seq "$rounds"); do
        w=$(target/release/examples/loader_bench --data-dir "$folder" --loader-threads "$t" --batches 10)
        p=$("$python" scripts/torch_loader_baseline.py "$folder" --num-workers "$t" --batches 10)
        echo "$w"; echo "$p"
        wick+=("$(awk '{print $2}' <<<"$w")") torch+=("$(awk '{print $2}' <<<"$p")")
    done
    mw=$(printf '%s\n' "${wick[@]}" | median) mt=$(printf '%s\n' "${torch[@]}" | median)
    echo "== $t loader thread(s): wick median $mw images/s, torchvision $mt images/s, ratio $(awk -v a="$mw" -v b="$mt" 'BEGIN {printf "%.2f", a / b}')"
done
