//! wick-ops' tests, one module per op family (burn's layout), in one test binary: PyTorch
//! fixtures, finite-difference gradient checks, the device-generic paths and errors.
//! `WICK_TEST_DEVICE=cuda` runs the fixture cases on the GPU (scripts/gpu-check.sh).

mod common;

mod attention;
mod batchnorm;
mod bias_activation;
mod conv;
mod conv_fused;
mod depthwise;
mod elementwise;
mod emulated;
mod emulated_attention;
mod emulated_autocast_attention;
mod emulated_batchnorm;
mod emulated_emulator;
mod emulated_fixtures;
mod emulated_low_precision;
mod emulated_low_precision_attention;
mod emulated_low_precision_optim;
mod emulated_low_precision_training;
mod emulated_optim;
mod emulated_pool;
mod fused_train;
mod layer_norm;
mod linear;
mod loss;
mod optim;
mod pool;
mod precision;
mod rms_norm;
mod softmax;
mod tier;
mod tier_optim;
mod winograd;
