//! The bfloat16 GEMM's micro-kernel on AMX (Intel Sapphire Rapids and later): an
//! [`AMX_MR`] × [`AMX_NR`] tile of float32 sums over one block of packed depth pairs, as
//! `tdpbf16ps` tile products. Each product multiplies a 16-row tile of the left panel
//! (16 pairs of each row) by a 16-pair tile of the right panel (16 columns) into a
//! 16 × 16 float32 accumulator tile: 8192 multiply-adds per instruction, against
//! `vdpbf16ps`'s 32. Like it, it treats subnormal inputs as zero and sums in float32.
//!
//! Stable Rust has no AMX intrinsics, so the instructions are inline assembly on fixed
//! tile registers, which the compiler never uses: the tile configuration and contents
//! live on between the statements of one kernel call. Linux hands AMX's state to a
//! process only after it asks, which `path::has_amx` does.

use super::microkernel::{TileOut, TilePanels};
use super::pack::{AMX_MR, AMX_NR, AMX_PAIRS};
use super::path::has_amx;

/// `tile_into`'s tile, AMX's way: `out`'s real rows and columns get (or, with `add`, gain)
/// `p.a · p.b` over `p.pairs` depth pairs. Accumulator tiles 0 and 1 hold rows
/// 0-15 (columns 0-15 and 16-31), 2 and 3 rows 16-31; tiles 4 and 5 take the left
/// panel's two row tiles, 6 and 7 the right panel's two column tiles.
///
/// # Safety
/// `has_amx()` must be true. `p.a` holds [`AMX_MR`] rows of `pairs` pairs in blocks
/// of [`AMX_PAIRS`] pairs, each block's rows one after another (`pack`'s tiled layout);
/// `p.b` `pairs` rows of [`AMX_NR`] columns; `pairs` is a multiple of
/// [`AMX_PAIRS`]. `out.dst` must be valid for reads and writes at
/// `i * out.row_stride + j` for `i < out.rows`, `j < out.cols` (`out.rows <= AMX_MR`,
/// `out.cols <= AMX_NR`), and no other thread may touch those slots meanwhile.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn tile_into(p: TilePanels<'_>, out: &TileOut, add: bool) {
    let TilePanels { pairs, a, b } = p;
    assert!(
        pairs.is_multiple_of(AMX_PAIRS),
        "AMX: depth blocks are whole tiles"
    );
    assert!(a.len() >= pairs * AMX_MR && b.len() >= pairs * AMX_NR);
    assert!(out.rows <= AMX_MR && out.cols <= AMX_NR);
    debug_assert!(has_amx());
    configure();
    let (a, b) = (a.as_ptr(), b.as_ptr());
    if out.rows == AMX_MR && out.cols == AMX_NR {
        // The whole block is real: the accumulators load and store the destination.
        // SAFETY: 32 rows of 32 real slots from `dst` (the caller's contract).
        unsafe { run(pairs, (a, b), out.dst, out.row_stride, add) };
        return;
    }
    let mut block = [0f32; AMX_MR * AMX_NR];
    let real = |i: usize| i * out.row_stride;
    let cols = out.cols;
    if add {
        for (i, row) in block.chunks_exact_mut(AMX_NR).take(out.rows).enumerate() {
            // SAFETY: row i's first `cols` slots are real (the caller's contract).
            let src = unsafe { std::slice::from_raw_parts(out.dst.add(real(i)), cols) };
            row[..cols].copy_from_slice(src);
        }
    }
    // SAFETY: the block is this call's own: 32 rows of 32 slots.
    unsafe { run(pairs, (a, b), block.as_mut_ptr(), AMX_NR, add) };
    for (i, row) in block.chunks_exact(AMX_NR).take(out.rows).enumerate() {
        // SAFETY: as the reads above.
        let to = unsafe { std::slice::from_raw_parts_mut(out.dst.add(real(i)), cols) };
        to.copy_from_slice(&row[..cols]);
    }
}

/// Runs the tile products into the 32 × 32 floats at `dst` (rows `stride` floats apart),
/// loading them first with `add`, zeroing the accumulators otherwise.
///
/// # Safety
/// The tiles are configured on this thread; `dst` holds 32 rows of 32 floats, and the
/// panels are as [`tile_into`] requires.
#[cfg(target_arch = "x86_64")]
unsafe fn run(
    pairs: usize,
    (a, b): (*const u32, *const u32),
    dst: *mut f32,
    stride: usize,
    add: bool,
) {
    let c = dst.cast::<u8>();
    let row_bytes = 4 * stride;
    // SAFETY: every tile access below stays in the panels and the 32 × 32 block (the
    // caller's contract): tile rows are 64 bytes, 16 of them per tile.
    unsafe {
        if add {
            load_block(c, row_bytes);
        } else {
            zero_block();
        }
        // A step's left tiles are one 2 KiB block, its right tiles 16 rows of 128 bytes.
        let (a_row, b_row) = (4 * AMX_PAIRS, 4 * AMX_NR);
        for q0 in (0..pairs).step_by(AMX_PAIRS) {
            let (a, b) = (a.add(q0 * AMX_MR), b.add(q0 * AMX_NR));
            step(a.cast(), a_row, b.cast(), b_row);
        }
        store_block(c, row_bytes);
    }
}

