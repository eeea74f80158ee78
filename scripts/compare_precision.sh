#!/usr/bin/env bash
# wick's float32 and bf16 autocast training steps beside PyTorch's (float32 and CPU
# autocast bf16) on this machine: each round runs the four in turn, each in its own
# process, for each case; prints one line per run, then the medians over rounds and the
# ratios (wick bf16 / PyTorch bf16, and wick f32 / wick bf16: the autocast speed-up).
#
#   PYTHON=/path/to/venv/bin/python bash scripts/compare_precision.sh [ROUNDS]
#   CASES="vit_b_16_b2_224" ... (a subset)
#   TORCH_BF16_ROUNDS=1: PyTorch's bf16 in the first round only (on a CPU without bf16
#   instructions its steps take 20-90 s; its medians are then over the rounds it ran)
#
# Needs a release build of the examples (cargo build --release --examples) and a Python
# with torch and torchvision. Both sides use THREADS threads (default: every core).
# wick's time is profile_resnet's median iteration; PyTorch's the median step
# (scripts/torch_autocast_step.py), both after warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-$(nproc)}
TORCH_BF16_ROUNDS=${TORCH_BF16_ROUNDS:-$ROUNDS}
CASES=${CASES:-"resnet18_cifar_b32 resnet50_b8_224 vit_b_16_b2_224"}
EX=target/release/examples
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

# settings CASE: "model stem batch size iterations"
settings() {
    case $1 in
        resnet18_cifar_b32) echo "resnet18 cifar 32 32 13" ;;
        resnet50_b8_224) echo "resnet50 imagenet 8 224 7" ;;
        vit_b_16_b2_224) echo "vit_b_16 imagenet 2 224 8" ;;
        *) echo "unknown case $1" >&2; exit 2 ;;
    esac
}

wick_ms() { # CASE PRECISION
    read -r model stem batch size iters <<<"$(settings "$1")"
    RAYON_NUM_THREADS=$THREADS "$EX/profile_resnet" --model "$model" --stem "$stem" --num-classes 10 \
        --batch-size "$batch" --image-size "$size" --iterations "$iters" --skip 3 --verbosity 1 \
        --precision "$2" 2>/dev/null |
        sed -n 's/^Iteration spread : median \([0-9.e-]*\) sec.*/\1/p' | awk '{ print $1 * 1000 }'
}

torch_ms() { # CASE PRECISION
    read -r model stem batch size iters <<<"$(settings "$1")"
    "$PYTHON" scripts/torch_autocast_step.py --model "$model" --stem "$stem" --batch "$batch" \
        --size "$size" --precision "$2" --threads "$THREADS" --reps $((iters - 3)) |
        sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p'
}

for round in $(seq "$ROUNDS"); do
    for case in $CASES; do
        for side in wick torch; do
            for precision in f32 bf16; do
                if [ "$side/$precision" = torch/bf16 ] && [ "$round" -gt "$TORCH_BF16_ROUNDS" ]; then
                    continue
                fi
                ms=$("${side}_ms" "$case" "$precision")
                echo "round $round $case $side $precision $ms ms" | tee -a "$OUT"
            done
        done
    done
done

echo
echo "medians over $ROUNDS rounds ($THREADS threads), ms:"
printf '%-22s %10s %10s %10s %10s %14s %14s\n' case wick_f32 wick_bf16 torch_f32 torch_bf16 "wick/torch bf16" "wick f32/bf16"
for case in $CASES; do
    med() { grep " $case $1 $2 " "$OUT" | awk '{ print $6 }' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    wf=$(med wick f32); wb=$(med wick bf16); tf=$(med torch f32); tb=$(med torch bf16)
    printf '%-22s %10.1f %10.1f %10.1f %10.1f %14.2f %14.2f\n' "$case" "$wf" "$wb" "$tf" "$tb" \
        "$(echo "$wb / $tb" | bc -l)" "$(echo "$wf / $wb" | bc -l)"
done
