//! Flushing denormal floats to zero on the CPU.
//!
//! Values below f32's normal range (about 1e-38) are computed in microcode on x86, up to
//! a hundred times slower. A diverging or decaying training run fills activations and
//! gradients with them and the step time explodes (several times slower per step).
//! Flushing them to zero changes results only below 1e-38.

/// Sets the flush-to-zero and denormals-are-zero bits of the SSE control register on the
/// calling thread and on every thread of the rayon pool that runs wick's CPU kernels.
/// Returns whether the CPU supports it (x86-64); elsewhere it does nothing.
pub fn flush_denormals_to_zero() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        fn set() {
            // FTZ is bit 15, DAZ bit 6 of MXCSR.
            const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);
            let mut csr: u32 = 0;
            // SAFETY: stmxcsr/ldmxcsr only read and write this thread's SSE control
            // register; setting FTZ and DAZ is valid on every x86-64 CPU with SSE2/SSE3.
            unsafe {
                std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack));
                csr |= FTZ_DAZ;
                std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack));
            }
        }
        set();
        rayon::broadcast(|_| set());
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn denormals_become_zero_after_the_call() {
        // 1e-40 is a denormal f32: without the flags it survives the product.
        let before = std::hint::black_box(1e-30f32) * std::hint::black_box(1e-10f32);
        assert!(before > 0.0);
        if super::flush_denormals_to_zero() {
            let d = std::hint::black_box(1e-30f32) * std::hint::black_box(1e-10f32);
            assert_eq!(d, 0.0);
            let on_pool = rayon::broadcast(|_| {
                std::hint::black_box(1e-30f32) * std::hint::black_box(1e-10f32)
            });
            assert!(on_pool.iter().all(|v| *v == 0.0));
        }
    }
}
