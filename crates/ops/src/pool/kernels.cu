// wick's CUDA pooling kernels, compiled at run time with NVRTC (see cuda.rs).
// Layout: NCHW, one thread per output element (forward) or input element (avg backward).
// Max pooling keeps the first maximum in row-major window order (PyTorch's CPU rule);
// padding acts as -inf for max and counts as zeros for average pooling.

template <typename T> __device__ T neg_inf();
template <> __device__ float neg_inf<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ double neg_inf<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }

// The in-bounds input window [ys, ye) x [xs, xe) of output element i, in its plane.
struct Window { int plane, ys, ye, xs, xe; };

__device__ Window output_window(int i, int H, int W, int OH, int OW, int kh, int kw, int sh,
                                int sw, int ph, int pw) {
    int ox = i % OW, oy = (i / OW) % OH;
    int y0 = oy * sh - ph, x0 = ox * sw - pw;
    return Window{i / (OW * OH), max(y0, 0), min(y0 + kh, H), max(x0, 0), min(x0 + kw, W)};
}

template <typename T>
__device__ void max_fwd(const T* x, T* y, unsigned int* idx, int total, int H, int W, int OH, int OW,
                        int kh, int kw, int sh, int sw, int ph, int pw) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    Window win = output_window(i, H, W, OH, OW, kh, kw, sh, sw, ph, pw);
    const T* xp = x + (long long)win.plane * H * W;
    T best = neg_inf<T>();
    int bi = win.ys * W + win.xs;
    bool done = false;
    for (int yy = win.ys; yy < win.ye && !done; ++yy) {
        for (int xx = win.xs; xx < win.xe; ++xx) {
            T v = xp[yy * W + xx];
            if (v > best || isnan(v)) {
                best = v;
                bi = yy * W + xx;
                if (isnan(v)) { done = true; break; }
            }
        }
    }
    y[i] = best;
    idx[i] = (unsigned int)bi;
}

template <typename T>
__device__ void max_bwd(const T* gy, const unsigned int* idx, T* dx, int total, int HW, int OHW) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int plane = i / OHW;
    atomicAdd(dx + (long long)plane * HW + idx[i], gy[i]);
}

template <typename T>
__device__ void avg_fwd(const T* x, T* y, int total, int H, int W, int OH, int OW,
                        int kh, int kw, int sh, int sw, int ph, int pw) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    Window win = output_window(i, H, W, OH, OW, kh, kw, sh, sw, ph, pw);
    const T* xp = x + (long long)win.plane * H * W;
    T sum = 0;
    for (int yy = win.ys; yy < win.ye; ++yy)
        for (int xx = win.xs; xx < win.xe; ++xx) sum += xp[yy * W + xx];
    y[i] = sum / (T)(kh * kw);
}

template <typename T>
__device__ void avg_bwd(const T* gy, T* dx, int total, int H, int W, int OH, int OW,
                        int kh, int kw, int sh, int sw, int ph, int pw) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int ix = i % W, iy = (i / W) % H, plane = i / (W * H);
    const T* gp = gy + (long long)plane * OH * OW;
    // Windows oy with oy*sh - ph <= iy < oy*sh - ph + kh.
    int oy0 = max(0, (iy + ph - kh + sh) / sh), oy1 = min(OH - 1, (iy + ph) / sh);
    int ox0 = max(0, (ix + pw - kw + sw) / sw), ox1 = min(OW - 1, (ix + pw) / sw);
    T sum = 0;
    for (int oy = oy0; oy <= oy1; ++oy)
        for (int ox = ox0; ox <= ox1; ++ox) sum += gp[oy * OW + ox];
    dx[i] = sum / (T)(kh * kw);
}

#define WICK_POOL(T, S)                                                                          \
extern "C" __global__ void max_pool_fwd_##S(const T* x, T* y, unsigned int* idx, int total,       \
    int H, int W, int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw) {               \
    max_fwd<T>(x, y, idx, total, H, W, OH, OW, kh, kw, sh, sw, ph, pw); }                         \
extern "C" __global__ void max_pool_bwd_##S(const T* gy, const unsigned int* idx, T* dx,          \
    int total, int HW, int OHW) { max_bwd<T>(gy, idx, dx, total, HW, OHW); }                     \
extern "C" __global__ void avg_pool_fwd_##S(const T* x, T* y, int total, int H, int W, int OH,    \
    int OW, int kh, int kw, int sh, int sw, int ph, int pw) {                                     \
    avg_fwd<T>(x, y, total, H, W, OH, OW, kh, kw, sh, sw, ph, pw); }                              \
extern "C" __global__ void avg_pool_bwd_##S(const T* gy, T* dx, int total, int H, int W, int OH,  \
    int OW, int kh, int kw, int sh, int sw, int ph, int pw) {                                     \
    avg_bwd<T>(gy, dx, total, H, W, OH, OW, kh, kw, sh, sw, ph, pw); }

WICK_POOL(float, f32)
WICK_POOL(double, f64)
