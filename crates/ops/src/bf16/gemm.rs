//! The bfloat16 GEMM: `dst (m×n) = [dst +] a (m×k) · b (k×n)` with bfloat16 products and
//! float32 sums, as PyTorch's CPU autocast computes a bfloat16 matmul or convolution
//! (oneDNN accumulates in float32). Operands are float32 (rounded to bfloat16 as they
//! are packed: the same values a cast node would give) or bfloat16 bits, each with its
//! own (row, column) strides; the destination is float32 with any strides.
//!
//! Both operands are packed once ([`super::pack`]); tiles of the output (up to 256 rows
//! by up to 384 columns) are then spread over the threads, each walking depth blocks,
//! then right panels, then left panels. On `vdpbf16ps` one right panel (32 KiB) stays in
//! L1 while the left block streams from L2; AMX's longer depth blocks trade that for
//! fewer accumulator loads and stores (docs/mixed-precision.md, "On AMX").

use rayon::prelude::*;

use super::microkernel::{TileOut, TilePanels};
use super::pack::{pack_operand, pack_right_from_pairs, Kernel, Side, AMX_MR, AMX_NR, MR, NR};
use super::panels::Panels;
use super::path::Bf16Path;
use crate::cpu::{threads, SendPtr};

use super::operand::{Matrix, Values};

/// Rows per output tile, at most (whole left panels: 192 for `vdpbf16ps`, 256 for AMX).
const TILE_ROWS: usize = 256;
/// Columns per output tile, at most (whole right panels).
const TILE_COLS: usize = 384;
/// Floats in either kernel's tile (6 × 64 for `vdpbf16ps`, 32 × 32 for AMX).
const TILE_FLOATS: usize = if MR * NR > AMX_MR * AMX_NR {
    MR * NR
} else {
    AMX_MR * AMX_NR
};

/// `dst = [dst +] a · b` for `a` `m × k` and `b` `k × n`, bfloat16 products summed in
/// float32, through `path`'s kernel, over every thread. `dst`'s element (i, j) is
/// `dst[i * dst_strides.0 + j * dst_strides.1]`.
///
/// # Panics
/// If an operand or the destination is too small for its shape and strides.
pub fn gemm(
    path: Bf16Path,
    (m, n, k): (usize, usize, usize),
    (dst, dst_strides): (&mut [f32], (usize, usize)),
    accumulate: bool,
    a: &Matrix<'_>,
    b: &Matrix<'_>,
) {
    if m == 0 || n == 0 {
        return;
    }
    let (drs, dcs) = dst_strides;
    assert!(
        dst.len() > (m - 1) * drs + (n - 1) * dcs,
        "bf16 gemm: destination too small"
    );
    let Some(kernel) = path.or_slower().kernel() else {
        let (a, b) = (widened(a), widened(b));
        let (lhs, rhs) = ((&a.0[..], a.1), (&b.0[..], b.1));
        crate::cpu::gemm_strided(m, n, k, (dst, dst_strides), accumulate, lhs, rhs, true);
        return;
    };
    // SAFETY: the destination is an exclusive borrow whose every addressed slot is in
    // bounds (asserted above); the CPU has the kernel's instructions (`or_slower`).
    unsafe {
        gemm_native(
            kernel,
            (m, n, k),
            (dst.as_mut_ptr(), dst_strides),
            accumulate,
            a,
            b,
            true,
        )
    }
}

