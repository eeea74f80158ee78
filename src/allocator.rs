//! Memory settings that make a training step's big buffers cheap to reuse and to read.
//!
//! - [`keep_freed_memory`]: glibc returns freed blocks of a few MB (ResNet activations) to
//!   the operating system, and the next step's allocation of the same size page-faults
//!   every page again: with ResNet-50 at batch 2 that is about 120,000 minor faults and
//!   15-20% of the step. This is the same tuning PyTorch's baseline script
//!   (`shared/baselines`) applies.
//! - [`HugePageAlloc`]: the system allocator, asking the kernel for transparent huge pages
//!   (2 MiB) under every big block and under all heap growth. A step streams weights,
//!   gradients and activations that are cold in the caches; with 4 KiB pages each of those
//!   reads also misses the TLB, and inside a virtual machine every miss walks two sets of
//!   page tables. Measured here: summing a cold 9.4 MB buffer took 4.8-9.4 ms on 4 KiB
//!   pages and 2.3 ms on huge pages; a cold 512x128x4608 GEMM 8.5-14.6 ms vs 5.1-5.8 ms
//!   (whole training steps: see docs/performance.md).
//!
//! Both are opt-in and process-wide: the examples and benches turn both on.
//!
//! [`HugePageAlloc`] also counts the bytes it has handed out (one relaxed atomic add per
//! allocation): [`Counter`] gives the profiler the measured peak beside its prediction.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes allocated through [`HugePageAlloc`] and not yet freed.
static LIVE: AtomicU64 = AtomicU64::new(0);
/// The most bytes [`LIVE`] held since the last [`Counter::reset_peak`].
static PEAK: AtomicU64 = AtomicU64::new(0);

fn allocated(size: usize) {
    let live = LIVE.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn freed(size: usize) {
    LIVE.fetch_sub(size as u64, Ordering::Relaxed);
}

/// The allocation counts of [`HugePageAlloc`] (zero unless it is the global allocator),
/// as the profiler's [`MemoryCounter`](wick_profiler::MemoryCounter).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counter;

impl Counter {
    /// Bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> u64 {
        LIVE.load(Ordering::Relaxed)
    }
}

