//! The routing rule: which implementation an op family runs for a tensor's device (wick's
//! CPU kernel, wick's CUDA kernel, or candle's device-generic ops), and
//! [`KernelPath`], which forces candle's ops in a scope. Apart from the kernel catalogue
//! ([`Kernel`](crate::Kernel)), so a family that routes does not depend on the catalogue
//! that names its parameters.

use candle_core::Device;

/// Which implementation the kernels called on this thread run. Every op family chooses
/// its implementation by one rule (`route`, inside this crate): wick's CPU kernel for CPU tensors, wick's
/// CUDA kernel where the family has one, candle's device-generic ops otherwise, unless
/// [`KernelPath::Generic`] is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelPath {
    /// wick's own kernel for the tensor's device where there is one.
    #[default]
    Auto,
    /// candle's device-generic ops on every device. This is the path CUDA tensors take
    /// for most families; forcing it on the CPU lets tests check it against the CPU
    /// kernels and the PyTorch fixtures.
    Generic,
}

thread_local! {
    static PATH_IN_FORCE: std::cell::Cell<KernelPath> = const { std::cell::Cell::new(KernelPath::Auto) };
}

impl KernelPath {
    /// The path in force on this thread.
    pub fn current() -> KernelPath {
        PATH_IN_FORCE.with(|p| p.get())
    }

    /// Puts `self` in force for every kernel called on this thread until the returned
    /// guard is dropped; then the previous path is back (also when unwinding).
    pub fn enter(self) -> KernelPathGuard {
        KernelPathGuard {
            previous: PATH_IN_FORCE.with(|p| p.replace(self)),
        }
    }

    /// Runs `f` with `self` in force for every kernel called on this thread, then restores
    /// the previous path (also when `f` panics).
    pub fn scope<R>(self, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter();
        f()
    }
}

/// Keeps a [`KernelPath`] in force on its thread until dropped ([`KernelPath::enter`]).
#[derive(Debug)]
#[must_use = "the path is in force only while the guard lives"]
pub struct KernelPathGuard {
    previous: KernelPath,
}

impl Drop for KernelPathGuard {
    fn drop(&mut self) {
        PATH_IN_FORCE.with(|p| p.set(self.previous));
    }
}

/// The implementation an op runs, as [`route`] chooses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// wick's CPU kernel (f32 and f64).
    Cpu,
    /// wick's CUDA kernel, for the families that have one; the others take
    /// [`Route::Generic`] on CUDA.
    Cuda,
    /// candle's device-generic tensor ops.
    Generic,
}

/// The one rule every op family follows to choose its implementation for a tensor on
/// `device`.
pub(crate) fn route(device: &Device) -> Route {
    if KernelPath::current() == KernelPath::Generic {
        return Route::Generic;
    }
    match device {
        Device::Cpu => Route::Cpu,
        Device::Cuda(_) => Route::Cuda,
        Device::Metal(_) => Route::Generic,
    }
}

/// Runs `f` with `value` in the per-thread setting `key`, then restores the previous value
/// (also when `f` panics): the `scope` of the per-thread switches without a guard of
/// their own ([`ConvAlgorithm`](crate::conv::ConvAlgorithm),
/// [`Bf16Path`](crate::bf16::Bf16Path)).
pub(crate) fn with_setting<T: Copy + 'static, R>(
    key: &'static std::thread::LocalKey<std::cell::Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<std::cell::Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|c| c.replace(value)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_path_is_scoped_and_restored() {
        assert_eq!(route(&Device::Cpu), Route::Cpu);
        let inner = KernelPath::Generic.scope(|| {
            let nested = KernelPath::Auto.scope(|| route(&Device::Cpu));
            (route(&Device::Cpu), nested)
        });
        assert_eq!(inner, (Route::Generic, Route::Cpu));
        assert_eq!(route(&Device::Cpu), Route::Cpu);
        let _ = std::panic::catch_unwind(|| KernelPath::Generic.scope(|| panic!("inside")));
        assert_eq!(KernelPath::current(), KernelPath::Auto);
    }
}