/// The native path on `kernel` into raw memory: `dst` is written (without reading it
/// first unless `accumulate`) at every `i * drs + j * dcs`; `parallel` spreads tiles over
/// the threads.
///
/// # Safety
/// The CPU must have `kernel`'s instructions; `dst` must be valid for writes (and reads,
/// with `accumulate`) at every addressed slot, and nothing else may access them meanwhile.
pub(crate) unsafe fn gemm_native(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    (dst, dst_strides): (*mut f32, (usize, usize)),
    accumulate: bool,
    a: &Matrix<'_>,
    b: &Matrix<'_>,
    parallel: bool,
) {
    let (drs, dcs) = dst_strides;
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    // SAFETY: an addressed slot (the caller's contract).
                    unsafe { dst.add(i * drs + j * dcs).write(0.0) };
                }
            }
        }
        return;
    }
    if dcs != 1 && drs == 1 {
        // A column-major destination: the transposed product `dstᵀ = bᵀ · aᵀ` is
        // row-major, which the micro-kernel stores directly.
        fn t<'a>(x: &Matrix<'a>) -> Matrix<'a> {
            Matrix::new(x.values, (x.strides.1, x.strides.0))
        }
        // SAFETY: the same slots, addressed as the transpose (the caller's contract).
        return unsafe {
            gemm_native(
                kernel,
                (n, m, k),
                (dst, (dcs, 1)),
                accumulate,
                &t(b),
                &t(a),
                parallel,
            )
        };
    }
    with_buffers(|pa, pb| {
        pack_operand(a, (Side::Left, kernel), (m, k), pa, parallel);
        pack_operand(b, (Side::Right, kernel), (n, k), pb, parallel);
        // SAFETY: as this function's contract, passed on.
        unsafe {
            multiply(
                kernel,
                (m, n, k),
                (&pa[..], &pb[..]),
                (dst, dst_strides),
                accumulate,
                parallel,
            )
        }
    })
}

/// A left operand packed once for the products that share it: a convolution's weights,
/// which every image (or Winograd chunk) of the batch multiplies, are then packed once
/// per call instead of once per image.
pub(crate) struct PackedLeft {
    panels: Panels,
    kernel: Kernel,
    m: usize,
    k: usize,
}

impl PackedLeft {
    /// `a` (`m × k`) packed for the native path on `kernel`.
    pub(crate) fn new(
        kernel: Kernel,
        a: &Matrix<'_>,
        (m, k): (usize, usize),
        parallel: bool,
    ) -> Self {
        let mut panels = Panels::default();
        pack_operand(a, (Side::Left, kernel), (m, k), &mut panels, parallel);
        PackedLeft {
            panels,
            kernel,
            m,
            k,
        }
    }

    /// Its rows and depth.
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.m, self.k)
    }
}

/// The native path with a left operand packed ahead: `dst = [dst +] a · b` for `b`
/// `k × n` and a destination whose row `i` starts at `dst + i * row_stride`, contiguous.
///
/// # Safety
/// As [`gemm_native`] (the CPU must have the kernel `a` is packed for), for a row-major
/// destination.
pub(crate) unsafe fn gemm_native_packed_left(
    a: &PackedLeft,
    n: usize,
    (dst, row_stride): (*mut f32, usize),
    accumulate: bool,
    b: &Matrix<'_>,
    parallel: bool,
) {
    let (m, k, kernel) = (a.m, a.k, a.kernel);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        let dst = (dst, (row_stride, 1));
        // SAFETY: passed on; no operand is read.
        return unsafe { gemm_native(kernel, (m, n, 0), dst, accumulate, b, b, false) };
    }
    with_buffers(|_, pb| {
        pack_operand(b, (Side::Right, kernel), (n, k), pb, parallel);
        // SAFETY: as this function's contract, passed on; `a` holds the panels of an
        // `m × k` operand, as `pack_operand` lays them out for `kernel`.
        unsafe {
            multiply(
                kernel,
                (m, n, k),
                (&a.panels[..], &pb[..]),
                (dst, (row_stride, 1)),
                accumulate,
                parallel,
            )
        }
    })
}

/// The native path for a right operand made as depth pairs: `dst = a · b` (`m × n`),
/// `a` (`m × k`) packed as usual, `b` (`k × n`) packed from `pair_row(q, row)`, which
/// writes pair `q` (rows 2q and 2q + 1) of every column: column j's bfloat16 bits of row
/// 2q low, of row 2q + 1 high ([`pack_right_from_pairs`]). Row `i` of the destination
/// is at `dst + i * row_stride`, contiguous; every slot is written.
///
/// # Safety
/// As [`gemm_native`], for a row-major destination.
pub(crate) unsafe fn gemm_native_right_pairs(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    (dst, row_stride): (*mut f32, usize),
    a: &Matrix<'_>,
    pair_row: &(dyn Fn(usize, &mut [u32]) + Sync),
    parallel: bool,
) {
    if m == 0 || n == 0 || k == 0 {
        // SAFETY: passed on; no operand is read.
        let dst = (dst, (row_stride, 1));
        return unsafe { gemm_native(kernel, (m, n, 0), dst, false, a, a, false) };
    }
    with_buffers(|pa, pb| {
        pack_operand(a, (Side::Left, kernel), (m, k), pa, parallel);
        pack_right_from_pairs(kernel, (n, k), pair_row, pb, parallel);
        let dst = (dst, (row_stride, 1));
        // SAFETY: as this function's contract, passed on; the panels are laid out for
        // these shapes and this kernel.
        unsafe { multiply(kernel, (m, n, k), (&pa[..], &pb[..]), dst, false, parallel) }
    })
}

