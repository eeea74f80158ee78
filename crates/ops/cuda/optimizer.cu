// The optimizer update as one launch for all parameters (a multi-tensor update): the
// parameters are cut into chunks of at most `chunk_len` elements, never across two
// tensors; block b updates chunk b (grid-stride over chunks), found through a chunk table
// the Rust side builds once per parameter set (`wick_ops::gpu::ChunkTable`). Each element
// is read and written once. A parameter that becomes NaN or infinite sets its flag in
// `non_finite` (one per tensor, zeroed before the launch), so the step's finiteness check
// costs no extra pass and names the parameter.
//
// T is the tensors' type, A the type the update computes in (and its scalars' type): the
// same for f32 and f64; float for bf16 and f16, whose parameters and state are read into
// float and each rounded once when stored (PyTorch's fused optimizers' rule). A parameter
// is finite when its stored value is (an f16 update past 65504 is infinite).
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

// PyTorch's SGD: d = g + wd * p; with momentum, buf = momentum * buf + (1 - dampening) * d
// (buf = d on the first step), d = nesterov ? d + momentum * buf : buf; p -= lr * d.
template <typename T, typename A>
__device__ void sgd_multi(T* const* params, const T* const* grads, T* const* bufs,
                          const long long* sizes, const int* chunk_tensor,
                          const long long* chunk_start, int chunks, int chunk_len, A lr,
                          A momentum, A dampening, A weight_decay, int nesterov, int first_step,
                          unsigned int* non_finite) {
    for (int chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
        int t = chunk_tensor[chunk];
        long long start = chunk_start[chunk];
        long long end = start + chunk_len < sizes[t] ? start + chunk_len : sizes[t];
        T* p = params[t];
        const T* g = grads[t];
        bool finite = true;
        for (long long j = start + threadIdx.x; j < end; j += blockDim.x) {
            A d = (A)g[j], w = (A)p[j];
            if (weight_decay != (A)0) d = d + w * weight_decay;
            if (momentum != (A)0) {
                T* b = bufs[t];
                A buf = first_step ? d : (A)b[j] * momentum + d * ((A)1 - dampening);
                b[j] = (T)buf;
                d = nesterov ? d + buf * momentum : buf;
            }
            T next = (T)(w - d * lr);
            p[j] = next;
            finite = finite && isfinite((A)next);
        }
        if (!finite) atomicOr(non_finite + t, 1u);
    }
}

// PyTorch's Adam/AdamW (no amsgrad), as the CPU kernel (optim/adam_cpu.rs) computes it.
// The host computes every constant in double and rounds it once, as PyTorch's Python
// scalars are: `decay` is 1 - lr * weight_decay (decoupled) or weight_decay (added to the
// gradient); `one_minus_beta1` and `one_minus_beta2` are 1 - beta (1 - 0.999 taken in
// float would be 1.3e-5 off); `step_size` = lr / (1 - beta1^t) and `bias2_sqrt` =
// sqrt(1 - beta2^t) for the step t.
template <typename T, typename A>
__device__ void adam_multi(T* const* params, const T* const* grads, T* const* exp_avgs,
                           T* const* exp_avg_sqs, const long long* sizes, const int* chunk_tensor,
                           const long long* chunk_start, int chunks, int chunk_len, A decay,
                           int decoupled, A beta2, A one_minus_beta1, A one_minus_beta2, A eps,
                           A step_size, A bias2_sqrt, unsigned int* non_finite) {
    for (int chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
        int t = chunk_tensor[chunk];
        long long start = chunk_start[chunk];
        long long end = start + chunk_len < sizes[t] ? start + chunk_len : sizes[t];
        T *p = params[t], *m = exp_avgs[t], *v = exp_avg_sqs[t];
        const T* g = grads[t];
        bool finite = true;
        for (long long j = start + threadIdx.x; j < end; j += blockDim.x) {
            A w = (A)p[j], d = (A)g[j], m0 = (A)m[j];
            if (decoupled)
                w = w * decay;
            else
                d = d + w * decay;
            A mj = m0 + (d - m0) * one_minus_beta1;
            A vj = (A)v[j] * beta2 + one_minus_beta2 * d * d;
            m[j] = (T)mj;
            v[j] = (T)vj;
            T next = (T)(w - mj / (sqrt(vj) / bias2_sqrt + eps) * step_size);
            p[j] = next;
            finite = finite && isfinite((A)next);
        }
        if (!finite) atomicOr(non_finite + t, 1u);
    }
}

#define WICK_OPTIMIZERS(T, A, S)                                                                   \
    extern "C" __global__ void sgd_multi_tensor_##S(                                               \
        T* const* params, const T* const* grads, T* const* bufs, const long long* sizes,           \
        const int* chunk_tensor, const long long* chunk_start, int chunks, int chunk_len, A lr,    \
        A momentum, A dampening, A weight_decay, int nesterov, int first_step,                     \
        unsigned int* non_finite) {                                                                \
        sgd_multi<T, A>(params, grads, bufs, sizes, chunk_tensor, chunk_start, chunks, chunk_len, lr, \
                     momentum, dampening, weight_decay, nesterov, first_step, non_finite);         \
    }                                                                                              \
    extern "C" __global__ void adam_multi_tensor_##S(                                              \
        T* const* params, const T* const* grads, T* const* exp_avgs, T* const* exp_avg_sqs,        \
        const long long* sizes, const int* chunk_tensor, const long long* chunk_start, int chunks,  \
        int chunk_len, A decay, int decoupled, A beta2, A one_minus_beta1, A one_minus_beta2,      \
        A eps, A step_size, A bias2_sqrt, unsigned int* non_finite) {                              \
        adam_multi<T, A>(params, grads, exp_avgs, exp_avg_sqs, sizes, chunk_tensor, chunk_start,      \
                      chunks, chunk_len, decay, decoupled, beta2, one_minus_beta1,                 \
                      one_minus_beta2, eps, step_size, bias2_sqrt, non_finite);                    \
    }

WICK_OPTIMIZERS(float, float, f32)
WICK_OPTIMIZERS(double, double, f64)
WICK_OPTIMIZERS(wick_bf16, float, bf16)
WICK_OPTIMIZERS(wick_f16, float, f16)
