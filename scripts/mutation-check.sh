#!/usr/bin/env bash
# The emulated CUDA kernel tests must catch one wrong index in a kernel. For each mutation
# below, build.rs compiles the emulated kernels with it (WICK_CUDA_MUTATION=file|old|new,
# a copy in the build folder: the source tree is never touched) and the `emulated` tests
# of wick-ops must fail. Run by .ci/run.
#   bash scripts/mutation-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# A mutation changes only the build script's output, not wick-ops' Rust source, yet cargo
# recompiles wick-ops and the test binary for it. With rustc's incremental cache the first
# mutation costs a full compile (about 85 s on 2 cores) and each later one reuses it
# (about 25 s instead of 85 s). It applies to this script's builds only.
export CARGO_PROFILE_RELEASE_INCREMENTAL=true
MUTATIONS=(
  # The last of a channel's ranges runs past the channel.
  'batchnorm.cu|*hi = *lo + per < M ? *lo + per : M;|*hi = *lo + per;'
  # The softmax row of a logit is off.
  'cross_entropy.cu|long long row = i / K;|long long row = i / (K + 1);'
  # The plane loop reads one element past the plane.
  'global_pool.cu|for (int i = lane; i < HW; i += 32)|for (int i = lane; i <= HW; i += 32)'
  # A chunk that runs past the end of its tensor.
  'optimizer.cu|long long end = start + chunk_len < sizes[t] ? start + chunk_len : sizes[t];|long long end = start + chunk_len;'
  # A causal key's gradient misses the query on its diagonal.
  'attention.cu|for (int i = s.causal ? j : 0; i < s.L; i++)|for (int i = s.causal ? j + 1 : 0; i < s.L; i++)'
  # A max-pool input's last covering window runs one past the output plane.
  'kernels.cu|oy1 = min(d.OH - 1, (iy + d.ph) / d.sh)|oy1 = min(d.OH, (iy + d.ph) / d.sh)'
  # Autocast's attention weights (probabilities, scores' gradient) multiply unrounded.
  'attention.cu|    w = wick_attn_operand(w, products);|    w = w + 0;'
  # An activation's gradient reads the wrong element.
  'elementwise.cu|grad_x[i] = NAME##_gradient<T>(grad_y[i], saved[i], slope);|grad_x[i] = NAME##_gradient<T>(grad_y[i], saved[i > 0 ? i - 1 : 0], slope);'
)
caught=0
for m in "${MUTATIONS[@]}"; do
  file=${m%%|*}
  echo "== mutation in $file: $(cut -d'|' -f2 <<<"$m")  ->  $(cut -d'|' -f3 <<<"$m")"
  log=$(mktemp)
  if WICK_CUDA_MUTATION=$m cargo test -q --release -p wick-ops --test kernels emulated >"$log" 2>&1; then
    echo "mutation-check: the emulated tests PASSED with this mutation: they would miss the bug" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  if ! grep -q "test result: FAILED" "$log"; then
    echo "mutation-check: the mutated build did not reach the tests (not a valid mutation):" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  grep -E "^    emulated" "$log" | sed 's/^/   failed: /'
  caught=$((caught + 1))
  rm -f "$log"
done
echo "mutation-check: $caught of ${#MUTATIONS[@]} mutations caught by the emulated tests"
