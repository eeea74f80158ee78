#!/usr/bin/env bash
# Each distinct convolution of a model, its three passes timed alone in wick
# (benches/conv_passes.rs) and in PyTorch (scripts/torch_conv_passes.py), alternating
# over rounds, each run its own process: the medians over rounds per layer and pass,
# wick / PyTorch, and the totals weighted by how many of the network's convolutions
# have each shape. Says which layers and passes hold a step's gap.
#
#   PYTHON=/path/to/venv/bin/python bash scripts/compare_conv_passes.sh [ROUNDS]
#   PRECISION=bf16 (default) or f32; MODEL=resnet18-cifar (default) or a model both
#   wick's registry and torchvision have (resnet50, mobilenet_v2, ...); IMAGE (default
#   224; 32 for resnet18-cifar); BATCH=32; REPS=9 (timed calls per pass and run);
#   THREADS (default: every core)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
PYTHON=${PYTHON:-python3}
PRECISION=${PRECISION:-bf16}
MODEL=${MODEL:-resnet18-cifar}
BATCH=${BATCH:-32}
REPS=${REPS:-9}
THREADS=${THREADS:-$(nproc)}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
cargo bench --bench conv_passes --no-run 2>/dev/null
ARGS=(--precision "$PRECISION" --model "$MODEL" --batch "$BATCH" --reps "$REPS")
if [[ -n ${IMAGE:-} ]]; then ARGS+=(--image "$IMAGE"); fi
for round in $(seq "$ROUNDS"); do
    RAYON_NUM_THREADS=$THREADS cargo bench -q --bench conv_passes -- "${ARGS[@]}" 2>/dev/null |
        sed -n "s/^conv /wick $round /p" | tee -a "$OUT"
    "$PYTHON" scripts/torch_conv_passes.py "${ARGS[@]}" --threads "$THREADS" --warmup 1 |
        sed -n "s/^conv /torch $round /p" | tee -a "$OUT"
done
# A line: SIDE ROUND CIN->COUT[gG] KxK sS @H count C forward F input_grad D weight_grad W
awk '
function median(s, n,   a, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    layer = $3 " " $4 " " $5 " " $6
    if (!(layer in count)) { order[++layers] = layer; count[layer] = $8 }
    for (p = 0; p < 3; p++) v[$1, layer, p] = v[$1, layer, p] " " $(10 + 2 * p)
}
END {
    split("forward input_grad weight_grad", name, " ")
    printf "%-22s %5s  %-28s %-28s %-28s\n", "layer (ms, medians)", "count", "forward wick/torch", "input_grad wick/torch", "weight_grad wick/torch"
    for (l = 1; l <= layers; l++) {
        layer = order[l]; line = sprintf("%-22s %5d ", layer, count[layer])
        for (p = 0; p < 3; p++) {
            w = median(v["wick", layer, p]); t = median(v["torch", layer, p])
            tw[p] += w * count[layer]; tt[p] += t * count[layer]
            line = line sprintf(" %8.3f %8.3f %7s    ", w, t, t > 0 ? sprintf("x%.2f", w / t) : "-")
        }
        print line
    }
    line = sprintf("%-22s %5s ", "total (x count)", "")
    for (p = 0; p < 3; p++) { line = line sprintf(" %8.2f %8.2f %7s    ", tw[p], tt[p], sprintf("x%.2f", tw[p] / tt[p])); sw += tw[p]; st += tt[p] }
    print line
    printf "all passes: wick %.1f ms, PyTorch %.1f ms, x%.2f\n", sw, st, sw / st
}' "$OUT"
