// Fused scaled dot-product attention. One warp per query row (forward, dQ) or per key row
// (dK, dV): the row's vectors spread over the lanes (dimension d on lane d % 32, at most
// WICK_ATTN_PER_LANE per lane), each dot product a warp sum. The forward keeps a running
// maximum and sum per row (the online softmax) and writes the output and the row's
// log-sum-exp, never the L x S probabilities; the backward draws them again from those.
// The mask is additive (a boolean one made -inf/0 by the caller), addressed as
// bias[bias_offsets[h] + i * bias_row + j * bias_col], so a mask shared by every head is
// read in place. Dropout keeps weight (h, i, j) when wick's counter hash of its index
// (h * L + i) * S + j clears the threshold: the bits the CPU kernel draws.
//
// T is the tensors' type, A the type the kernels compute in: the same for f32 and f64,
// float for bf16 and f16 (read into float, each output rounded once). The log-sum-exp the
// forward saves and the backward's row deltas are kept in A.
//
// `products` (float32 only) is autocast's: 0 multiplies the values as they are, 1 (2)
// multiplies their bf16 (f16) values, as the CPU kernel's 16-bit GEMMs do: every operand
// of a product is rounded as it is read, q, k, v and dO, and the weights too (the
// probabilities that multiply v and dO, the scores' gradient that multiplies k and q).
// The sums, the softmax and the row deltas stay in A.
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

#define WICK_ATTN_PER_LANE 8

__device__ unsigned long long wick_attn_splitmix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The sum of v over the warp, in every lane.
template <typename A>
__device__ A wick_attn_warp_sum(A v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(WICK_FULL_MASK, v, offset);
    return v;
}

// x as a product reads it: itself, or its bf16 (products 1) or f16 (2) value.
template <typename A>
__device__ A wick_attn_operand(A x, int products) {
    if (products == 1) return (A)(float)wick_bf16((float)x);
    if (products == 2) return (A)(float)wick_f16((float)x);
    return x;
}

// What every kernel needs to know about one attention.
template <typename T, typename A>
struct AttnShape {
    int heads, L, S, E, Ev;
    A scale;
    int causal;
    const T* bias;
    const long long* bias_offsets;
    long long bias_row, bias_col;
    unsigned long long drop_base, drop_threshold;
    A drop_keep;  // 1 / (1 - p); 0 when dropout is off
    int products;  // 0: as they are; 1: bf16 values; 2: f16 values

    // The logit of (h, i, j) from the product q_i . k_j; -inf where hidden.
    __device__ A logit(int h, int i, int j, A dot) const {
        if (causal && j > i) return -wick_infinity<A>();
        A x = dot * scale;
        if (bias) x += (A)bias[bias_offsets[h] + i * bias_row + j * bias_col];
        return x;
    }
    // The dropout factor of weight (h, i, j): 1 without dropout.
    __device__ A factor(int h, int i, int j) const {
        if (drop_keep == (A)0) return (A)1;
        unsigned long long index = ((unsigned long long)h * L + i) * S + j;
        unsigned long long u = wick_attn_splitmix64(drop_base ^ (index * 0xD6E8FEB86659FD93ULL)) >> 11;
        return u >= drop_threshold ? drop_keep : (A)0;
    }
    // The keys row i sees: 0..key_end(i).
    __device__ int key_end(int i) const { return causal ? (i + 1 < S ? i + 1 : S) : S; }
};

// Loads a row of `n` values into the lane's registers (dimension lane + 32 c), as a
// product reads them under `products`.
template <typename T, typename A>
__device__ void attn_load(const T* row, int n, A* reg, int products) {
    unsigned int lane = threadIdx.x % 32;
    for (int c = 0; c < WICK_ATTN_PER_LANE; c++) {
        int d = lane + 32 * c;
        reg[c] = d < n ? wick_attn_operand((A)row[d], products) : (A)0;
    }
}

// The dot product of the lane registers with a row of `n` values, in every lane.
template <typename T, typename A>
__device__ A attn_dot(const A* reg, const T* row, int n, int products) {
    unsigned int lane = threadIdx.x % 32;
    A s = 0;
    for (int c = 0; c < WICK_ATTN_PER_LANE; c++) {
        int d = lane + 32 * c;
        if (d < n) s += reg[c] * wick_attn_operand((A)row[d], products);
    }
    return wick_attn_warp_sum(s);
}

// Adds w * row to the lane registers, both as a product reads them.
template <typename T, typename A>
__device__ void attn_axpy(A* reg, A w, const T* row, int n, int products) {
    unsigned int lane = threadIdx.x % 32;
    w = wick_attn_operand(w, products);
    for (int c = 0; c < WICK_ATTN_PER_LANE; c++) {
        int d = lane + 32 * c;
        if (d < n) reg[c] += w * wick_attn_operand((A)row[d], products);
    }
}

