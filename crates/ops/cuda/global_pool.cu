// Global average pooling of NCHW to (N, C): one warp per plane (N*C planes of H*W), so a
// 7x7 plane is read by 32 lanes at once instead of one thread; the backward spreads each
// plane's gradient over its H*W inputs, one thread per input. The 16-bit variants sum in
// float.
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

template <typename T, typename A>
__device__ void global_avg_pool_fwd(const T* x, T* y, long long planes, int HW) {
    long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    long long warps = (long long)gridDim.x * blockDim.x / 32;
    unsigned int lane = threadIdx.x % 32;
    // Whole warps take the same trips through this loop: the shuffles need all 32 lanes.
    for (long long plane = warp; plane < planes; plane += warps) {
        const T* p = x + plane * HW;
        A sum = 0;
        for (int i = lane; i < HW; i += 32) sum += (A)p[i];
        sum = warp_sum(sum);
        if (lane == 0) y[plane] = (T)(sum / (A)HW);
    }
}

template <typename T, typename A>
__device__ void global_avg_pool_bwd(const T* grad_y, T* grad_x, long long total, int HW) {
    WICK_GRID_STRIDE(i, total) grad_x[i] = (T)((A)grad_y[i / HW] / (A)HW);
}

#define WICK_GLOBAL_POOL(T, A, S)                                                                  \
    extern "C" __global__ void global_avg_pool_forward_##S(const T* x, T* y, long long planes,     \
                                                           int HW) {                               \
        global_avg_pool_fwd<T, A>(x, y, planes, HW);                                               \
    }                                                                                              \
    extern "C" __global__ void global_avg_pool_backward_##S(const T* grad_y, T* grad_x,            \
                                                            long long total, int HW) {             \
        global_avg_pool_bwd<T, A>(grad_y, grad_x, total, HW);                                      \
    }

WICK_GLOBAL_POOL(float, float, f32)
WICK_GLOBAL_POOL(double, double, f64)
WICK_GLOBAL_POOL(wick_bf16, float, bf16)
WICK_GLOBAL_POOL(wick_f16, float, f16)
