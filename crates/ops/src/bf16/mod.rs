//! bfloat16 on the CPU: rounding and widening, and the GEMM behind bfloat16
//! convolutions, linear layers and matmuls (bfloat16 products, float32 sums), on
//! AMX's tile products or AVX512-BF16's `vdpbf16ps` where the CPU has them and in float32 arithmetic elsewhere;
//! and the choice of products ([`Products`]) autocast's kernels take, float16 included.

#[cfg(target_arch = "x86_64")]
pub(crate) mod amx;
mod convert;
mod gemm;
mod microkernel;
mod operand;
mod pack;
mod panels;
mod path;
mod products;
mod tensor;
mod tensor_product;

pub use convert::{bf16_to_f32, round_as_f32, round_slice, round_to_bf16, widen_slice};
pub use gemm::gemm;
pub(crate) use gemm::{gemm_native_right_pairs, PackedLeft};
pub use operand::{Matrix, Values};
#[cfg(test)]
pub(crate) use pack::{pack_operand, pack_right_from_pairs, Kernel, Side};
pub(crate) use panels::Aligned;
#[cfg(test)]
pub(crate) use panels::Panels;
pub use path::{has_amx, has_avx512_bf16, Bf16Path};
pub use products::Products;
pub(crate) use products::{
    as_f32, f32_call, gemm_strided_packed, gemm_strided_with, gemm_uninit_packed, gemm_uninit_with,
    pack_left_once,
};
pub use tensor::cast;
pub(crate) use tensor::{check_operands, rounded_f32};
pub(crate) use tensor_product::tensor_product;