template <typename T, typename A>
__device__ void attn_store(T* row, int n, const A* reg, A factor) {
    unsigned int lane = threadIdx.x % 32;
    for (int c = 0; c < WICK_ATTN_PER_LANE; c++) {
        int d = lane + 32 * c;
        if (d < n) row[d] = (T)(reg[c] * factor);
    }
}

// Whole warps take the same trips through every row loop: the sums need all 32 lanes.
#define WICK_ATTN_WARP_ROWS(row, rows)                                                  \
    for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < (rows); \
         row += (long long)gridDim.x * blockDim.x / 32)

template <typename T, typename A>
__device__ void attn_forward(const T* q, const T* k, const T* v, AttnShape<T, A> s, T* out, A* lse) {
    WICK_ATTN_WARP_ROWS(row, (long long)s.heads * s.L) {
        int h = (int)(row / s.L), i = (int)(row % s.L);
        A qr[WICK_ATTN_PER_LANE], acc[WICK_ATTN_PER_LANE];
        attn_load<T, A>(q + row * s.E, s.E, qr, s.products);
        for (int c = 0; c < WICK_ATTN_PER_LANE; c++) acc[c] = 0;
        A m = -wick_infinity<A>(), sum = 0;
        const T* kh = k + (long long)h * s.S * s.E;
        const T* vh = v + (long long)h * s.S * s.Ev;
        for (int j = 0; j < s.key_end(i); j++) {
            A x = s.logit(h, i, j, attn_dot<T, A>(qr, kh + (long long)j * s.E, s.E, s.products));
            if (x == -wick_infinity<A>()) continue;
            A new_m = x > m ? x : m;
            A alpha = exp(m - new_m), p = exp(x - new_m);
            sum = sum * alpha + p;
            m = new_m;
            for (int c = 0; c < WICK_ATTN_PER_LANE; c++) acc[c] *= alpha;
            attn_axpy<T, A>(acc, p * s.factor(h, i, j), vh + (long long)j * s.Ev, s.Ev, s.products);
        }
        // A row that sees no key: output 0, log-sum-exp -inf.
        attn_store<T, A>(out + row * s.Ev, s.Ev, acc, sum == (A)0 ? (A)0 : (A)1 / sum);
        if (threadIdx.x % 32 == 0) lse[row] = sum == (A)0 ? -wick_infinity<A>() : m + log(sum);
    }
}

// delta_i = dO_i . O_i, one warp per query row.
template <typename T, typename A>
__device__ void attn_delta(const T* dout, const T* out, A* delta, long long rows, int Ev) {
    WICK_ATTN_WARP_ROWS(row, rows) {
        A o[WICK_ATTN_PER_LANE];
        attn_load<T, A>(out + row * Ev, Ev, o, 0);
        A d = attn_dot<T, A>(o, dout + row * Ev, Ev, 0);
        if (threadIdx.x % 32 == 0) delta[row] = d;
    }
}

// The probability of (h, i, j) from its logit and the row's log-sum-exp.
template <typename A>
__device__ A attn_prob(A x, A lse) {
    return (x == -wick_infinity<A>() || lse == -wick_infinity<A>()) ? (A)0 : exp(x - lse);
}

// dQ_i = scale * sum_j P_ij (dP_ij f_ij - delta_i) k_j, one warp per query row.
template <typename T, typename A>
__device__ void attn_grad_q(const T* q, const T* k, const T* v, const T* dout, const A* lse,
                            const A* delta, AttnShape<T, A> s, T* dq) {
    WICK_ATTN_WARP_ROWS(row, (long long)s.heads * s.L) {
        int h = (int)(row / s.L), i = (int)(row % s.L);
        A qr[WICK_ATTN_PER_LANE], dor[WICK_ATTN_PER_LANE], acc[WICK_ATTN_PER_LANE];
        attn_load<T, A>(q + row * s.E, s.E, qr, s.products);
        attn_load<T, A>(dout + row * s.Ev, s.Ev, dor, s.products);
        for (int c = 0; c < WICK_ATTN_PER_LANE; c++) acc[c] = 0;
        A l = lse[row], di = delta[row];
        const T* kh = k + (long long)h * s.S * s.E;
        const T* vh = v + (long long)h * s.S * s.Ev;
        for (int j = 0; j < s.key_end(i); j++) {
            A p = attn_prob(s.logit(h, i, j, attn_dot<T, A>(qr, kh + (long long)j * s.E, s.E, s.products)), l);
            if (p == (A)0) continue;
            A dp = attn_dot<T, A>(dor, vh + (long long)j * s.Ev, s.Ev, s.products) * s.factor(h, i, j);
            attn_axpy<T, A>(acc, p * (dp - di) * s.scale, kh + (long long)j * s.E, s.E, s.products);
        }
        attn_store<T, A>(dq + row * s.E, s.E, acc, (A)1);
    }
}

