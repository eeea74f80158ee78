//! Dropout with a counter-based random mask: element `i` of step `s` in the node seeded
//! `seed` is kept when `hash(seed, s, i)` (splitmix64) falls at or above `p`. The mask is a
//! pure function of those three numbers, so a run resumed at step `s` draws the very masks
//! the uninterrupted run would have drawn, and no generator state needs saving.

use candle_core::{DType, Device, Tensor};

use crate::error::{CandleContext, Result};

const OP: &str = "dropout";

/// Checks a drop probability: in `[0, 1)`.
pub fn check_probability(p: f64) -> Result<()> {
    if !(0.0..1.0).contains(&p) {
        return Err(crate::invalid!(
            OP,
            "the drop probability must be in [0, 1), got {p}"
        ));
    }
    Ok(())
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The draws of one dropout node at one step: whether element `i` is kept is a pure
/// function of `(seed, step, i)`, so a kernel that needs the mask again (attention's
/// backward) draws it again instead of storing it.
#[derive(Debug, Clone, Copy)]
pub struct Draws {
    base: u64,
    threshold: u64,
}

impl Draws {
    /// The draws for drop probability `p` (checked by the caller) of node `seed` at `step`.
    pub fn new(p: f64, seed: u64, step: u64) -> Self {
        Draws {
            base: splitmix64(seed ^ splitmix64(step)),
            threshold: (p * (1u64 << 53) as f64) as u64,
        }
    }

    /// The hash's base and the threshold a kept element's 53-bit draw reaches (what a
    /// CUDA kernel needs to draw the same bits).
    pub fn parts(&self) -> (u64, u64) {
        (self.base, self.threshold)
    }

    /// Whether element `i` is kept.
    #[inline(always)]
    pub fn kept(&self, i: u64) -> bool {
        splitmix64(self.base ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93)) >> 11 >= self.threshold
    }
}

/// The scaled mask of `shape`: `1 / (1 - p)` where kept, 0 where dropped, in `dtype` on
/// `device` (drawn on the host).
pub fn mask(
    shape: &[usize],
    p: f64,
    seed: u64,
    step: u64,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    check_probability(p)?;
    let len: usize = shape.iter().product();
    let draws = Draws::new(p, seed, step);
    let keep = 1.0 / (1.0 - p);
    let kept = (0..len as u64).map(|i| draws.kept(i));
    // Drawn in f32 (half the bytes to move) unless the op runs in f64, whose factor
    // 1 / (1 - p) f32 would round.
    let t = if dtype == DType::F64 {
        let values: Vec<f64> = kept.map(|k| if k { keep } else { 0.0 }).collect();
        Tensor::from_vec(values, shape, device)
    } else {
        let values: Vec<f32> = kept.map(|k| if k { keep as f32 } else { 0.0 }).collect();
        Tensor::from_vec(values, shape, device)
    };
    t.ctx(OP)?.to_dtype(dtype).ctx(OP)
}

/// Dropout of `x` at `step` with a mask of `mask_shape` (`x`'s, or one value per sample
/// broadcast over the rest: stochastic depth): `(x · mask, mask)`, the mask kept for
/// backward.
pub fn dropout(
    x: &Tensor,
    mask_shape: &[usize],
    p: f64,
    seed: u64,
    step: u64,
) -> Result<(Tensor, Tensor)> {
    let m = mask(mask_shape, p, seed, step, x.dtype(), x.device())?;
    Ok((x.broadcast_mul(&m).ctx(OP)?, m))
}

/// Dropout's input gradient: `grad_y · mask` (broadcast).
pub fn dropout_backward(grad_y: &Tensor, mask: &Tensor) -> Result<Tensor> {
    crate::broadcast::broadcast_shape(OP, grad_y.dims(), mask.dims())?;
    grad_y.broadcast_mul(mask).ctx(OP)
}

/// Reads the step counter fed to a dropout node (a 0-dim integer tensor).
pub fn read_step(step: &Tensor) -> Result<u64> {
    let v = step
        .to_dtype(DType::I64)
        .ctx(OP)?
        .to_scalar::<i64>()
        .ctx(OP)?;
    u64::try_from(v).map_err(|_| crate::invalid!(OP, "the step counter is negative: {v}"))
}
