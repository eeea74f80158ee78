//! The bfloat16 GEMM against float64, per path: every result within float32's summation
//! error of the exact sum of the bfloat16-rounded products, and within bfloat16's
//! rounding error of the float32 inputs' exact product. Shapes cover every edge of the
//! packing (rows past a panel, columns past a panel, an odd depth, several depth blocks)
//! and operands of both kinds, with transposed strides.

use wick_ops::bf16::{
    bf16_to_f32, gemm, has_amx, has_avx512_bf16, round_to_bf16, Bf16Path, Matrix, Values,
};

/// A small deterministic generator (xorshift), values in [-2, 2).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// The paths to check: the widening one always; `vdpbf16ps` and AMX where the CPU has
/// them.
fn paths() -> Vec<Bf16Path> {
    let mut paths = vec![Bf16Path::Widening];
    for (path, here, what) in [
        (Bf16Path::Native, has_avx512_bf16(), "avx512_bf16"),
        (Bf16Path::Amx, has_amx(), "amx_bf16"),
    ] {
        match here {
            true => paths.push(path),
            false => eprintln!("skipped: the {path:?} bf16 path (this CPU has no {what})"),
        }
    }
    paths
}

/// Depths past one block of each kernel (128 and 512 pairs) reach the later blocks' sums.
const SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (3, 5, 7),
    (8, 48, 2),
    (9, 49, 3),
    (17, 100, 255),
    (64, 96, 256),
    (33, 7, 600),
    (70, 130, 577),
    (128, 200, 64),
    (35, 40, 1090),
];

/// (row, column) strides of an r × c matrix stored row-major or transposed.
fn strides(r: usize, c: usize, transposed: bool) -> (usize, usize) {
    let _ = r;
    if transposed {
        (1, r)
    } else {
        (c, 1)
    }
}

fn check(path: Bf16Path, (m, n, k): (usize, usize, usize), layout: usize, rng: &mut Rng) {
    let (ta, tb) = (layout & 1 == 1, layout & 2 == 2);
    let (a, b) = (rng.vec(m * k), rng.vec(k * n));
    let (sa, sb) = (strides(m, k, ta), strides(k, n, tb));
    let a_bits: Vec<u16> = a.iter().map(|x| round_to_bf16(*x)).collect();
    let at = |i: usize, c: usize| a[i * sa.0 + c * sa.1];
    let bt = |c: usize, j: usize| b[c * sb.0 + j * sb.1];
    let r = |x: f32| bf16_to_f32(round_to_bf16(x)) as f64;
    // The left operand as bf16 bits on odd layouts, as f32 on even ones: both kinds.
    let left = if layout == 1 || layout == 3 {
        Values::Bf16(&a_bits)
    } else {
        Values::F32(&a)
    };
    let start = rng.vec(m * n);
    for accumulate in [false, true] {
        // A column-major destination on accumulating runs: any strides.
        let ds = if accumulate { (1, m) } else { (n, 1) };
        let mut dst = start.clone();
        gemm(
            path,
            (m, n, k),
            (&mut dst, ds),
            accumulate,
            &Matrix::new(left, sa),
            &Matrix::new(&b, sb),
        );
        for i in 0..m {
            for j in 0..n {
                let init = if accumulate {
                    start[i * ds.0 + j * ds.1] as f64
                } else {
                    0.0
                };
                let (mut rounded, mut exact, mut scale) = (init, init, init.abs());
                for c in 0..k {
                    rounded += r(at(i, c)) * r(bt(c, j));
                    exact += at(i, c) as f64 * bt(c, j) as f64;
                    scale += (at(i, c) as f64 * bt(c, j) as f64).abs();
                }
                let got = dst[i * ds.0 + j * ds.1] as f64;
                let sum_err = (k + 2) as f64 * 2f64.powi(-23) * scale * 1.01;
                let what =
                    format!("{path:?} {m}x{n}x{k} layout {layout} acc {accumulate} ({i},{j})");
                assert!(
                    (got - rounded).abs() <= sum_err,
                    "{what}: {got} vs bf16-exact {rounded}"
                );
                let bf16_err = 2.0 * 2f64.powi(-8) * scale + sum_err;
                assert!(
                    (got - exact).abs() <= bf16_err,
                    "{what}: {got} vs exact {exact}"
                );
            }
        }
    }
}

#[test]
fn bf16_gemm_matches_float64_on_every_path_shape_and_layout() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for path in paths() {
        for shape in SHAPES {
            for layout in 0..4 {
                check(path, shape, layout, &mut rng);
            }
        }
    }
}

#[test]
fn native_and_widening_paths_agree_to_float32_summation() {
    if !has_avx512_bf16() {
        eprintln!("skipped: needs avx512_bf16 (the native path)");
        return;
    }
    let (m, n, k) = (96, 300, 1000);
    let mut rng = Rng(7);
    let (a, b) = (rng.vec(m * k), rng.vec(k * n));
    let run = |path| {
        let mut d = vec![0f32; m * n];
        gemm(
            path,
            (m, n, k),
            (&mut d, (n, 1)),
            false,
            &Matrix::new(&a, (k, 1)),
            &Matrix::new(&b, (n, 1)),
        );
        d
    };
    let y = run(Bf16Path::Widening);
    for path in paths().into_iter().skip(1) {
        let x = run(path);
        let tensor = |v: &[f32]| candle_core::Tensor::new(v, &candle_core::Device::Cpu).unwrap();
        let worst = wick_ops::max_abs_diff(&tensor(&x), &tensor(&y)).unwrap();
        // Sums of 1000 products of magnitude <= 4: float32 summation error is ~1e-4 at
        // most.
        assert!(worst < 2e-3, "{path:?} and widening differ by {worst}");
        assert!(x != vec![0.0; m * n]);
    }
}

#[test]
fn an_empty_depth_writes_zeros_or_keeps_the_destination() {
    let mut d = vec![5f32; 6];
    let empty = Matrix::new(&[0f32; 0][..], (0, 1));
    // Accumulating keeps the destination; overwriting writes the empty sum, 0.
    for (accumulate, want) in [(true, 5.0), (false, 0.0)] {
        let dst = (&mut d[..], (3, 1));
        gemm(
            Bf16Path::Widening,
            (2, 3, 0),
            dst,
            accumulate,
            &empty,
            &empty,
        );
        assert_eq!(d, vec![want; 6], "accumulate {accumulate}");
    }
}