// dK_j and dV_j over the queries that see key j, one warp per key row.
template <typename T, typename A>
__device__ void attn_grad_kv(const T* q, const T* k, const T* v, const T* dout, const A* lse,
                             const A* delta, AttnShape<T, A> s, T* dk, T* dv) {
    WICK_ATTN_WARP_ROWS(row, (long long)s.heads * s.S) {
        int h = (int)(row / s.S), j = (int)(row % s.S);
        A kr[WICK_ATTN_PER_LANE], vr[WICK_ATTN_PER_LANE], gk[WICK_ATTN_PER_LANE], gv[WICK_ATTN_PER_LANE];
        attn_load<T, A>(k + row * s.E, s.E, kr, s.products);
        attn_load<T, A>(v + row * s.Ev, s.Ev, vr, s.products);
        for (int c = 0; c < WICK_ATTN_PER_LANE; c++) gk[c] = gv[c] = 0;
        const T* qh = q + (long long)h * s.L * s.E;
        const T* doh = dout + (long long)h * s.L * s.Ev;
        for (int i = s.causal ? j : 0; i < s.L; i++) {
            long long qrow = (long long)h * s.L + i;
            A p = attn_prob(s.logit(h, i, j, attn_dot<T, A>(kr, qh + (long long)i * s.E, s.E, s.products)), lse[qrow]);
            if (p == (A)0) continue;
            A f = s.factor(h, i, j);
            attn_axpy<T, A>(gv, p * f, doh + (long long)i * s.Ev, s.Ev, s.products);
            A dp = attn_dot<T, A>(vr, doh + (long long)i * s.Ev, s.Ev, s.products) * f;
            attn_axpy<T, A>(gk, p * (dp - delta[qrow]) * s.scale, qh + (long long)i * s.E, s.E, s.products);
        }
        attn_store<T, A>(dk + row * s.E, s.E, gk, (A)1);
        attn_store<T, A>(dv + row * s.Ev, s.Ev, gv, (A)1);
    }
}

#define WICK_ATTN_PARAMS(T, A)                                                                  \
    int heads, int L, int S, int E, int Ev, A scale, int causal, const T* bias,                \
        const long long* bias_offsets, long long bias_row, long long bias_col,                 \
        unsigned long long drop_base, unsigned long long drop_threshold, A drop_keep, int products
#define WICK_ATTN_SHAPE                                                                         \
    {heads, L, S, E, Ev, scale, causal, bias, bias_offsets, bias_row, bias_col, drop_base,     \
     drop_threshold, drop_keep, products}

#define WICK_ATTENTION(T, A, SUFFIX)                                                               \
    extern "C" __global__ void attention_forward_##SUFFIX(const T* q, const T* k, const T* v, T* out, \
                                                          A* lse, WICK_ATTN_PARAMS(T, A)) {         \
        AttnShape<T, A> s = WICK_ATTN_SHAPE;                                                        \
        attn_forward<T, A>(q, k, v, s, out, lse);                                                   \
    }                                                                                               \
    extern "C" __global__ void attention_delta_##SUFFIX(const T* dout, const T* out, A* delta,      \
                                                        long long rows, int Ev) {                   \
        attn_delta<T, A>(dout, out, delta, rows, Ev);                                               \
    }                                                                                               \
    extern "C" __global__ void attention_backward_q_##SUFFIX(                                       \
        const T* q, const T* k, const T* v, const T* dout, const A* lse, const A* delta, T* dq,     \
        WICK_ATTN_PARAMS(T, A)) {                                                                   \
        AttnShape<T, A> s = WICK_ATTN_SHAPE;                                                        \
        attn_grad_q<T, A>(q, k, v, dout, lse, delta, s, dq);                                        \
    }                                                                                               \
    extern "C" __global__ void attention_backward_kv_##SUFFIX(                                      \
        const T* q, const T* k, const T* v, const T* dout, const A* lse, const A* delta, T* dk,     \
        T* dv, WICK_ATTN_PARAMS(T, A)) {                                                            \
        AttnShape<T, A> s = WICK_ATTN_SHAPE;                                                        \
        attn_grad_kv<T, A>(q, k, v, dout, lse, delta, s, dk, dv);                                   \
    }

WICK_ATTENTION(float, float, f32)
WICK_ATTENTION(double, double, f64)
WICK_ATTENTION(wick_bf16, float, bf16)
WICK_ATTENTION(wick_f16, float, f16)
