//! Rotary position embeddings (Su et al. 2021) as transformers computes them for LLaMA:
//! the inverse frequencies of the default rotary embedding or of Llama 3.1's scaled one
//! (`rope_type: "llama3"`), the cos and sin tables of a range of positions, and their
//! application to queries or keys.
//!
//! transformers computes the frequencies and tables in float32 whatever the model's dtype;
//! so does wick, each step rounded as float32 arithmetic rounds it, except for a float64
//! graph, where every step is float64.

use candle_core::{DType, Device, Tensor};
use wick_graph::{GraphBuilder, ValueId};

use super::config_json::ConfigJson;
use crate::error::Result;

/// How the inverse frequencies are derived from `rope_theta`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `θ_j = rope_theta^(-2j/head_dim)` (`rope_type: "default"`).
    Default,
    /// Llama 3.1's: the default frequencies with wavelengths above
    /// `original_max_position_embeddings / low_freq_factor` divided by `factor`, those
    /// below `original_max_position_embeddings / high_freq_factor` kept, and those between
    /// interpolated (`rope_type: "llama3"`).
    Llama3 {
        /// The division of the low frequencies (8 for Llama 3.1, 32 for Llama 3.2).
        factor: f64,
        /// Sets the longest wavelength kept apart from scaling.
        low_freq_factor: f64,
        /// Sets the shortest wavelength that is scaled.
        high_freq_factor: f64,
        /// The context the model was pretrained on.
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// The scaling a `rope_parameters` or `rope_scaling` object describes (its
    /// `rope_type`, or `type` in older files), with `rope_theta` read into `theta` when
    /// the object has it; an error naming any other type or a missing field.
    pub(crate) fn from_json(rope: &ConfigJson, theta: &mut f64) -> Result<Self> {
        rope.real("rope_theta", theta, false)?;
        let kind = rope.string("rope_type")?.or(rope.string("type")?);
        match kind.as_deref() {
            None | Some("default") => Ok(RopeScaling::Default),
            Some("llama3") => {
                let field = |key: &str| rope.required_real(key, "rope_type llama3");
                let (low, high) = (field("low_freq_factor")?, field("high_freq_factor")?);
                if high <= low {
                    return Err(rope.error(format!(
                        "high_freq_factor {high} must be above low_freq_factor {low}"
                    )));
                }
                Ok(RopeScaling::Llama3 {
                    factor: field("factor")?,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_position_embeddings: field("original_max_position_embeddings")?,
                })
            }
            Some(other) => Err(rope.error(format!(
                "rope_type `{other}` is not supported (default, llama3)"
            ))),
        }
    }

    /// The fields of a `rope_parameters` object, beside `rope_theta`.
    pub(crate) fn to_json(self, theta: f64) -> serde_json::Value {
        match self {
            RopeScaling::Default => {
                serde_json::json!({"rope_type": "default", "rope_theta": theta})
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => serde_json::json!({
                "rope_type": "llama3",
                "rope_theta": theta,
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            }),
        }
    }
}

/// A rotary embedding: its base, its scaling and the width of the heads it rotates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rotary {
    /// `rope_theta`.
    pub theta: f64,
    /// How the frequencies are scaled.
    pub scaling: RopeScaling,
    /// The width of each head (even).
    pub head_dim: usize,
}

impl Rotary {
    /// The `head_dim / 2` inverse frequencies, each step of transformers' computation
    /// rounded to float32 unless `dtype` is F64.
    pub fn inverse_frequencies(&self, dtype: DType) -> Vec<f64> {
        let r = rounding(dtype);
        let d = self.head_dim;
        let theta = r(self.theta);
        let default = (0..d / 2).map(|j| r(1.0 / r(theta.powf(r((2 * j) as f64 / d as f64)))));
        let RopeScaling::Llama3 {
            factor,
            low_freq_factor: low,
            high_freq_factor: high,
            original_max_position_embeddings: context,
        } = self.scaling
        else {
            return default.collect();
        };
        // transformers' tensor ops: `scalar / t` is `reciprocal(t) * scalar`, and each
        // scalar meets the float32 tensor as a float32.
        let (low_wavelength, high_wavelength) = (context / low, context / high);
        default
            .map(|inv| {
                let wavelength = r(r(1.0 / inv) * r(2.0 * std::f64::consts::PI));
                let scaled = if wavelength > low_wavelength {
                    r(inv / r(factor))
                } else {
                    inv
                };
                if wavelength < high_wavelength || wavelength > low_wavelength {
                    return scaled;
                }
                let smooth = r(r(r(r(1.0 / wavelength) * r(context)) - r(low)) / r(high - low));
                let kept = r(smooth * scaled);
                r(r(r(r(1.0 - smooth) * scaled) / r(factor)) + kept)
            })
            .collect()
    }

    /// The tables of positions `offset..offset + t`, each `[t, head_dim]`: `cos(p·θ_j)`
    /// and `sin(p·θ_j)` for both halves of a head, in `dtype`.
    pub fn tables(
        &self,
        offset: usize,
        t: usize,
        dtype: DType,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let r = rounding(dtype);
        let inverse = self.inverse_frequencies(dtype);
        let (d, half) = (self.head_dim, self.head_dim / 2);
        let (mut cos, mut sin) = (Vec::with_capacity(t * d), Vec::with_capacity(t * d));
        for p in offset..offset + t {
            for j in 0..d {
                let angle = r(p as f64 * inverse[j % half]);
                cos.push(r(angle.cos()));
                sin.push(r(angle.sin()));
            }
        }
        let table = |v| Tensor::from_vec(v, (t, d), &Device::Cpu)?.to_dtype(dtype);
        Ok((table(cos)?, table(sin)?))
    }
}

/// Rounding to float32, or none for F64.
fn rounding(dtype: DType) -> impl Fn(f64) -> f64 {
    move |x| {
        if dtype == DType::F64 {
            x
        } else {
            x as f32 as f64
        }
    }
}

/// Rotary position embedding of `x` `[N, heads, T, d]` by tables `[T, d]`
/// ([`Rotary::tables`], or computed in the graph):
/// `x·cos + rotate_half(x)·sin`, where `rotate_half` of halves `(a, b)` is `(-b, a)`;
/// transformers' `apply_rotary_pos_emb` for one of q and k.
pub fn apply_rotary(
    b: &mut GraphBuilder,
    x: ValueId,
    (cos, sin): (ValueId, ValueId),
) -> wick_graph::Result<ValueId> {
    let halves = b.chunk(x, 2, -1)?;
    let minus_second = b.neg(halves[1])?;
    let rotated = b.concat(&[minus_second, halves[0]], 3)?;
    let x_cos = b.mul(x, cos)?;
    let rotated_sin = b.mul(rotated, sin)?;
    b.add(x_cos, rotated_sin)
}
