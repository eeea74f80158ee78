#!/usr/bin/env bash
# wick and PyTorch side by side on this machine: each case alternates a wick run and a
# PyTorch run (the baseline script in ../shared/baselines), ROUNDS rounds, each run in its
# own process, its peak RSS read by GNU time. Prints one line per run, then a table of the
# medians over rounds and the ratio wick / PyTorch.
#
#   PYTHON=/path/to/venv/bin/python bash scripts/compare_pytorch.sh [ROUNDS]
#   CASES="mobilenet_v2_train_b8_128 efficientnet_b0_train_b8_128" ... (a subset)
#
# Needs a release build of the examples (cargo build --release --examples) and of the
# attention bench (cargo bench --bench attention --no-run), and a Python with torch and
# torchvision. attention_t1024, attention_t1024_causal, attention_t4096: fused attention
# forward + backward, [2, 8, T, 64] f32, against F.scaled_dot_product_attention.
# gpt2_6l_384_train_b4_256: train_gpt's step (AdamW, dropout 0) on a GPT-2 of 6 layers, 384
# wide, 6 heads, vocabulary 256, context 256, batch 4, against transformers' GPT2LMHeadModel
# (scripts/torch_gpt_baseline.py; the Python needs transformers too).
# llama_6l_384_train_b4_256: the same step on a LLaMA of 6 layers, 384 wide, 6 query heads
# sharing 2 key/value heads, MLP 1024 wide, vocabulary 256, against LlamaForCausalLM.
# Times: wick's median iteration (profile_resnet, training;
# infer_resnet --bench p50, inference) and PyTorch's median step, both after warm-up, on
# the threads rayon / torch use by default (every core).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
PYTHON=${PYTHON:-python3}
SHARED=${SHARED:-$PWD/../shared}
BASELINE=$SHARED/baselines/torch_resnet_baseline.py
THREADS=$(nproc)
EX=target/release/examples
OUT=$(mktemp)
GPT_CONFIG=$(mktemp --suffix .json)
LLAMA_CONFIG=$(mktemp --suffix .json)
trap 'rm -f "$OUT" "$GPT_CONFIG" "$LLAMA_CONFIG"' EXIT
cat >"$GPT_CONFIG" <<'JSON'
{"vocab_size": 256, "n_positions": 256, "n_embd": 384, "n_layer": 6, "n_head": 6,
 "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0}
JSON
cat >"$LLAMA_CONFIG" <<'JSON'
{"model_type": "llama", "vocab_size": 256, "hidden_size": 384, "intermediate_size": 1024,
 "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 2,
 "max_position_embeddings": 256}
JSON

# wick_case NAME: prints "ms rss_kib" for one wick run of case NAME.
wick_case() {
    local args
    case $1 in
        resnet18_cifar_train_b8) args="$EX/profile_resnet --model resnet18 --stem cifar --batch-size 8 --image-size 32 --iterations 13 --skip 3 --verbosity 1" ;;
        resnet18_cifar_train_b32) args="$EX/profile_resnet --model resnet18 --stem cifar --batch-size 32 --image-size 32 --iterations 13 --skip 3 --verbosity 1" ;;
        resnet50_train_b2) args="$EX/profile_resnet --model resnet50 --batch-size 2 --image-size 224 --iterations 13 --skip 3 --verbosity 1" ;;
        resnet50_infer_b1) args="$EX/infer_resnet --model resnet50 --bench --warmup 3 --reps 20" ;;
        vit_b_16_train_b2_224) args="$EX/profile_resnet --model vit_b_16 --num-classes 10 --batch-size 2 --image-size 224 --iterations 8 --skip 3 --verbosity 1" ;;
        gpt2_6l_384_train_b4_256) args="$EX/train_gpt --config $GPT_CONFIG --context 256 --batch-size 4 --steps 10 --skip 3 --steps-per-epoch 1000 --verbosity 1" ;;
        llama_6l_384_train_b4_256) args="$EX/train_gpt --config $LLAMA_CONFIG --context 256 --batch-size 4 --steps 10 --skip 3 --steps-per-epoch 1000 --verbosity 1" ;;
        convnext_tiny_train_b8_128) args="$EX/profile_resnet --model convnext_tiny --num-classes 10 --stochastic-depth 0 --batch-size 8 --image-size 128 --iterations 13 --skip 3 --verbosity 1" ;;
        mobilenet_v2_train_b8_128) args="$EX/profile_resnet --model mobilenet_v2 --num-classes 10 --dropout 0 --batch-size 8 --image-size 128 --iterations 13 --skip 3 --verbosity 1" ;;
        efficientnet_b0_train_b8_128) args="$EX/profile_resnet --model efficientnet_b0 --num-classes 10 --dropout 0 --stochastic-depth 0 --batch-size 8 --image-size 128 --iterations 13 --skip 3 --verbosity 1" ;;
    esac
    case $1 in
        attention_t*)
            # The fused kernel's forward + backward in the criterion bench (its median).
            local t=${1#attention_t} mask=plain
            case $t in *_causal) t=${t%_causal}; mask=causal ;; esac
            local bench log
            bench=$(ls -t target/release/deps/attention-* | grep -v '\.d$' | head -1)
            log=$( { WICK_ATTENTION_T=$t /usr/bin/time -f "rss_kib %M" "$bench" --bench "^attention/fused/$mask/$t\$"; } 2>&1 )
            # criterion's median: the middle of "time: [low mid high]", in s, ms or µs.
            echo "$(echo "$log" | sed -n 's/.*time: *\[[0-9.]* [mµ]*s \([0-9.]*\) \([mµ]*\)s.*/\1 \2/p' | awk '{ print ($2 == "m") ? $1 : ($2 == "") ? $1 * 1000 : $1 / 1000 }') $(echo "$log" | sed -n 's/.*rss_kib \([0-9]*\)$/\1/p')"
            return ;;
    esac
    # Training: the graph passes train_resnet uses (profile_resnet defaults to none).
    case $1 in gpt2_* | llama_*) ;; *train*) args="$args --passes default" ;; esac
    local log
    log=$( { /usr/bin/time -f "rss_kib %M" $args; } 2>&1 ) || { echo "wick_case $1 failed: $log" >&2; exit 1; }
    local ms
    ms=$(echo "$log" | sed -n 's/.*Iteration spread : median \([0-9.e+-]*\) sec.*/\1/p' | awk '{ printf "%.3f", $1 * 1000 }')
    [ -n "$ms" ] || ms=$(echo "$log" | sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p')
    echo "$ms $(echo "$log" | sed -n 's/^rss_kib \([0-9]*\)$/\1/p')"
}