thread_local! {
    /// Each thread's packing buffers, reused from product to product.
    static BUFFERS: std::cell::RefCell<(Panels, Panels)> = Default::default();
}

/// Runs `f` with this thread's packing buffers (fresh ones inside a product that is
/// already using them: a product nested in another's parallel work).
fn with_buffers<R>(f: impl FnOnce(&mut Panels, &mut Panels) -> R) -> R {
    BUFFERS.with(|b| match b.try_borrow_mut() {
        Ok(mut b) => {
            let (pa, pb) = &mut *b;
            f(pa, pb)
        }
        Err(_) => f(&mut Panels::default(), &mut Panels::default()),
    })
}

/// The tiles of a product whose operands are packed.
///
/// # Safety
/// As [`gemm_native`].
unsafe fn multiply(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    (pa, pb): (&[u32], &[u32]),
    (dst, dst_strides): (*mut f32, (usize, usize)),
    accumulate: bool,
    parallel: bool,
) {
    let grid = Grid::new(kernel, m, n, k, parallel);
    let out = SendPtr(dst);
    let run = |t: usize| {
        let out = &out;
        let (rows, cols) = grid.tile(t);
        // SAFETY: tiles cover disjoint (row, column) ranges of the addressed slots (the
        // caller's contract); distinct (i, j) pairs address distinct slots.
        unsafe {
            tile_product(
                &grid,
                (pa, pb),
                (rows, cols),
                (out.0, dst_strides),
                accumulate,
            )
        }
    };
    if grid.parallel {
        (0..grid.tiles()).into_par_iter().for_each(run);
    } else {
        (0..grid.tiles()).for_each(run);
    }
}

/// How the output is cut into tiles for the threads.
struct Grid {
    kernel: Kernel,
    /// Rows per left panel, columns per right panel, depth pairs per block.
    mr: usize,
    nr: usize,
    kc: usize,
    m: usize,
    n: usize,
    /// Depth pairs, and the padded row and column counts of the packed operands.
    pairs: usize,
    m_pad: usize,
    n_pad: usize,
    row_panels: usize,
    col_panels: usize,
    parallel: bool,
}

impl Grid {
    fn new(kernel: Kernel, m: usize, n: usize, k: usize, parallel: bool) -> Self {
        let threads = if parallel { threads() } else { 1 };
        let (mr, nr) = (kernel.mr(), kernel.nr());
        let (m_panels, n_panels) = (m.div_ceil(mr), n.div_ceil(nr));
        let parallel = threads > 1 && m * n * k >= 1 << 20;
        // Enough tiles for every thread to take two when the columns alone give too few.
        let col_panels = (TILE_COLS / nr).min(n_panels.div_ceil(2 * threads).max(1));
        let col_tiles = n_panels.div_ceil(col_panels);
        let most_row_panels = (TILE_ROWS / mr).max(1);
        let row_panels = if col_tiles >= 2 * threads {
            most_row_panels
        } else {
            most_row_panels.min(m_panels.div_ceil(2 * threads).max(1))
        };
        Grid {
            kernel,
            mr,
            nr,
            kc: kernel.kc(),
            m,
            n,
            pairs: kernel.pairs(k),
            m_pad: m_panels * mr,
            n_pad: n_panels * nr,
            row_panels,
            col_panels,
            parallel,
        }
    }

    fn row_tiles(&self) -> usize {
        (self.m_pad / self.mr).div_ceil(self.row_panels)
    }

    fn tiles(&self) -> usize {
        self.row_tiles() * (self.n_pad / self.nr).div_ceil(self.col_panels)
    }

    /// Tile `t`'s padded row and column ranges.
    fn tile(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (r, c) = (t % self.row_tiles(), t / self.row_tiles());
        let rows =
            r * self.row_panels * self.mr..((r + 1) * self.row_panels * self.mr).min(self.m_pad);
        let width = self.col_panels * self.nr;
        let cols = c * width..((c + 1) * width).min(self.n_pad);
        (rows, cols)
    }
}

