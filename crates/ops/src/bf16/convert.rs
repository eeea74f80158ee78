//! Conversions between float32 and bfloat16 (kept as its 16 bits, `u16`): rounding to
//! nearest, ties to even, as PyTorch's `Tensor.to(torch.bfloat16)`, the `half` crate and
//! AVX512-BF16's `vcvtneps2bf16` round; NaN stays NaN (quieted).

use rayon::prelude::*;

use crate::cpu::{vectorized, CHUNK};

/// The bfloat16 nearest to `x` (ties to even), as its bits.
#[inline(always)]
pub fn round_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = (bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16) as u16;
    // A NaN keeps its sign and top payload bits and is made quiet (rounding could carry
    // a NaN's payload into infinity).
    let nan = ((bits >> 16) as u16) | 0x0040;
    if x.is_nan() {
        nan
    } else {
        rounded
    }
}

/// The float32 value of a bfloat16 (exact: bfloat16 is float32's top half).
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `dst[i] = round_to_bf16(src[i])`, in parallel chunks compiled for the widest vectors.
pub fn round_slice(src: &[f32], dst: &mut [u16]) {
    map_slice("bf16 rounding", src, dst, round_to_bf16)
}

/// `dst[i] = bf16_to_f32(src[i])`, in parallel chunks compiled for the widest vectors.
pub fn widen_slice(src: &[u16], dst: &mut [f32]) {
    map_slice("bf16 widening", src, dst, bf16_to_f32)
}

/// `dst[i]` = `src[i]` rounded to the nearest bfloat16 (ties to even), as float32: one
/// pass, in parallel chunks compiled for the widest vectors.
pub fn round_as_f32(src: &[f32], dst: &mut [f32]) {
    map_slice("bf16 rounding", src, dst, |x| bf16_to_f32(round_to_bf16(x)))
}

/// `dst[i] = f(src[i])`, in parallel chunks compiled for the widest vectors.
///
/// # Panics
/// If the lengths differ (`what` names the conversion).
#[inline(always)]
fn map_slice<S: Copy + Sync, D: Send>(
    what: &str,
    src: &[S],
    dst: &mut [D],
    f: impl Fn(S) -> D + Sync,
) {
    assert_eq!(src.len(), dst.len(), "{what}: lengths differ");
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            vectorized(|| {
                for (d, s) in d.iter_mut().zip(s) {
                    *d = f(*s);
                }
            })
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even_as_the_half_crate_does() {
        let samples = [
            0.0f32,
            -0.0,
            1.0,
            1.0 + 1.0 / 256.0,        // a tie: stays at the even 1.0
            1.0 + 3.0 / 256.0,        // a tie: goes up to the even neighbour
            1.0 + 1.0 / 256.0 + 1e-7, // just above a tie: up
            f32::MAX,                 // rounds up to infinity, as RNE does
            f32::MIN_POSITIVE / 3.0,  // a subnormal
            f32::INFINITY,
            f32::NEG_INFINITY,
            -2.7182817e-3,
            65504.0,
        ];
        for x in samples {
            assert_eq!(
                round_to_bf16(x),
                half::bf16::from_f32(x).to_bits(),
                "round_to_bf16({x:e})"
            );
        }
        let nan = round_to_bf16(f32::NAN);
        assert!(bf16_to_f32(nan).is_nan());
        // A NaN whose payload sits only in the low half stays a NaN (not infinity).
        let low_payload = f32::from_bits(0x7f80_0001);
        assert!(bf16_to_f32(round_to_bf16(low_payload)).is_nan());
    }

    #[test]
    fn slices_round_and_widen_every_element() {
        let src: Vec<f32> = (0..100_003)
            .map(|i| (i as f32 * 0.37).sin() * 1e3)
            .collect();
        let mut half_bits = vec![0u16; src.len()];
        round_slice(&src, &mut half_bits);
        let mut back = vec![0f32; src.len()];
        widen_slice(&half_bits, &mut back);
        let mut direct = vec![0f32; src.len()];
        round_as_f32(&src, &mut direct);
        assert_eq!(
            direct, back,
            "rounding as float32 gives the widened bfloat16s"
        );
        for (i, (x, y)) in src.iter().zip(&back).enumerate() {
            assert_eq!(
                half_bits[i],
                half::bf16::from_f32(*x).to_bits(),
                "element {i}"
            );
            assert!(
                (x - y).abs() <= x.abs() * (1.0 / 256.0),
                "element {i}: {x} -> {y}"
            );
        }
    }
}