/// `$tile::<q>(address, stride)` for accumulator tile `q` of the 32 × 32 float block at
/// `$c` (rows `$stride` bytes apart): tile 0 its top left, 1 top right (64 bytes on), 2
/// bottom left (16 rows on), 3 bottom right. Expands to raw-pointer calls: use it inside
/// `unsafe`.
#[cfg(target_arch = "x86_64")]
macro_rules! each_quarter {
    ($tile:ident, $c:expr, $stride:expr) => {{
        let (c, stride) = ($c, $stride);
        $tile::<0>(c, stride);
        $tile::<1>(c.add(64), stride);
        $tile::<2>(c.add(16 * stride), stride);
        $tile::<3>(c.add(16 * stride + 64), stride);
    }};
}

/// Accumulator tiles 0-3 as one 32 × 32 float block at `c` (rows `stride` bytes apart),
/// in `each_quarter!`'s layout.
///
/// # Safety
/// The tiles are configured on this thread; the block's 32 rows of 128 bytes are readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn load_block(c: *const u8, stride: usize) {
    // SAFETY: the caller's: four 16 × 64-byte quarters of the block.
    unsafe { each_quarter!(load, c, stride) }
}

/// Accumulator tiles 0-3 stored as [`load_block`] reads them.
///
/// # Safety
/// As [`load_block`], the block writable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn store_block(c: *mut u8, stride: usize) {
    // SAFETY: the caller's: four 16 × 64-byte quarters of the block.
    unsafe { each_quarter!(store, c, stride) }
}

/// Accumulator tiles 0-3 = 0.
///
/// # Safety
/// The tiles are configured on this thread.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn zero_block() {
    // SAFETY: touches tile registers only.
    unsafe {
        zero::<0>();
        zero::<1>();
        zero::<2>();
        zero::<3>();
    }
}

/// One depth step of the 32 × 32 block: left tiles from `a` and 16 rows on (rows `a_row`
/// bytes apart), right tiles from `b` and 64 bytes on (rows `b_row` apart), their four
/// products added into tiles 0-3.
///
/// # Safety
/// The tiles are configured on this thread; the four tiles' rows are readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn step(a: *const u8, a_row: usize, b: *const u8, b_row: usize) {
    // SAFETY: the caller's.
    unsafe {
        load::<4>(a, a_row);
        load::<6>(b, b_row);
        product::<0, 4, 6>();
        load::<7>(b.add(64), b_row);
        product::<1, 4, 7>();
        load::<5>(a.add(16 * a_row), a_row);
        product::<2, 5, 6>();
        product::<3, 5, 7>();
    }
}

thread_local! {
    /// Whether this thread has loaded the tile configuration.
    static CONFIGURED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Loads the tile configuration on this thread, once: palette 1, all eight tiles 16 rows
/// of 64 bytes. Nothing else in the process configures tiles, so it stays loaded.
#[cfg(target_arch = "x86_64")]
pub(crate) fn configure() {
    if CONFIGURED.with(|c| c.replace(true)) {
        return;
    }
    #[repr(C, align(64))]
    struct Config([u8; 64]);
    let mut config = Config([0; 64]);
    config.0[0] = 1;
    for t in 0..8 {
        // Bytes 16..32: each tile's row width in bytes (u16); bytes 48..56: its rows.
        config.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
        config.0[48 + t] = 16;
    }
    // SAFETY: a valid palette-1 configuration, 64 bytes; the process may use AMX (the
    // caller checked `has_amx`).
    unsafe {
        std::arch::asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
    }
}

/// Tile `T` = 16 rows of 64 bytes from `p`, rows `stride` bytes apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load<const T: u8>(p: *const u8, stride: usize) {
    // SAFETY: the caller's: 16 rows of 64 bytes readable.
    unsafe {
        std::arch::asm!(
            "tileloadd tmm{t}, [{p} + {s} * 1]",
            t = const T, p = in(reg) p, s = in(reg) stride,
            options(nostack, readonly, preserves_flags),
        );
    }
}

/// Tile `T` to 16 rows of 64 bytes at `p`, rows `stride` bytes apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store<const T: u8>(p: *mut u8, stride: usize) {
    // SAFETY: the caller's: 16 rows of 64 bytes writable.
    unsafe {
        std::arch::asm!(
            "tilestored [{p} + {s} * 1], tmm{t}",
            t = const T, p = in(reg) p, s = in(reg) stride,
            options(nostack, preserves_flags),
        );
    }
}

/// Tile `T` = 0.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn zero<const T: u8>() {
    // SAFETY: touches tile registers only.
    unsafe { std::arch::asm!("tilezero tmm{t}", t = const T, options(nostack, preserves_flags)) }
}

/// Tile `C` += tile `A` · tile `B` (`tdpbf16ps`: bfloat16 pairs, float32 sums).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn product<const C: u8, const A: u8, const B: u8>() {
    // SAFETY: touches tile registers only.
    unsafe {
        std::arch::asm!(
            "tdpbf16ps tmm{c}, tmm{a}, tmm{b}",
            c = const C, a = const A, b = const B,
            options(nostack, preserves_flags),
        )
    }
}