/// One output tile: every depth block's micro-kernel tiles, written or added into `dst`.
///
/// # Safety
/// `dst` must be valid for reads and writes at `i * drs + j * dcs` for every real (i, j)
/// of the tile, and no other thread may touch those slots meanwhile.
unsafe fn tile_product(
    g: &Grid,
    (pa, pb): (&[u32], &[u32]),
    (rows, cols): (std::ops::Range<usize>, std::ops::Range<usize>),
    (dst, (drs, dcs)): (*mut f32, (usize, usize)),
    accumulate: bool,
) {
    for p0 in (0..g.pairs).step_by(g.kc) {
        let len = g.kc.min(g.pairs - p0);
        let add = accumulate || p0 > 0;
        for j0 in cols.clone().step_by(g.nr) {
            let b_panel = &pb[p0 * g.n_pad + j0 * len..][..len * g.nr];
            for i0 in rows.clone().step_by(g.mr) {
                let a = &pa[p0 * g.m_pad + i0 * len..][..len * g.mr];
                let panels = TilePanels {
                    pairs: len,
                    a,
                    b: b_panel,
                };
                let (mr, nr) = (g.mr.min(g.m - i0.min(g.m)), g.nr.min(g.n - j0.min(g.n)));
                if mr == 0 || nr == 0 {
                    continue;
                }
                if dcs == 1 {
                    let out = TileOut {
                        dst: dst.wrapping_add(i0 * drs + j0),
                        row_stride: drs,
                        rows: mr,
                        cols: nr,
                    };
                    // SAFETY: rows i0.. and columns j0.. of this tile are real slots,
                    // contiguous along a row, and this thread's alone; the CPU has the
                    // kernel's instructions (the caller's contract).
                    unsafe { tile_into(g.kernel, panels, &out, add) };
                    continue;
                }
                let mut sums = [0f32; TILE_FLOATS];
                debug_assert!(g.mr * g.nr <= sums.len());
                let out = TileOut {
                    dst: sums.as_mut_ptr(),
                    row_stride: g.nr,
                    rows: g.mr,
                    cols: g.nr,
                };
                // SAFETY: `sums` holds mr rows of nr slots, row-major, and is this
                // call's own.
                unsafe { tile_into(g.kernel, panels, &out, false) };
                for (i, row) in sums.chunks_exact(g.nr).take(mr).enumerate() {
                    let base = (i0 + i) * drs + j0 * dcs;
                    for (j, s) in row[..nr].iter().enumerate() {
                        // SAFETY: (i0 + i, j0 + j) is a real element of this tile.
                        let slot = unsafe { &mut *dst.add(base + j * dcs) };
                        *slot = if add { *slot + s } else { *s };
                    }
                }
            }
        }
    }
}

/// One micro-kernel tile on `kernel` (`microkernel::tile_into`'s contract, with the
/// panels laid out for `kernel`).
///
/// # Safety
/// As the kernel's `tile_into`; the CPU must have its instructions.
unsafe fn tile_into(kernel: Kernel, p: TilePanels<'_>, out: &TileOut, add: bool) {
    match kernel {
        // SAFETY: the caller's contract.
        Kernel::Avx512 => unsafe { super::microkernel::tile_into(p, out, add) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract; AMX depth blocks are whole tiles (`Grid::pairs`
        // and AMX_KC are multiples of 16 pairs).
        Kernel::Amx => unsafe { super::amx::tile_into(p, out, add) },
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Amx => unreachable!("AMX is x86-64 only"),
    }
}

/// An operand's values as float32 bfloat16 values (f32 rounded, bf16 widened), with its
/// strides: the widening path's input to the float32 GEMM.
pub(crate) fn widened(a: &Matrix<'_>) -> (Vec<f32>, (usize, usize)) {
    let out = match a.values {
        Values::F32(d) => {
            let mut out = vec![0f32; d.len()];
            super::convert::round_as_f32(d, &mut out);
            out
        }
        Values::Bf16(d) => {
            let mut out = vec![0f32; d.len()];
            super::convert::widen_slice(d, &mut out);
            out
        }
    };
    (out, a.strides)
}
