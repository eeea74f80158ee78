//! The emulated kernels (feature `emulate`): every `extern "C" __global__` kernel of
//! `crates/ops/cuda/*.cu` and `src/pool/kernels.cu`, compiled for the host by `build.rs`
//! with the CPU emulation of the grid in `cuda/emulator`, as `ffi::wick_emu_<kernel>`.
//! Each entry point takes the [`Launch`] first, then the kernel's own arguments, and
//! runs every thread of the grid; [`emulate!`](crate::emulate) calls one and turns a
//! failed launch (a barrier not every thread reaches, a shuffle in an incomplete warp, a
//! grid past CUDA's limits) into an error message.

pub use super::Launch;

/// The generated declarations (one per kernel).
#[allow(non_snake_case, missing_docs)]
pub mod ffi {
    use super::Launch;
    include!(concat!(env!("OUT_DIR"), "/emulated_bindings.rs"));
}

/// Bytes of the error message buffer an entry point fills.
pub const ERROR_LEN: usize = 512;

/// The result of an entry point's return code and error buffer.
pub fn result(code: std::ffi::c_int, error: &[std::ffi::c_char; ERROR_LEN]) -> Result<(), String> {
    if code == 0 {
        return Ok(());
    }
    let bytes: Vec<u8> = error
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Err(String::from_utf8_lossy(&bytes).into_owned())
}

/// Runs an emulated kernel: `emulate!(wick_emu_relu_forward_f32(launch, x, y, n, 0.0))`,
/// with raw pointers for the buffers. `Ok(())`, or the emulator's message.
///
/// The caller guarantees what a CUDA launch needs: every pointer valid for what the kernel
/// indexes under that launch.
#[macro_export]
macro_rules! emulate {
    ($kernel:ident($launch:expr $(, $arg:expr)* $(,)?)) => {{
        let mut error = [0 as std::ffi::c_char; $crate::gpu::emulated::ERROR_LEN];
        let launch: $crate::gpu::Launch = $launch;
        // SAFETY: the caller passes buffers as large as the kernel indexes under `launch`.
        let code = unsafe {
            $crate::gpu::emulated::ffi::$kernel(
                &launch,
                error.as_mut_ptr(),
                $crate::gpu::emulated::ERROR_LEN as std::ffi::c_ulong,
                $($arg),*
            )
        };
        $crate::gpu::emulated::result(code, &error)
    }};
}
