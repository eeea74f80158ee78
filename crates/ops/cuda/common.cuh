// Helpers shared by wick's CUDA kernels: grid-stride loops and block reductions. Every
// kernel that reduces runs with a block of whole warps (a multiple of 32 threads, at most
// 1024), which the Rust side's launch geometry guarantees (`wick_ops::gpu::Launch`).
#pragma once

#define WICK_FULL_MASK 0xffffffffu

// `for` over i in [0, n), spread over the whole grid.
#define WICK_GRID_STRIDE(i, n)                                                      \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)

// Infinity and NaN without math.h (NVRTC has none).
template <typename A>
__device__ A wick_infinity();
template <>
__device__ float wick_infinity<float>() {
    return __int_as_float(0x7f800000);
}
template <>
__device__ double wick_infinity<double>() {
    return __longlong_as_double(0x7ff0000000000000LL);
}
template <typename A>
__device__ A wick_nan() {
    return wick_infinity<A>() - wick_infinity<A>();
}

// 16-bit storage types: a tensor of them is read into float, computed in float and
// rounded back once per element (as PyTorch's bf16 and f16 kernels do); `(float)v` and
// `(wick_bf16)f` convert, so a kernel templated on its storage type T and accumulator A
// takes them as it takes float and double. The conversions are bit operations, so NVRTC
// needs no header and the emulation runs them as the GPU does: round to nearest, ties to
// even; a NaN stays a quiet NaN.
__device__ unsigned short wick_bf16_bits(float f) {
    unsigned int u = (unsigned int)__float_as_int(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ unsigned short wick_f16_bits(float f) {
    unsigned int u = (unsigned int)__float_as_int(f);
    unsigned int sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520: infinity
    if (a >= 0x38800000u) {  // a normal f16: exponent rebased from 127 to 15, 13 bits rounded
        unsigned int r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (unsigned short)(sign | (r >> 13));
    }
    unsigned int e = a >> 23;
    if (e < 102u) return (unsigned short)sign;  // below 2^-25: rounds to zero
    // A subnormal f16, m * 2^-24: the 24-bit significand shifted right, ties to even.
    unsigned int mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    unsigned int m = mant >> shift, rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (m & 1u))) m += 1;
    return (unsigned short)(sign | m);
}

__device__ float wick_f16_value(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    unsigned int e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    unsigned int bits;
    if (e == 0x1fu) {
        bits = sign | 0x7f800000u | (m << 13);  // infinity or NaN
    } else if (e != 0) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        bits = sign;
    } else {  // subnormal, m * 2^-24: normalised
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    return __int_as_float((int)bits);
}

struct wick_bf16 {
    unsigned short bits;
    wick_bf16() = default;
    __device__ explicit wick_bf16(float f) : bits(wick_bf16_bits(f)) {}
    __device__ operator float() const { return __int_as_float((int)((unsigned int)bits << 16)); }
};

struct wick_f16 {
    unsigned short bits;
    wick_f16() = default;
    __device__ explicit wick_f16(float f) : bits(wick_f16_bits(f)) {}
    __device__ operator float() const { return wick_f16_value(bits); }
};

template <typename S>
__device__ float wick_load(S v) {
    return (float)v;
}

template <typename S>
__device__ S wick_store(float f) {
    return S(f);
}

template <typename A>
__device__ A warp_sum(A v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(WICK_FULL_MASK, v, offset);
    return v;
}

template <typename A>
__device__ A warp_max(A v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        A other = __shfl_down_sync(WICK_FULL_MASK, v, offset);
        // NaN wins, so a NaN logit makes the whole row NaN instead of vanishing.
        v = (other > v || other != other) ? other : v;
    }
    return v;
}

// How block_reduce combines: within a warp, and what lanes past the last warp read.
struct SumOp {
    template <typename A>
    __device__ static A warp(A v) { return warp_sum(v); }
    template <typename A>
    __device__ static A pad(A) { return (A)0; }
};
struct MaxOp {
    template <typename A>
    __device__ static A warp(A v) { return warp_max(v); }
    template <typename A>
    __device__ static A pad(A first) { return first; }
};

// `v` reduced over the block by `Op`, returned to every thread.
template <typename Op, typename A>
__device__ A block_reduce(A v) {
    __shared__ A partial[32];
    __shared__ A total;
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = Op::warp(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        A w = lane < warps ? partial[lane] : Op::pad(partial[0]);
        w = Op::warp(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    A result = total;
    __syncthreads();  // `partial` and `total` are free for the next call
    return result;
}

// The sum of `v` over the block, returned to every thread.
template <typename A>
__device__ A block_sum(A v) {
    return block_reduce<SumOp>(v);
}

// The maximum of `v` over the block (NaN if any is NaN), returned to every thread.
template <typename A>
__device__ A block_max(A v) {
    return block_reduce<MaxOp>(v);
}

// Count, mean and sum of squared deviations of a set of values (Chan et al.'s parallel
// form of Welford's algorithm): merging two is exact in exact arithmetic and stable in
// floating point, unlike sum and sum of squares.
template <typename A>
struct Moments {
    A count, mean, m2;
};

template <typename A>
__device__ Moments<A> merge(Moments<A> a, Moments<A> b) {
    A n = a.count + b.count;
    if (b.count == (A)0) return a;
    if (a.count == (A)0) return b;
    A delta = b.mean - a.mean, fb = b.count / n;
    return Moments<A>{n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.count * fb};
}

// The moments of one thread's values from sums shifted by its first value `shift`
// (`s1` = sum of v - shift, `s2` = sum of (v - shift)^2): exact enough when the shift is
// one of the values, as it is.
template <typename A>
__device__ Moments<A> shifted_moments(A count, A shift, A s1, A s2) {
    if (count == (A)0) return Moments<A>{(A)0, (A)0, (A)0};
    A mean = s1 / count;
    A m2 = s2 - s1 * mean;
    return Moments<A>{count, shift + mean, m2 > (A)0 ? m2 : (A)0};
}

template <typename A>
__device__ Moments<A> warp_moments(Moments<A> m) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        Moments<A> other{__shfl_down_sync(WICK_FULL_MASK, m.count, offset),
                         __shfl_down_sync(WICK_FULL_MASK, m.mean, offset),
                         __shfl_down_sync(WICK_FULL_MASK, m.m2, offset)};
        m = merge(m, other);
    }
    return m;
}

// The moments over the block, valid in thread 0.
template <typename A>
__device__ Moments<A> block_moments(Moments<A> m) {
    __shared__ A partial[3][32];
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    m = warp_moments(m);
    if (lane == 0) {
        partial[0][warp] = m.count;
        partial[1][warp] = m.mean;
        partial[2][warp] = m.m2;
    }
    __syncthreads();
    if (warp == 0) {
        Moments<A> w{(A)0, (A)0, (A)0};
        if (lane < warps) w = Moments<A>{partial[0][lane], partial[1][lane], partial[2][lane]};
        m = warp_moments(w);
    }
    __syncthreads();
    return m;
}
