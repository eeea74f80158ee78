#!/usr/bin/env bash
# Data-parallel training over MPI (issue #17): lints and builds wick with --features mpi,
# runs examples/dist_check under mpirun with 2 ranks (each rank's weights must match one
# process on the whole batch), then a run where rank 1 fails must end every rank with a
# non-zero exit within 60 s, not hang. Installs Debian's Open MPI and libclang (rsmpi's
# bindgen) when missing: apt-get update once, then install.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mpirun >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang*.so >/dev/null 2>&1; then
    echo "== installing Debian's Open MPI and libclang"
    apt-get update
    apt-get install -y openmpi-bin libopenmpi-dev libclang-dev
fi
mpirun --version | head -1
# --workspace, as the README's test command builds: only wick-graph and the crates above it
# are rebuilt with MPI, candle and wick-ops are reused (the root package alone resolves
# other features and rebuilds them all, about 2 minutes).
cargo clippy --workspace --features wick/mpi --all-targets -- -D warnings
cargo build --release --workspace --features wick/mpi --example dist_check --example train_resnet
MPIRUN=(mpirun --oversubscribe -np 2)
if [ "$(id -u)" = 0 ]; then MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2); fi
LOG=$(mktemp)
RUN=$(mktemp -d)
trap 'rm -rf "$LOG" "$RUN"' EXIT

echo "== 2 ranks against one process on the whole batch"
timeout 120 "${MPIRUN[@]}" target/release/examples/dist_check | tee "$LOG"
[ "$(grep -c '^rank [01] of 2 (mpi): .* weights within' "$LOG")" = 2 ] || {
    echo "mpi-check: expected a result line from each of the 2 ranks" >&2
    exit 1
}
# ResNet-18, 8 of 16 images per rank, synchronised batch norm: dist_check exits non-zero
# unless every update is within float32's spread of one process on the whole batch.
[ "$(grep -c '^  synchronised batch norm: weights median' "$LOG")" = 2 ] || {
    echo "mpi-check: expected the ResNet-18 comparison from each of the 2 ranks" >&2
    exit 1
}

echo "== train_resnet --dist mpi: replicas in step, rank 0 writes, resume at the same size"
TRAIN=(target/release/examples/train_resnet --dist mpi --stem cifar --image-size 16
    --batch-size 8 --steps-per-epoch 2 --checkpoint-dir "$RUN/ck" --checkpoint-every 2
    --save "$RUN/final.safetensors" --log "$RUN/metrics.jsonl")
checksums_agree() {
    local sums
    sums=$(sed -n 's/^rank [01] of 2: parameter checksum //p' "$LOG" | sort -u)
    [ "$(grep -c '^rank [01] of 2: parameter checksum' "$LOG")" = 2 ] && [ "$(echo "$sums" | wc -l)" = 1 ]
}
timeout 300 "${MPIRUN[@]}" "${TRAIN[@]}" --steps 4 --verbosity 3 --skip 1 \
    --json "$RUN/profile.json" --trace "$RUN/trace.json" | tee "$LOG"
checksums_agree || { echo "mpi-check: the 2 replicas' weights differ" >&2; exit 1; }
# Verbosity 3: SINGA's per-op lines for the communication ops only, and rank 0's report
# of every rank (step times, buckets, overlap), in the JSON and as one trace track per rank.
grep -q '^OP_ID[0-9]*\. DistAllReduce : ' "$LOG" && grep -q '^OP_ID[0-9]*\. DistWait : ' "$LOG"
! grep '^OP_ID' "$LOG" | grep -qv ' Dist' || { echo "mpi-check: a non-Dist op line at verbosity 3" >&2; exit 1; }
grep -q '^Data parallel: 2 ranks (mpi)' "$LOG" && grep -q '<- slowest' "$LOG" && grep -q '^  overlap: ' "$LOG"
python3 - "$RUN/profile.json" "$RUN/trace.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["distributed"]
assert d["world_size"] == 2 and len(d["ranks"]) == 2 and d["buckets"], d
names = [e["args"]["name"] for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("name") == "process_name"]
assert sum(n.startswith("rank ") for n in names) == 2, names
PY
[ "$(grep -c '^epoch 1/2' "$LOG")" = 1 ] || { echo "mpi-check: epoch lines from more than rank 0" >&2; exit 1; }
[ -f "$RUN/final.safetensors" ] && [ -d "$RUN/ck/step-4" ] && [ "$(wc -l <"$RUN/metrics.jsonl")" = 2 ]
timeout 300 "${MPIRUN[@]}" "${TRAIN[@]}" --steps 6 --resume "$RUN/ck" | tee "$LOG"
grep -q "resumed from .*step-4 at step 4" "$LOG"
checksums_agree || { echo "mpi-check: the replicas differ after resuming" >&2; exit 1; }
resumed=$(sed -n 's/^rank 0 of 2: parameter checksum //p' "$LOG")
# The uninterrupted 6 steps end with the same weights (checksum printed to 17 digits).
timeout 300 "${MPIRUN[@]}" target/release/examples/train_resnet --dist mpi --stem cifar \
    --image-size 16 --batch-size 8 --steps-per-epoch 2 --steps 6 | tee "$LOG"
[ "$(sed -n 's/^rank 0 of 2: parameter checksum //p' "$LOG")" = "$resumed" ] || {
    echo "mpi-check: the resumed run ended with other weights than the uninterrupted one" >&2
    exit 1
}

echo "== train_resnet --dist mpi --sync-bn: replicas in step"
timeout 300 "${MPIRUN[@]}" target/release/examples/train_resnet --dist mpi --sync-bn --stem cifar \
    --image-size 16 --batch-size 8 --steps-per-epoch 2 --steps 2 | tee "$LOG"
checksums_agree || { echo "mpi-check: the replicas differ with --sync-bn" >&2; exit 1; }

echo "== rank 1 hangs in its step: the collectives time out, every rank ends, non-zero"
set +e
WICK_DIST_TIMEOUT_S=5 timeout 60 "${MPIRUN[@]}" -x WICK_DIST_TIMEOUT_S \
    target/release/examples/dist_check --stall-rank 1 >"$LOG" 2>&1
rc=$?
set -e
grep -v '^OP_ID' "$LOG"
if [ "$rc" = 124 ] || [ "$rc" = 0 ] || ! grep -q "did not finish within 5 s" "$LOG"; then
    echo "mpi-check: expected rank 0's timeout error and a non-zero exit, got rc $rc" >&2
    exit 1
fi

echo "== rank 1 fails its step: every rank ends, non-zero, no hang"
set +e
timeout 60 "${MPIRUN[@]}" target/release/examples/dist_check --fail-rank 1 >"$LOG" 2>&1
rc=$?
set -e
cat "$LOG"
if [ "$rc" = 124 ]; then
    echo "mpi-check: the job hung after rank 1 failed" >&2
    exit 1
fi
if [ "$rc" = 0 ] || ! grep -q "rank 1 of 2: failing step 1 on purpose" "$LOG"; then
    echo "mpi-check: expected rank 1's error and a non-zero exit, got rc $rc" >&2
    exit 1
fi
echo "mpi-check: ok (the failed job exited with $rc)"
