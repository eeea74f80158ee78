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
cargo clippy --features mpi --all-targets -- -D warnings
cargo build --release --features mpi --example dist_check
MPIRUN=(mpirun --oversubscribe -np 2)
if [ "$(id -u)" = 0 ]; then MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2); fi
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

echo "== 2 ranks against one process on the whole batch"
timeout 120 "${MPIRUN[@]}" target/release/examples/dist_check | tee "$LOG"
[ "$(grep -c '^rank [01] of 2 (mpi): .* weights within' "$LOG")" = 2 ] || {
    echo "mpi-check: expected a result line from each of the 2 ranks" >&2
    exit 1
}

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
