// Element-wise kernels: one read of each input and one write per element, over the grid
// with a grid-stride loop (`wick_ops::gpu::Launch::elementwise`).
//
// An activation is one line of WICK_ACTIVATION: its name, its value from the input `v`,
// and its input gradient from the output gradient `g` and the saved tensor `s` (the
// input, or for sigmoid and tanh the output, as `Activation::backward_reads_output`
// says). `slope` is LeakyReLU's; the others ignore it. Each line makes eight kernels:
// <name>_forward_<s> and <name>_backward_<s> for s in f32, f64, bf16 and f16; the 16-bit
// ones compute in float and round once (`wick_load`, `wick_store`). The definitions are
// PyTorch's, with its choices at the kinks and NaN passed through.
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

template <typename T>
__device__ T clamp_relu6(T v) {
    return v != v ? v : (v < (T)0 ? (T)0 : (v > (T)6 ? (T)6 : v));
}

template <typename T>
__device__ T gelu_tanh_inner(T v) {
    return (T)0.7978845608028654 * (v + (T)0.044715 * v * v * v);
}

#define WICK_ACTIVATION_KERNELS(NAME, T, S)                                                       \
    extern "C" __global__ void NAME##_forward_##S(const T* x, T* y, long long n, T slope) {       \
        WICK_GRID_STRIDE(i, n) y[i] = NAME##_value<T>(x[i], slope);                               \
    }                                                                                             \
    extern "C" __global__ void NAME##_backward_##S(const T* grad_y, const T* saved, T* grad_x,    \
                                                   long long n, T slope) {                        \
        WICK_GRID_STRIDE(i, n) grad_x[i] = NAME##_gradient<T>(grad_y[i], saved[i], slope);        \
    }

#define WICK_ACTIVATION_KERNELS_16(NAME, T, S)                                                    \
    extern "C" __global__ void NAME##_forward_##S(const T* x, T* y, long long n, float slope) {   \
        WICK_GRID_STRIDE(i, n) y[i] = wick_store<T>(NAME##_value<float>(wick_load(x[i]), slope));  \
    }                                                                                             \
    extern "C" __global__ void NAME##_backward_##S(const T* grad_y, const T* saved, T* grad_x,    \
                                                   long long n, float slope) {                    \
        WICK_GRID_STRIDE(i, n) {                                                                  \
            float g = wick_load(grad_y[i]), s = wick_load(saved[i]);                              \
            grad_x[i] = wick_store<T>(NAME##_gradient<float>(g, s, slope));                       \
        }                                                                                         \
    }

#define WICK_ACTIVATION(NAME, VALUE, GRADIENT)                                                    \
    template <typename T>                                                                         \
    __device__ T NAME##_value(T v, T slope) {                                                     \
        (void)slope;                                                                              \
        return VALUE;                                                                             \
    }                                                                                             \
    template <typename T>                                                                         \
    __device__ T NAME##_gradient(T g, T s, T slope) {                                             \
        (void)slope;                                                                              \
        return GRADIENT;                                                                          \
    }                                                                                             \
    WICK_ACTIVATION_KERNELS(NAME, float, f32)                                                     \
    WICK_ACTIVATION_KERNELS(NAME, double, f64)                                                    \
    WICK_ACTIVATION_KERNELS_16(NAME, wick_bf16, bf16)                                             \
    WICK_ACTIVATION_KERNELS_16(NAME, wick_f16, f16)

// clang-format off
WICK_ACTIVATION(relu, v <= (T)0 ? (T)0 : v, s <= (T)0 ? (T)0 : g)
WICK_ACTIVATION(sigmoid, (T)1 / ((T)1 + exp(-v)), g * s * ((T)1 - s))
WICK_ACTIVATION(tanh, tanh(v), g * ((T)1 - s * s))
WICK_ACTIVATION(silu, v / ((T)1 + exp(-v)), g * ((T)1 / ((T)1 + exp(-s))) * ((T)1 + s * ((T)1 - (T)1 / ((T)1 + exp(-s)))))
WICK_ACTIVATION(gelu, (T)0.5 * v * ((T)1 + erf(v * (T)0.7071067811865476)), g * ((T)0.5 * ((T)1 + erf(s * (T)0.7071067811865476)) + s * exp((T)-0.5 * s * s) * (T)0.3989422804014327))
WICK_ACTIVATION(gelu_tanh, (T)0.5 * v * ((T)1 + tanh(gelu_tanh_inner(v))), g * ((T)0.5 * ((T)1 + tanh(gelu_tanh_inner(s))) + (T)0.5 * s * ((T)1 - tanh(gelu_tanh_inner(s)) * tanh(gelu_tanh_inner(s))) * (T)0.7978845608028654 * ((T)1 + (T)0.134145 * s * s)))
WICK_ACTIVATION(relu6, clamp_relu6(v), g * (s > (T)0 && s < (T)6 ? (T)1 : (T)0))
WICK_ACTIVATION(hardswish, v * clamp_relu6(v + (T)3) / (T)6, g * (s <= (T)-3 ? (T)0 : (s < (T)3 ? s / (T)3 + (T)0.5 : (T)1)))
WICK_ACTIVATION(hardsigmoid, clamp_relu6(v + (T)3) / (T)6, g * (s > (T)-3 && s < (T)3 ? (T)1 / (T)6 : (T)0))
WICK_ACTIVATION(leaky_relu, v > (T)0 ? v : v * slope, g * (s > (T)0 ? (T)1 : slope))
// clang-format on

// Binary element-wise kernels on two tensors of one shape (the residual connection), one
// line each: the value from `u` and `v`, of type V.
#define WICK_BINARY_KERNELS(NAME, EXPR, T, S)                                                     \
    extern "C" __global__ void NAME##_##S(const T* a, const T* b, T* y, long long n) {            \
        WICK_GRID_STRIDE(i, n) {                                                                  \
            typedef T V; /* the element type, for EXPR */                                         \
            V u = a[i], v = b[i];                                                                 \
            y[i] = EXPR;                                                                          \
        }                                                                                         \
    }
#define WICK_BINARY_KERNELS_16(NAME, EXPR, T, S)                                                  \
    extern "C" __global__ void NAME##_##S(const T* a, const T* b, T* y, long long n) {            \
        WICK_GRID_STRIDE(i, n) {                                                                  \
            typedef float V;                                                                      \
            V u = wick_load(a[i]), v = wick_load(b[i]);                                           \
            y[i] = wick_store<T>(EXPR);                                                           \
        }                                                                                         \
    }
#define WICK_BINARY(NAME, EXPR)                           \
    WICK_BINARY_KERNELS(NAME, EXPR, float, f32)           \
    WICK_BINARY_KERNELS(NAME, EXPR, double, f64)          \
    WICK_BINARY_KERNELS_16(NAME, EXPR, wick_bf16, bf16)   \
    WICK_BINARY_KERNELS_16(NAME, EXPR, wick_f16, f16)

WICK_BINARY(add, u + v)
WICK_BINARY(add_relu, u + v <= (V)0 ? (V)0 : u + v)
