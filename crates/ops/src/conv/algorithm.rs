//! Which algorithm the CPU convolution may use, per thread.

/// Which algorithm the CPU convolution may use, per thread (as
/// [`KernelPath`](crate::KernelPath)): a switch for tests and side-by-side measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvAlgorithm {
    /// Winograd's F(2x2, 3x3) for 3x3 stride-1 convolutions with at least 16 channels in
    /// and out where it pays (forward and input gradient on batches of 128+ output tiles
    /// of 4x4+ outputs, 7x7+ with bfloat16 products; weight gradient on 8x8 to 32x32
    /// outputs), im2col + GEMM otherwise.
    #[default]
    Auto,
    /// im2col + GEMM (or a plain GEMM for 1x1 stride-1 convolutions) always.
    Im2col,
}

thread_local! {
    static ALGORITHM: std::cell::Cell<ConvAlgorithm> = std::cell::Cell::new(ConvAlgorithm::from_env());
}

impl ConvAlgorithm {
    /// Every thread's starting choice: `WICK_CONV_ALGORITHM=im2col` makes it
    /// [`Im2col`](ConvAlgorithm::Im2col) (for side-by-side runs of one binary); anything
    /// else, or nothing, [`Auto`](ConvAlgorithm::Auto).
    pub fn from_env() -> ConvAlgorithm {
        static CHOICE: std::sync::OnceLock<ConvAlgorithm> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| match std::env::var("WICK_CONV_ALGORITHM").as_deref() {
            Ok("im2col") => ConvAlgorithm::Im2col,
            _ => ConvAlgorithm::Auto,
        })
    }

    /// The algorithm choice in force on this thread.
    pub fn current() -> ConvAlgorithm {
        ALGORITHM.with(|a| a.get())
    }

    /// Runs `f` with `self` in force on this thread, then restores the previous choice
    /// (also when `f` panics).
    pub fn scope<R>(self, f: impl FnOnce() -> R) -> R {
        crate::route::with_setting(&ALGORITHM, self, f)
    }
}
