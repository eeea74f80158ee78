// Batch norm over (N, H, W) per channel of an NCHW tensor: training forward (with the
// fused-ReLU variant), training backward (with the fused ReLU mask) and inference forward.
//
// A training forward is two launches: `batch_norm_moments` reads x once and leaves each
// block's count, mean and squared deviations (Chan's parallel Welford form, so the
// statistics are sound in float); `batch_norm_train_forward` merges a channel's partial
// moments and writes y in one more read of x. Backward is the same shape: partial sums of
// g and g * (x - mean), then dx. The grid is (C, splits): each channel's N*H*W values are
// cut into `splits` contiguous ranges, one per block, so small-channel layers still fill
// the GPU (`wick_ops::gpu::Launch::batch_norm`).
//
// A: the accumulation type (float for f32, bf16 and f16 tensors, double for f64). The
// 16-bit variants read into float, keep the partial moments and sums in float and round
// each output once (the saved mean and inverse deviation too, in the tensor's dtype).
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

// The range [lo, hi) of a channel's M = N*HW values that block `split` of `splits` covers.
__device__ void split_range(long long M, int split, int splits, long long* lo, long long* hi) {
    long long per = (M + splits - 1) / splits;
    *lo = per * split;
    *hi = *lo + per < M ? *lo + per : M;
}

// Index of value j of channel c in NCHW.
__device__ long long nchw_index(long long j, int c, int C, int HW) {
    long long n = j / HW;
    return (n * C + c) * HW + (j - n * HW);
}

template <typename T, typename A>
__device__ void moments(const T* x, A* partial, int N, int C, int HW) {
    int c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    long long lo, hi;
    split_range((long long)N * HW, split, splits, &lo, &hi);
    A count = 0, shift = 0, s1 = 0, s2 = 0;
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        A v = (A)x[nchw_index(j, c, C, HW)];
        if (count == (A)0) shift = v;
        A d = v - shift;
        count += (A)1;
        s1 += d;
        s2 += d * d;
    }
    Moments<A> m = block_moments(shifted_moments(count, shift, s1, s2));
    if (threadIdx.x == 0) {
        A* p = partial + ((long long)c * splits + split) * 3;
        p[0] = m.count;
        p[1] = m.mean;
        p[2] = m.m2;
    }
}

template <typename T, typename A>
__device__ void train_forward(const T* x, T* y, const A* partial, const T* weight, const T* bias,
                              const T* running_mean, const T* running_var, T* mean_out,
                              T* inv_std_out, T* running_mean_out, T* running_var_out, int N,
                              int C, int HW, int relu, double eps, double momentum) {
    int c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    __shared__ A stats[2];
    if (threadIdx.x == 0) {
        Moments<A> m{(A)0, (A)0, (A)0};
        for (int k = 0; k < splits; ++k) {
            const A* p = partial + ((long long)c * splits + k) * 3;
            m = merge(m, Moments<A>{p[0], p[1], p[2]});
        }
        A inv_std = (A)1 / sqrt(m.m2 / m.count + (A)eps);
        stats[0] = m.mean;
        stats[1] = inv_std;
        if (split == 0) {
            // PyTorch's running statistics: the unbiased variance, blended by momentum.
            A unbiased = m.m2 / (m.count - (A)1), mo = (A)momentum;
            mean_out[c] = (T)m.mean;
            inv_std_out[c] = (T)inv_std;
            running_mean_out[c] = (T)(((A)1 - mo) * (A)running_mean[c] + mo * m.mean);
            running_var_out[c] = (T)(((A)1 - mo) * (A)running_var[c] + mo * unbiased);
        }
    }
    __syncthreads();
    A scale = (A)weight[c] * stats[1];
    A shift = (A)bias[c] - stats[0] * scale;
    long long lo, hi;
    split_range((long long)N * HW, split, splits, &lo, &hi);
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        long long i = nchw_index(j, c, C, HW);
        T v = (T)((A)x[i] * scale + shift);
        // ReLU as wick's: 0 where v <= 0, NaN kept.
        y[i] = relu && v <= (T)0 ? (T)0 : v;
    }
}

// Partial sums of g and g * (x - mean) per block, g the output gradient, masked by the
// ReLU output z (z <= 0 passes no gradient) when z is given.
template <typename T, typename A>
__device__ void backward_sums(const T* grad_y, const T* z, const T* x, const T* mean, A* partial,
                              int N, int C, int HW) {
    int c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    long long lo, hi;
    split_range((long long)N * HW, split, splits, &lo, &hi);
    A mu = (A)mean[c], sum_g = 0, sum_gx = 0;
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        long long i = nchw_index(j, c, C, HW);
        A g = z && z[i] <= (T)0 ? (A)0 : (A)grad_y[i];
        sum_g += g;
        sum_gx += g * ((A)x[i] - mu);
    }
    sum_g = block_sum(sum_g);
    sum_gx = block_sum(sum_gx);
    if (threadIdx.x == 0) {
        A* p = partial + ((long long)c * splits + split) * 2;
        p[0] = sum_g;
        p[1] = sum_gx;
    }
}

