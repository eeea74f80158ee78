// Softmax cross-entropy with integer labels, mean over the batch (PyTorch's
// F.cross_entropy): the forward is one block per row (max, then the sum of exponentials:
// two reads of the row), then one block for the batch mean, so no value travels to the
// host. The backward recomputes softmax from the saved log-sum-exp: one read of the logits,
// one write of the gradient. A label outside 0..K makes its row's loss NaN on the forward
// (never an out-of-bounds read) and gives a zero one-hot row on the backward. The bf16 and
// f16 variants read their logits into float, keep the per-row values in float and round
// the loss and each gradient once.
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

template <typename T, typename A>
__device__ void cross_entropy_rows(const T* logits, const unsigned int* labels, A* row_loss,
                                   A* lse, int N, int K) {
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const T* x = logits + (long long)row * K;
        A m = -wick_infinity<A>();
        for (int k = threadIdx.x; k < K; k += blockDim.x) {
            A v = (A)x[k];
            m = (v > m || v != v) ? v : m;
        }
        m = block_max(m);
        A s = 0;
        for (int k = threadIdx.x; k < K; k += blockDim.x) s += exp((A)x[k] - m);
        s = block_sum(s);
        if (threadIdx.x == 0) {
            A l = m + log(s);
            unsigned int label = labels[row];
            lse[row] = l;
            row_loss[row] = label < (unsigned int)K ? l - (A)x[label] : wick_nan<A>();
        }
    }
}

template <typename T, typename A>
__device__ void cross_entropy_mean(const A* row_loss, T* loss, int N) {
    A s = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += row_loss[i];
    s = block_sum(s);
    if (threadIdx.x == 0) loss[0] = (T)(s / (A)N);
}

template <typename T, typename A>
__device__ void cross_entropy_bwd(const T* logits, const unsigned int* labels, const A* lse,
                                  const T* grad_loss, T* grad_logits, int N, int K) {
    long long total = (long long)N * K;
    A scale = (A)grad_loss[0] / (A)N;
    WICK_GRID_STRIDE(i, total) {
        long long row = i / K;
        int k = (int)(i - row * K);
        A p = exp((A)logits[i] - lse[row]);
        A onehot = labels[row] == (unsigned int)k ? (A)1 : (A)0;
        grad_logits[i] = (T)((p - onehot) * scale);
    }
}

#define WICK_CROSS_ENTROPY(T, A, S)                                                                \
    extern "C" __global__ void cross_entropy_rows_##S(                                             \
        const T* logits, const unsigned int* labels, A* row_loss, A* lse, int N, int K) {          \
        cross_entropy_rows<T, A>(logits, labels, row_loss, lse, N, K);                             \
    }                                                                                              \
    extern "C" __global__ void cross_entropy_mean_##S(const A* row_loss, T* loss, int N) {         \
        cross_entropy_mean<T, A>(row_loss, loss, N);                                               \
    }                                                                                              \
    extern "C" __global__ void cross_entropy_backward_##S(                                         \
        const T* logits, const unsigned int* labels, const A* lse, const T* grad_loss,             \
        T* grad_logits, int N, int K) {                                                            \
        cross_entropy_bwd<T, A>(logits, labels, lse, grad_loss, grad_logits, N, K);                \
    }

WICK_CROSS_ENTROPY(float, float, f32)
WICK_CROSS_ENTROPY(double, double, f64)
WICK_CROSS_ENTROPY(wick_bf16, float, bf16)
WICK_CROSS_ENTROPY(wick_f16, float, f16)
