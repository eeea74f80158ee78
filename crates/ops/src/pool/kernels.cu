// wick's CUDA pooling kernels, compiled at run time with NVRTC (see cuda.rs) and run on
// the CPU by the emulated tests. Layout: NCHW; a grid-stride loop over the output elements
// (forward) or the input elements (backward), one thread each.
//
// Max pooling keeps the first maximum in row-major window order (PyTorch's CPU rule), and
// a NaN wins its window; padding acts as -inf. Its backward gathers: each input element
// sums, in window order, the output gradients whose index names it, so the result does not
// depend on thread timing (no atomics) and matches the CPU kernel's sums. Average pooling
// counts the padding as zeros in its divisor kh*kw (PyTorch's count_include_pad).
//
// Each kernel is templated on its storage type T and accumulator A: f32 and f64 compute in
// their own type; bf16 and f16 compare and sum in float and round once per element.
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

// One pooling's sizes: input H x W, output OH x OW, window, stride and padding.
struct PoolDims {
    int H, W, OH, OW, kh, kw, sh, sw, ph, pw;
};

// The in-bounds input window [ys, ye) x [xs, xe) of output element i, and its plane.
struct Window {
    long long plane;
    int ys, ye, xs, xe;
};

__device__ Window output_window(long long i, PoolDims d) {
    int ox = (int)(i % d.OW), oy = (int)((i / d.OW) % d.OH);
    int y0 = oy * d.sh - d.ph, x0 = ox * d.sw - d.pw;
    return Window{i / ((long long)d.OW * d.OH), max(y0, 0), min(y0 + d.kh, d.H), max(x0, 0),
                  min(x0 + d.kw, d.W)};
}

// The outputs [oy0, oy1] x [ox0, ox1] whose windows hold input element i, and its plane.
struct Covering {
    long long plane;
    int iy, ix, oy0, oy1, ox0, ox1;
};

__device__ Covering input_covering(long long i, PoolDims d) {
    int ix = (int)(i % d.W), iy = (int)((i / d.W) % d.H);
    // Windows oy with oy*sh - ph <= iy < oy*sh - ph + kh (C division truncates toward zero:
    // a negative first bound clamps to 0 either way).
    int oy0 = max(0, (iy + d.ph - d.kh + d.sh) / d.sh), oy1 = min(d.OH - 1, (iy + d.ph) / d.sh);
    int ox0 = max(0, (ix + d.pw - d.kw + d.sw) / d.sw), ox1 = min(d.OW - 1, (ix + d.pw) / d.sw);
    return Covering{i / ((long long)d.W * d.H), iy, ix, oy0, oy1, ox0, ox1};
}

template <typename T, typename A>
__device__ void max_fwd(const T* x, T* y, unsigned int* idx, long long total, PoolDims d) {
    WICK_GRID_STRIDE(i, total) {
        Window win = output_window(i, d);
        const T* xp = x + win.plane * d.H * d.W;
        A best = -wick_infinity<A>();
        int bi = win.ys * d.W + win.xs;
        bool done = false;
        for (int yy = win.ys; yy < win.ye && !done; ++yy) {
            for (int xx = win.xs; xx < win.xe; ++xx) {
                A v = (A)xp[yy * d.W + xx];
                if (v > best || v != v) {
                    best = v;
                    bi = yy * d.W + xx;
                    if (v != v) {
                        done = true;
                        break;
                    }
                }
            }
        }
        y[i] = T(best);
        idx[i] = (unsigned int)bi;
    }
}

template <typename T, typename A>
__device__ void max_bwd(const T* gy, const unsigned int* idx, T* dx, long long total, PoolDims d) {
    WICK_GRID_STRIDE(i, total) {
        Covering c = input_covering(i, d);
        long long base = c.plane * d.OH * d.OW;
        unsigned int self = (unsigned int)(c.iy * d.W + c.ix);
        A sum = 0;
        for (int oy = c.oy0; oy <= c.oy1; ++oy)
            for (int ox = c.ox0; ox <= c.ox1; ++ox) {
                long long o = base + oy * d.OW + ox;
                if (idx[o] == self) sum += (A)gy[o];
            }
        dx[i] = T(sum);
    }
}

// The sum of rows [y0, y1) x columns [x0, x1) of a plane whose rows are `width` apart.
template <typename T, typename A>
__device__ A rect_sum(const T* plane, int width, int y0, int y1, int x0, int x1) {
    A sum = 0;
    for (int y = y0; y < y1; ++y)
        for (int x = x0; x < x1; ++x) sum += (A)plane[y * width + x];
    return sum;
}

template <typename T, typename A>
__device__ void avg_fwd(const T* x, T* y, long long total, PoolDims d) {
    WICK_GRID_STRIDE(i, total) {
        Window w = output_window(i, d);
        A sum = rect_sum<T, A>(x + w.plane * d.H * d.W, d.W, w.ys, w.ye, w.xs, w.xe);
        y[i] = T(sum / (A)(d.kh * d.kw));
    }
}

// Each input's gradient: the sum of the output gradients of the windows that hold it.
template <typename T, typename A>
__device__ void avg_bwd(const T* gy, T* dx, long long total, PoolDims d) {
    WICK_GRID_STRIDE(i, total) {
        Covering c = input_covering(i, d);
        const T* gp = gy + c.plane * d.OH * d.OW;
        A sum = rect_sum<T, A>(gp, d.OW, c.oy0, c.oy1 + 1, c.ox0, c.ox1 + 1);
        dx[i] = T(sum / (A)(d.kh * d.kw));
    }
}

// The kernels take the sizes as ints (H, W, OH, OW, kh, kw, sh, sw, ph, pw), in that order.
#define WICK_POOL_DIMS int H, int W, int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw
#define WICK_POOL_DIMS_VALUE PoolDims{H, W, OH, OW, kh, kw, sh, sw, ph, pw}

#define WICK_POOL(T, A, S)                                                                     \
    extern "C" __global__ void max_pool_fwd_##S(const T* x, T* y, unsigned int* idx,           \
                                                long long total, WICK_POOL_DIMS) {             \
        max_fwd<T, A>(x, y, idx, total, WICK_POOL_DIMS_VALUE);                                 \
    }                                                                                          \
    extern "C" __global__ void max_pool_bwd_##S(const T* gy, const unsigned int* idx, T* dx,   \
                                                long long total, WICK_POOL_DIMS) {             \
        max_bwd<T, A>(gy, idx, dx, total, WICK_POOL_DIMS_VALUE);                               \
    }                                                                                          \
    extern "C" __global__ void avg_pool_fwd_##S(const T* x, T* y, long long total,             \
                                                WICK_POOL_DIMS) {                              \
        avg_fwd<T, A>(x, y, total, WICK_POOL_DIMS_VALUE);                                      \
    }                                                                                          \
    extern "C" __global__ void avg_pool_bwd_##S(const T* gy, T* dx, long long total,           \
                                                WICK_POOL_DIMS) {                              \
        avg_bwd<T, A>(gy, dx, total, WICK_POOL_DIMS_VALUE);                                    \
    }

WICK_POOL(float, float, f32)
WICK_POOL(double, double, f64)
WICK_POOL(wick_bf16, float, bf16)
WICK_POOL(wick_f16, float, f16)
