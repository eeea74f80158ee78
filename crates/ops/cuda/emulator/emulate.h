// The CUDA execution model on the host, for running wick's kernels in `cargo test` on a
// machine with no GPU and no CUDA. build.rs compiles every .cu file as C++ with this header
// forced in front (`-include`), and one entry point per `extern "C" __global__` kernel that
// runs it over a grid (see emulator.cpp).
//
// What it emulates, faithfully enough to catch indexing, reduction, boundary and launch
// geometry bugs:
// - the grid: every block runs with the built-in variables (blockIdx, threadIdx, blockDim,
//   gridDim) of the launch configuration the Rust side computed, and CUDA's limits on it;
// - threads: each CUDA thread of a block is a fiber with its own stack; a block's threads
//   run in turns on one OS thread, blocks run on several OS threads at once;
// - __syncthreads: every thread of the block must reach it before any passes; a thread that
//   returns while others wait, or a barrier only some threads reach, is reported (CUDA would
//   hang or be undefined);
// - __shared__: one copy per block (per OS thread, which runs one block at a time);
// - warp shuffles: exchanged within the 32 lanes of a warp, all of which must take part;
// - atomics: real atomic read-modify-writes, as blocks run concurrently.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
    unsigned int x, y, z;
};
struct uint3 {
    unsigned int x, y, z;
};

namespace wick_emu {

// The built-in variables of the running CUDA thread.
struct ThreadVars {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};

extern thread_local const ThreadVars* current;

void sync_block();
void sync_warp(unsigned int mask);
// Lane exchange: `mode` 0 = from lane `arg` (__shfl_sync), 1 = down by `arg`, 2 = up by
// `arg`, 3 = xor `arg`, within segments of `width` lanes.
void shuffle(unsigned int mask, const void* in, void* out, unsigned int size, int mode, int arg,
             int width);

}  // namespace wick_emu

#define __global__
#define __device__ inline
#define __host__
#define __forceinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define threadIdx (wick_emu::current->thread_idx)
#define blockIdx (wick_emu::current->block_idx)
#define blockDim (wick_emu::current->block_dim)
#define gridDim (wick_emu::current->grid_dim)
#define warpSize 32

inline void __syncthreads() { wick_emu::sync_block(); }
inline void __syncwarp(unsigned int mask = 0xffffffffu) { wick_emu::sync_warp(mask); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// The shuffles, by the kind the emulator's shuffle takes: 0 from a lane, 1 down, 2 up, 3 xor.
template <typename T>
inline T shuffled(unsigned int mask, T v, int kind, int arg, int width) {
    T out;
    wick_emu::shuffle(mask, &v, &out, sizeof(T), kind, arg, width);
    return out;
}
template <typename T>
inline T __shfl_sync(unsigned int mask, T v, int src, int width = 32) {
    return shuffled(mask, v, 0, src, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return shuffled(mask, v, 1, (int)delta, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return shuffled(mask, v, 2, (int)delta, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32) {
    return shuffled(mask, v, 3, lane_mask, width);
}

// Atomics: compare-and-swap loops for floating point, as the hardware's are atomic too.
template <typename F>
inline F atomic_add_float(F* a, F v) {
    F old;
    __atomic_load(a, &old, __ATOMIC_RELAXED);
    F next;
    do {
        next = old + v;
    } while (!__atomic_compare_exchange(a, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
inline float atomicAdd(float* a, float v) { return atomic_add_float(a, v); }
inline double atomicAdd(double* a, double v) { return atomic_add_float(a, v); }
inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned int atomicAdd(unsigned int* a, unsigned int v) {
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned int atomicOr(unsigned int* a, unsigned int v) {
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);
}
inline int atomicMin(int* a, int v) {
    int old = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (v < old && !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST,
                                                   __ATOMIC_RELAXED)) {
    }
    return old;
}
inline unsigned int atomicExch(unsigned int* a, unsigned int v) {
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned int atomicCAS(unsigned int* a, unsigned int expected, unsigned int v) {
    __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}

// Device math functions the kernels use that the host's libm lacks or names differently.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float __int_as_float(int v) {
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}
inline int __float_as_int(float f) {
    int v;
    memcpy(&v, &f, sizeof v);
    return v;
}
inline double __longlong_as_double(long long v) {
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}
