#!/usr/bin/env bash
# wick and PyTorch op type by op type and layer by layer on one model: records a PyTorch
# profiler trace of its training steps (scripts/torch_trace.py), imports it
# (wick-prof import-torch), profiles the same model in wick (profile_resnet --json, no
# passes, so both run the same ops), and diffs the two (wick-prof diff --layers: A is
# PyTorch, B is wick).
#
#   PYTHON=/path/to/venv/bin/python bash scripts/compare_torch_trace.sh resnet18|resnet50|mobilenet_v2 [OUT_DIR]
#
# Both on the same threads (THREADS, default 2). PyTorch's times carry its profiler's
# overhead (record_shapes and a scope per module); torch_trace.py prints the unprofiled
# step beside the profiled one. Needs release builds of profile_resnet and wick-prof
# (cargo build --release --examples --bins) and a Python with torch and torchvision.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?resnet18, resnet50 or mobilenet_v2}
OUT=${2:-$(mktemp -d)}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-2}
ITERATIONS=${ITERATIONS:-6}
mkdir -p "$OUT"
case $MODEL in
    resnet18) shape=(--batch-size 8 --image-size 32); torch_stem=(--stem cifar); wick_stem=(--stem cifar) ;;
    resnet50) shape=(--batch-size 2 --image-size 224); torch_stem=(); wick_stem=() ;;
    mobilenet_v2) shape=(--batch-size 8 --image-size 128); torch_stem=(); wick_stem=() ;;
    *) echo "unknown model $MODEL (resnet18, resnet50 or mobilenet_v2)" >&2; exit 2 ;;
esac
"$PYTHON" scripts/torch_trace.py --model "$MODEL" "${torch_stem[@]}" --num-classes 10 "${shape[@]}" \
    --iterations "$ITERATIONS" --skip 2 --threads "$THREADS" --out "$OUT/torch-trace.json"
target/release/wick-prof import-torch "$OUT/torch-trace.json" -o "$OUT/torch.json"
target/release/examples/profile_resnet --model "$MODEL" "${wick_stem[@]}" --num-classes 10 "${shape[@]}" \
    --iterations "$ITERATIONS" --skip 2 --threads "$THREADS" --passes none --verbosity 2 \
    --json "$OUT/wick.json" > "$OUT/wick.txt"
target/release/wick-prof diff "$OUT/torch.json" "$OUT/wick.json" --layers || true
echo "files in $OUT"
