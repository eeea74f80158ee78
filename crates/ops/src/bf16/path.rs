//! Which bfloat16 GEMM path runs: what the CPU has (AVX512-BF16, AMX), and the choice a
//! test or a side-by-side run puts in force.

use super::pack::Kernel;

/// Which micro-kernel the GEMM runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Path {
    /// `vdpbf16ps` (x86-64 with AVX512-BF16: Zen 4, Zen 5, Intel Cooper Lake and later).
    Native,
    /// AMX's tile products, `tdpbf16ps` (Intel Sapphire Rapids and later): 256 times
    /// `vdpbf16ps`'s work per instruction.
    Amx,
    /// Operands rounded to bfloat16, widened back to float32 (exactly) and multiplied by
    /// the float32 GEMM (any CPU; no faster than float32).
    Widening,
}

thread_local! {
    static CHOSEN: std::cell::Cell<Option<Bf16Path>> = const { std::cell::Cell::new(None) };
}

impl Bf16Path {
    /// The fastest path this CPU has.
    pub fn best() -> Self {
        if has_amx() {
            Bf16Path::Amx
        } else if has_avx512_bf16() {
            Bf16Path::Native
        } else {
            Bf16Path::Widening
        }
    }

    /// The path bfloat16 products take when a kernel starts on this thread: the one a
    /// [`scope`](Bf16Path::scope) put in force, else the one `WICK_BF16_PATH` names
    /// (`widening`, `native` or `amx`, for side-by-side runs of one binary), else
    /// [`best`](Bf16Path::best); in each case no faster than the CPU allows (never
    /// [`Amx`](Bf16Path::Amx) without AMX, nor [`Native`](Bf16Path::Native) without
    /// AVX512-BF16).
    pub fn current() -> Self {
        static FROM_ENV: std::sync::OnceLock<Option<Bf16Path>> = std::sync::OnceLock::new();
        let env = || match std::env::var("WICK_BF16_PATH").as_deref() {
            Ok("widening") => Some(Bf16Path::Widening),
            Ok("native") => Some(Bf16Path::Native),
            Ok("amx") => Some(Bf16Path::Amx),
            _ => None,
        };
        let chosen = CHOSEN
            .with(|c| c.get())
            .or_else(|| *FROM_ENV.get_or_init(env));
        chosen.unwrap_or(Bf16Path::Amx).or_slower()
    }

    /// The paths in order of speed.
    fn speed(self) -> u8 {
        match self {
            Bf16Path::Widening => 0,
            Bf16Path::Native => 1,
            Bf16Path::Amx => 2,
        }
    }

    /// This path, or the fastest one the CPU has if it lacks this one's instructions.
    pub(crate) fn or_slower(self) -> Self {
        let best = Bf16Path::best();
        if self.speed() > best.speed() {
            best
        } else {
            self
        }
    }

    /// The micro-kernel this path's products run on (none on the widening path).
    pub(crate) fn kernel(self) -> Option<Kernel> {
        match self {
            Bf16Path::Widening => None,
            Bf16Path::Native => Some(Kernel::Avx512),
            Bf16Path::Amx => Some(Kernel::Amx),
        }
    }

    /// Runs `f` with `self` in force on this thread (as far as the CPU allows: see
    /// [`current`](Bf16Path::current)), then restores the previous choice (also when `f`
    /// panics). Kernels read it on the thread that calls them (a convolution hands it to
    /// its worker threads): a switch for tests and side-by-side measurements of a slower
    /// path than the CPU's best.
    pub fn scope<R>(self, f: impl FnOnce() -> R) -> R {
        crate::route::with_setting(&CHOSEN, Some(self), f)
    }
}

/// Whether this CPU has AVX512-BF16 (`grep -o avx512_bf16 /proc/cpuinfo`).
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
            && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether this CPU has AMX's tiles and bfloat16 products, and Linux let this process use
/// them (asked once, on the first call).
pub fn has_amx() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            // CPUID leaf 7 (which every CPU with AVX-512 has): EDX bit 22 is AMX-BF16,
            // bit 24 AMX-TILE.
            let tiles = || {
                let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
                edx & (1 << 22) != 0 && edx & (1 << 24) != 0
            };
            has_avx512_bf16() && tiles() && request_tile_data()
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        false
    })
}

/// Asks Linux for the AMX tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`); true when granted. Without it the first tile instruction
/// raises SIGILL.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: a plain system call; it reads and writes no memory of ours. The kernel
    // clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}
