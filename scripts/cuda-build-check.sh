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
# Two passes, both in the `cuda-check` profile (Cargo.toml: no optimisation, no debug info,
# no incremental cache): clippy over every target (the whole workspace compiles and lints
# with the CUDA features, warnings as errors), then a build that links what a GPU user
# runs: the library, `wick-prof` and the examples. Test and bench binaries are checked,
# not linked.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# candle-kernels' build script compiles candle's CUDA kernels with nvcc (PTX, and the
# quantized matmuls to SASS), about 6 minutes on 2 cores and the longest step of this
# check. These binaries never run, so nvcc optimises their device code the least it can
# (nvcc reads NVCC_APPEND_FLAGS; cicc's -O0 rejects candle's `__dp4a`, -O1 does not):
# quantized.cu's PTX in 5 s instead of 32, the same compile errors. wick's own kernels
# below are compiled as NVRTC compiles them at run time, optimised.
SAVED_NVCC_APPEND_FLAGS=${NVCC_APPEND_FLAGS:-}
export NVCC_APPEND_FLAGS="$SAVED_NVCC_APPEND_FLAGS -Xcicc -O1 -Xptxas -O0"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/cuda} WORK=${WORK:-$PWD/target/cuda-ci}
start=$(date +%s)
FEATURES="cudnn nccl" CARGO_CMD=clippy \
  CARGO_ARGS="${CARGO_CHECK_ARGS:---workspace --all-targets --profile cuda-check -- -D warnings}" \
  bash "$SHARED/tools/cuda-build-check.sh"
echo "cuda-build-check: clippy over every target took $(( $(date +%s) - start )) s"
start=$(date +%s)
FEATURES="cudnn nccl" CARGO_CMD=build \
  CARGO_ARGS="${CARGO_LINK_ARGS:---workspace --lib --bins --examples --profile cuda-check}" \
  bash "$SHARED/tools/cuda-build-check.sh"
echo "cuda-build-check: linking the library, wick-prof and the examples took $(( $(date +%s) - start )) s"

export NVCC_APPEND_FLAGS=$SAVED_NVCC_APPEND_FLAGS

# wick's own kernels, compiled to PTX by nvcc for the H100/H200 (sm_90) and the A100
# (sm_80), in the form NVRTC compiles at run time: the shared header in front, no
# include path. A kernel that does not compile for either fails CI here.
NVCC=${WORK:-$PWD/target/cuda-ci}/cuda/bin/nvcc
PTX_DIR=$PWD/target/cuda-ptx
mkdir -p "$PTX_DIR"
kernels=0
for cu in crates/ops/cuda/*.cu crates/ops/src/pool/kernels.cu; do
  name=$(basename "$cu" .cu)
  { echo "#define WICK_RUNTIME_SOURCE"; cat crates/ops/cuda/common.cuh; cat "$cu"; } > "$PTX_DIR/$name.runtime.cu"
  for arch in 80 90; do
    "$NVCC" --ptx -arch=sm_$arch -o "$PTX_DIR/$name.sm_$arch.ptx" "$PTX_DIR/$name.runtime.cu"
  done
  kernels=$((kernels + $(grep -c '^\.visible \.entry' "$PTX_DIR/$name.sm_90.ptx")))
done
echo "cuda-build-check: nvcc compiled $kernels kernels of crates/ops for sm_80 and sm_90 (PTX in $PTX_DIR)"
