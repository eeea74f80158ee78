#!/usr/bin/env bash
# Builds wick with --features cudnn,nccl on a machine with no GPU, run by .ci/run:
# ../shared/tools/cuda-build-check.sh (CUDA 13.4's compiler from PyPI, link stubs for the
# CUDA libraries), plus a link stub for NCCL made the same way: one empty function per
# symbol cudarc declares, under NCCL's real SONAME (libnccl.so.2). The binaries link but
# run only where the real CUDA 13 libraries, NCCL and a driver are installed.
#   SHARED=../shared bash scripts/cuda-build-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-$PWD/../shared}
STUBS=$PWD/target/nccl-stub
mkdir -p "$STUBS"
CUDARC_SRC=$(cargo metadata -q --format-version 1 --features nccl |
  python3 -c 'import json,sys,os; print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"]=="cudarc"))')
awk '/extern "C" \{/{getline; if (match($0,/fn [A-Za-z_0-9]+\(/)) print "void " substr($0,RSTART+3,RLENGTH-4) "(void){}"}' \
  "$CUDARC_SRC/src/nccl/sys/mod.rs" | sort -u > "$STUBS/libnccl.c"
[ -s "$STUBS/libnccl.c" ] || { echo "cuda-build-check: no NCCL symbols found in $CUDARC_SRC" >&2; exit 1; }
cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$STUBS/libnccl.so" "$STUBS/libnccl.c"
echo "cuda-build-check: NCCL link stub with $(wc -l <"$STUBS/libnccl.c") symbols in $STUBS"
export RUSTFLAGS="${RUSTFLAGS:-} -L native=$STUBS"
# A check that the code compiles and links needs no debug info and no incremental cache:
# with them every test binary is ~280 MB and the build filled CI's disk (11 GB).
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-0} CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/cuda} WORK=${WORK:-$PWD/target/cuda-ci} \
  FEATURES="cudnn nccl" CARGO_CMD=build CARGO_ARGS="${CARGO_ARGS:---workspace --all-targets}" \
  bash "$SHARED/tools/cuda-build-check.sh"