# torch_case NAME: prints "ms rss_kib" for one PyTorch run of case NAME.
torch_case() {
    local log
    case $1 in
        vit_b_16_train_b2_224)
            log=$( { /usr/bin/time -f "rss_kib %M" "$PYTHON" scripts/torch_zoo_baseline.py --model vit_b_16 --batch 2 --size 224 --threads "$THREADS" --warmup 2 --reps 5; } 2>&1 ) ;;
        gpt2_6l_384_train_b4_256 | llama_6l_384_train_b4_256)
            local config=$GPT_CONFIG
            case $1 in llama_*) config=$LLAMA_CONFIG ;; esac
            log=$( { /usr/bin/time -f "rss_kib %M" "$PYTHON" scripts/torch_gpt_baseline.py --config "$config" --batch 4 --context 256 --threads "$THREADS"; } 2>&1 ) ;;
        attention_t*)
            local t=${1#attention_t} causal=
            case $t in *_causal) t=${t%_causal}; causal=--causal ;; esac
            log=$( { /usr/bin/time -f "rss_kib %M" "$PYTHON" scripts/torch_attention_baseline.py --t "$t" $causal --threads "$THREADS"; } 2>&1 ) ;;
        *_train_b8_128)
            # The zoo's cases: scripts/torch_zoo_baseline.py, the same model and step.
            log=$( { /usr/bin/time -f "rss_kib %M" "$PYTHON" scripts/torch_zoo_baseline.py --model "${1%_train_b8_128}" --batch 8 --size 128 --threads "$THREADS" --reps 10; } 2>&1 ) ;;
        *) log=$( { /usr/bin/time -f "rss_kib %M" "$PYTHON" "$BASELINE" --cases "$1" --threads "$THREADS"; } 2>&1 ) ;;
    esac
    local ms
    ms=$(echo "$log" | sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p' | head -1)
    [ -n "$ms" ] || { echo "torch_case $1 failed: $log" >&2; exit 1; }
    echo "$ms $(echo "$log" | sed -n 's/^rss_kib \([0-9]*\)$/\1/p')"
}

CASES=${CASES:-"resnet18_cifar_train_b8 resnet18_cifar_train_b32 resnet50_train_b2 resnet50_infer_b1 resnet50_infer_b1_fused mobilenet_v2_train_b8_128 efficientnet_b0_train_b8_128"}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $THREADS threads, AVX-512 flags: $(grep -c avx512 /proc/cpuinfo)"
for r in $(seq "$ROUNDS"); do
    for c in $CASES; do
        if [ "$c" != resnet50_infer_b1_fused ]; then
            read -r ms rss <<<"$(wick_case "$c")"
            echo "round $r wick  $c $ms ms, peak RSS $((rss / 1024)) MiB" | tee -a "$OUT"
        fi
        read -r ms rss <<<"$(torch_case "$c")"
        echo "round $r torch $c $ms ms, peak RSS $((rss / 1024)) MiB" | tee -a "$OUT"
    done
done
echo
"$PYTHON" - "$OUT" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w+)\s+(\S+) ([0-9.]+) ms, peak RSS (\d+) MiB", line)
    if m:
        runs.setdefault((m[1], m[2]), []).append((float(m[3]), int(m[4])))
med = lambda k, i: statistics.median(v[i] for v in runs[k]) if k in runs else None
print(f"| case | wick ms | PyTorch ms | wick / PyTorch | wick peak RSS MiB | PyTorch peak RSS MiB |")
print("|---|---|---|---|---|---|")
for case in ["resnet18_cifar_train_b8", "resnet18_cifar_train_b32", "resnet50_train_b2", "resnet50_infer_b1",
             "mobilenet_v2_train_b8_128", "efficientnet_b0_train_b8_128", "convnext_tiny_train_b8_128",
             "vit_b_16_train_b2_224", "gpt2_6l_384_train_b4_256", "llama_6l_384_train_b4_256",
             "attention_t1024", "attention_t1024_causal", "attention_t4096"]:
    w, t = med(("wick", case), 0), med(("torch", case), 0)
    if w is None or t is None:
        continue
    print(f"| {case} | {w:.1f} | {t:.1f} | {w / t:.2f}x | {med(('wick', case), 1):.0f} | {med(('torch', case), 1):.0f} |")
w, t = med(("wick", "resnet50_infer_b1"), 0), med(("torch", "resnet50_infer_b1_fused"), 0)
if w is not None and t is not None:
    print(f"| resnet50_infer_b1 vs PyTorch fused (frozen TorchScript) | {w:.1f} | {t:.1f} | {w / t:.2f}x | - | {med(('torch', 'resnet50_infer_b1_fused'), 1):.0f} |")
PY