impl wick_profiler::MemoryCounter for Counter {
    fn reset_peak(&self) {
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn peak_bytes(&self) -> u64 {
        PEAK.load(Ordering::Relaxed)
    }

    fn live_bytes(&self) -> u64 {
        LIVE.load(Ordering::Relaxed)
    }
}

/// Raises glibc's mmap and trim thresholds to 1 GiB, so freed activation buffers stay in
/// the heap for reuse; makes the heap grow 64 MiB at a time (untouched pages cost
/// nothing; with [`HugePageAlloc`] few growth steps means few 2 MiB regions touched
/// before they are advised); and keeps every thread on the main heap (one arena), which
/// [`HugePageAlloc`] advises as it grows: per-thread arenas would stay on 4 KiB pages
/// (measured: 8-14% slower convolutions than glibc's own `glibc.malloc.hugetlb=1`
/// tunable, within 3% of it with one arena). Process-wide; call it once at start-up, first thing in
/// `main`. Returns whether the settings were applied (only on Linux with glibc; elsewhere
/// it does nothing).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const ONE_GIB: libc::c_int = 1 << 30;
        const HEAP_STEP: libc::c_int = 64 << 20;
        // SAFETY: mallopt only changes allocator parameters; it is safe to call at any time.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, ONE_GIB) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, ONE_GIB) == 1
                && libc::mallopt(libc::M_TOP_PAD, HEAP_STEP) == 1
                && libc::mallopt(libc::M_ARENA_MAX, 1) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// The size of a transparent huge page on x86-64 and most aarch64 Linux kernels.
const HUGE_PAGE: usize = 2 << 20;

/// The system allocator, with `madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned interior of
/// every block of 2 MiB or more, so the kernel backs it with transparent huge pages when it
/// is first touched (Linux with THP in `madvise` or `always` mode; elsewhere this is the
/// plain system allocator). Blocks are allocated and freed by [`System`]; only the advice
/// is added, and a refused advice changes nothing.
///
/// Install it in a binary (not in a library) with
/// `#[global_allocator] static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;`
/// and combine it with [`keep_freed_memory`], so the advised pages are reused step after
/// step. Check it took effect with `grep AnonHugePages /proc/<pid>/smaps_rollup`.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePageAlloc;

/// The end of the main heap up to which huge pages have been advised (glibc only).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
static ADVISED_BRK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl HugePageAlloc {
    /// Advises huge pages for the 2 MiB-aligned interior of `[start, end)`.
    #[cfg(target_os = "linux")]
    fn advise_range(start: usize, end: usize) {
        let start = start.next_multiple_of(HUGE_PAGE);
        let end = end & !(HUGE_PAGE - 1);
        if start < end {
            // SAFETY: the range is memory this process's allocator owns (a block it just
            // handed out, or its own heap); MADV_HUGEPAGE changes how it is backed, never
            // its contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }

    /// Counts a fresh block of `size` bytes (none when the allocation failed) and
    /// advises huge pages for it; returns the pointer.
    fn counted(ptr: *mut u8, size: usize) -> *mut u8 {
        if !ptr.is_null() {
            allocated(size);
        }
        Self::advise(ptr, size);
        ptr
    }

    /// Advises huge pages for a new block, and for any part of glibc's main heap that grew
    /// since the last call (before anything touches it: small blocks carved from it later
    /// and merged into big ones are then huge-page backed too, as glibc's own
    /// `glibc.malloc.hugetlb=1` tunable would arrange).
    fn advise(ptr: *mut u8, size: usize) {
        #[cfg(target_os = "linux")]
        if size >= HUGE_PAGE && !ptr.is_null() {
            Self::advise_range(ptr as usize, ptr as usize + size);
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            use std::sync::atomic::Ordering;
            // SAFETY: sbrk(0) only reads the current program break.
            let brk = unsafe { libc::sbrk(0) } as usize;
            let last = ADVISED_BRK.fetch_max(brk, Ordering::Relaxed);
            if last != 0 && brk > last {
                Self::advise_range(last & !(HUGE_PAGE - 1), brk);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (ptr, size);
    }
}

// SAFETY: every method delegates to `System`, which upholds GlobalAlloc's contract; the
// added madvise call does not touch the memory's contents or its ownership.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged from the caller.
        Self::counted(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged from the caller.
        Self::counted(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        freed(layout.size());
        // SAFETY: forwarded unchanged from the caller.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged from the caller.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            freed(layout.size());
        }
        Self::counted(new, new_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts are process-wide: the tests that allocate through `HugePageAlloc` take
    /// turns.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_counter_follows_allocations_and_keeps_the_peak() {
        use wick_profiler::MemoryCounter;
        // The test binary's global allocator is the system's, so these counts move only
        // by what the tests do through `HugePageAlloc`, one test at a time.
        let _turn = ONE_AT_A_TIME.lock().unwrap();
        let (a, c) = (HugePageAlloc, Counter);
        let layout = Layout::from_size_align(1 << 20, 64).unwrap();
        // SAFETY: non-zero layouts; each block is freed with the layout it has.
        unsafe {
            let before = c.live_bytes();
            c.reset_peak();
            let p = a.alloc(layout);
            assert_eq!(c.live_bytes() - before, 1 << 20);
            let q = a.realloc(p, layout, 3 << 20);
            assert_eq!(c.live_bytes() - before, 3 << 20);
            assert!(c.peak_bytes() >= before + (3 << 20));
            a.dealloc(q, Layout::from_size_align(3 << 20, 64).unwrap());
            assert_eq!(c.live_bytes(), before);
        }
        c.reset_peak();
        assert_eq!(c.peak_bytes(), c.live_bytes());
    }

    #[test]
    fn huge_page_alloc_hands_out_usable_zeroed_and_grown_blocks() {
        let _turn = ONE_AT_A_TIME.lock().unwrap();
        let a = HugePageAlloc;
        for size in [16, HUGE_PAGE - 1, 3 * HUGE_PAGE + 123] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero layout; the block is written, read and freed within bounds.
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % 64, 0);
                let s = std::slice::from_raw_parts_mut(p, size);
                assert!(s.iter().all(|&b| b == 0), "alloc_zeroed of {size} bytes");
                s.fill(7);
                let q = a.realloc(p, layout, 2 * size);
                assert!(!q.is_null());
                let s = std::slice::from_raw_parts(q, 2 * size);
                assert!(
                    s[..size].iter().all(|&b| b == 7),
                    "realloc kept the contents"
                );
                a.dealloc(q, Layout::from_size_align(2 * size, 64).unwrap());
            }
        }
    }
}