template <typename T, typename A>
__device__ void train_backward(const T* grad_y, const T* z, const T* x, const T* weight,
                               const T* mean, const T* inv_std, const A* partial, T* grad_x,
                               T* grad_weight, T* grad_bias, int N, int C, int HW) {
    int c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    __shared__ A sums[2];
    if (threadIdx.x == 0) {
        A sum_g = 0, sum_gx = 0;
        for (int k = 0; k < splits; ++k) {
            const A* p = partial + ((long long)c * splits + k) * 2;
            sum_g += p[0];
            sum_gx += p[1];
        }
        sums[0] = sum_g;
        sums[1] = sum_gx;
        if (split == 0) {
            grad_weight[c] = (T)(sum_gx * (A)inv_std[c]);
            grad_bias[c] = (T)sum_g;
        }
    }
    __syncthreads();
    A M = (A)N * (A)HW, mu = (A)mean[c], is = (A)inv_std[c];
    A mean_g = sums[0] / M, mean_gx = sums[1] / M * is * is, k = (A)weight[c] * is;
    long long lo, hi;
    split_range((long long)N * HW, split, splits, &lo, &hi);
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        long long i = nchw_index(j, c, C, HW);
        A g = z && z[i] <= (T)0 ? (A)0 : (A)grad_y[i];
        grad_x[i] = (T)(k * (g - mean_g - ((A)x[i] - mu) * mean_gx));
    }
}

// Inference: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, one pass.
template <typename T, typename A>
__device__ void eval_forward(const T* x, T* y, const T* weight, const T* bias,
                             const T* running_mean, const T* running_var, long long total, int C,
                             int HW, double eps) {
    WICK_GRID_STRIDE(i, total) {
        int c = (int)((i / HW) % C);
        A scale = (A)weight[c] / sqrt((A)running_var[c] + (A)eps);
        y[i] = (T)(((A)x[i] - (A)running_mean[c]) * scale + (A)bias[c]);
    }
}

#define WICK_BATCH_NORM(T, A, S)                                                                   \
    extern "C" __global__ void batch_norm_moments_##S(const T* x, A* partial, int N, int C,        \
                                                      int HW) {                                    \
        moments<T, A>(x, partial, N, C, HW);                                                       \
    }                                                                                              \
    extern "C" __global__ void batch_norm_train_forward_##S(                                       \
        const T* x, T* y, const A* partial, const T* weight, const T* bias,                        \
        const T* running_mean, const T* running_var, T* mean_out, T* inv_std_out,                  \
        T* running_mean_out, T* running_var_out, int N, int C, int HW, int relu, double eps,       \
        double momentum) {                                                                         \
        train_forward<T, A>(x, y, partial, weight, bias, running_mean, running_var, mean_out,      \
                            inv_std_out, running_mean_out, running_var_out, N, C, HW, relu, eps,   \
                            momentum);                                                             \
    }                                                                                              \
    extern "C" __global__ void batch_norm_backward_sums_##S(const T* grad_y, const T* z,           \
                                                            const T* x, const T* mean, A* partial, \
                                                            int N, int C, int HW) {                \
        backward_sums<T, A>(grad_y, z, x, mean, partial, N, C, HW);                                \
    }                                                                                              \
    extern "C" __global__ void batch_norm_train_backward_##S(                                      \
        const T* grad_y, const T* z, const T* x, const T* weight, const T* mean,                   \
        const T* inv_std, const A* partial, T* grad_x, T* grad_weight, T* grad_bias, int N, int C, \
        int HW) {                                                                                  \
        train_backward<T, A>(grad_y, z, x, weight, mean, inv_std, partial, grad_x, grad_weight,    \
                             grad_bias, N, C, HW);                                                 \
    }                                                                                              \
    extern "C" __global__ void batch_norm_eval_forward_##S(                                        \
        const T* x, T* y, const T* weight, const T* bias, const T* running_mean,                   \
        const T* running_var, long long total, int C, int HW, double eps) {                        \
        eval_forward<T, A>(x, y, weight, bias, running_mean, running_var, total, C, HW, eps);      \
    }

WICK_BATCH_NORM(float, float, f32)
WICK_BATCH_NORM(double, double, f64)
WICK_BATCH_NORM(wick_bf16, float, bf16)
WICK_BATCH_NORM(wick_f16, float, f16)
