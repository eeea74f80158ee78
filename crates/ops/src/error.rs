//! The error type of every kernel in wick-ops.

/// What went wrong in a kernel. Every variant names the op, so that a message read in a
/// log says which op failed and why.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// Shapes or settings that the op cannot accept (the message gives the shapes).
    #[error("{op}: {message}")]
    Invalid {
        /// The op, as a user writes it (`conv2d`, `max_pool2d`, ...).
        op: &'static str,
        /// What is wrong, with the shapes or values involved.
        message: String,
    },
    /// The op has no kernel for this device or dtype.
    #[error("{op}: no kernel for {what}")]
    Unsupported {
        /// The op.
        op: &'static str,
        /// The device or dtype that has no kernel.
        what: String,
    },
    /// The CUDA driver, NVRTC or a kernel launch failed (wick's own CUDA kernels).
    #[error("{op}: CUDA: {message}")]
    Cuda {
        /// The op.
        op: &'static str,
        /// What failed, with the driver's message.
        message: String,
    },
    /// candle reported an error while the op ran.
    #[error("{op}: {source}")]
    Candle {
        /// The op.
        op: &'static str,
        /// candle's error.
        #[source]
        source: Box<candle_core::Error>,
    },
}

/// An [`OpError::Invalid`] for `op` whose message is `format!`'s: `invalid!(op, "{a:?} and
/// {b:?} differ")` is `OpError::invalid(op, format!("{a:?} and {b:?} differ"))`.
#[macro_export]
macro_rules! invalid {
    ($op:expr, $($message:tt)+) => {
        $crate::OpError::invalid($op, format!($($message)+))
    };
}

/// The result type of wick-ops.
pub type Result<T> = std::result::Result<T, OpError>;

impl OpError {
    /// An [`OpError::Invalid`] for `op` with `message`.
    pub fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        OpError::Invalid {
            op,
            message: message.into(),
        }
    }

    /// An [`OpError::Candle`] for `op`.
    pub fn candle(op: &'static str, source: candle_core::Error) -> Self {
        OpError::Candle {
            op,
            source: Box::new(source),
        }
    }

    /// The op this error is about.
    pub fn op(&self) -> &'static str {
        match self {
            OpError::Invalid { op, .. }
            | OpError::Unsupported { op, .. }
            | OpError::Cuda { op, .. }
            | OpError::Candle { op, .. } => op,
        }
    }
}

/// Attaches the op's name to a candle result.
pub(crate) trait CandleContext<T> {
    /// Maps a candle error into [`OpError::Candle`] for `op`.
    fn ctx(self, op: &'static str) -> Result<T>;
}

impl<T> CandleContext<T> for candle_core::Result<T> {
    fn ctx(self, op: &'static str) -> Result<T> {
        self.map_err(|source| OpError::candle(op, source))
    }
}
