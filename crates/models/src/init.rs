//! Weight initialisers: torchvision's (random, from a seed) and the fixture formula (a
//! deterministic function of each tensor's name, that any language can recompute).

use std::collections::HashMap;

use candle_core::Tensor;

use crate::error::Result;
use crate::model::ModelConfig;

/// How a session's weights are initialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightInit {
    /// torchvision's initialisation ([`torchvision_init`]) from this seed.
    Torchvision(u64),
    /// The fixture formula ([`formula::state_dict`]): the same weights in every language.
    Formula,
}

impl WeightInit {
    /// The floating-point state dict of `config` under this initialiser (f32, CPU).
    pub fn state_dict(self, config: &ModelConfig) -> Result<HashMap<String, Tensor>> {
        match self {
            WeightInit::Torchvision(seed) => torchvision_init(*config, seed),
            WeightInit::Formula => formula::from_specs(&config.state_spec()?),
        }
    }
}

/// Fresh weights of `config` as torchvision makes them, from `seed` (its architecture's
/// [`init`](crate::model::Architecture::init)). f32, on the CPU.
pub fn torchvision_init(
    config: impl Into<ModelConfig>,
    seed: u64,
) -> Result<HashMap<String, Tensor>> {
    let config = config.into();
    (config.arch.init)(&config.state_spec()?, seed)
}

/// The fixture formula: every value of a tensor is a function of its name and index, so
/// a test in any language can rebuild the weights (see `fixtures/resnet18-formula/README.md`).
///
/// `seed = FNV-1a-64(name)`; value `j` is `u_j = splitmix64(seed + j + 0x9E3779B97F4A7C15) >> 11`
/// scaled to [0, 1), and `s_j = 2 u_j - 1`. Each role maps these to its range, in f64, then
/// the tensor is cast to f32.
pub mod formula {
    use std::collections::HashMap;

    use candle_core::{Device, Tensor};

    use crate::error::Result;
    use crate::image::ImageSize;
    use crate::model::ModelConfig;
    use crate::nn::TensorRole;

    /// FNV-1a, 64 bits, of `name`'s UTF-8 bytes.
    pub fn fnv1a(name: &str) -> u64 {
        name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// The first `n` values `u_j` in [0, 1) of the stream named `name`.
    pub fn uniform(name: &str, n: usize) -> Vec<f64> {
        let seed = fnv1a(name);
        (0..n as u64)
            .map(|j| (mix(seed, j) >> 11) as f64 * (-53f64).exp2())
            .collect()
    }

    /// splitmix64's output for state `seed + j + golden ratio`.
    fn mix(seed: u64, j: u64) -> u64 {
        let mut z = seed.wrapping_add(j).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The values (f64, before the cast) of the tensor `name` of `shape` in `role`.
    pub fn values(name: &str, shape: &[usize], role: TensorRole) -> Vec<f64> {
        let n: usize = shape.iter().product();
        let u = uniform(name, n);
        let signed = |k: f64, offset: f64| -> Vec<f64> {
            u.iter().map(|u| offset + k * (2.0 * u - 1.0)).collect()
        };
        match role {
            TensorRole::RunningVar => u.iter().map(|u| 0.5 + u).collect(),
            TensorRole::RunningMean | TensorRole::BnBias => signed(0.1, 0.0),
            TensorRole::BnWeight => signed(0.1, 1.0),
            TensorRole::ConvWeight | TensorRole::FcWeight => {
                signed((3.0 / (n / shape[0]) as f64).sqrt(), 0.0)
            }
            TensorRole::FcBias | TensorRole::ConvBias => {
                signed((3.0 / shape[0] as f64).sqrt(), 0.0)
            }
            TensorRole::LayerScale => signed(0.1, 0.0),
        }
    }

    /// Every floating-point state-dict entry of `config` by the formula (f32, CPU).
    pub fn state_dict(config: impl Into<ModelConfig>) -> Result<HashMap<String, Tensor>> {
        from_specs(&config.into().state_spec()?)
    }

    /// Every entry of `specs` by the formula (f32, CPU).
    pub fn from_specs(specs: &[crate::nn::TensorSpec]) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for spec in specs.iter().cloned() {
            let data: Vec<f32> = values(&spec.name, &spec.shape, spec.role)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let t = Tensor::from_vec(data, spec.shape, &Device::Cpu)?;
            out.insert(spec.name, t);
        }
        Ok(out)
    }

    /// A batch by the formula: `n` images of `size` (a side or an [`ImageSize`]; f32,
    /// `2 * s` from the stream `"images"`, `[n, 3, height, width]` in row-major order) and
    /// `n` labels in `0..classes` (i64, `floor(classes * u)` from `"labels"`).
    pub fn batch(n: usize, size: impl Into<ImageSize>, classes: usize) -> Result<(Tensor, Tensor)> {
        let size = size.into();
        let images: Vec<f32> = uniform("images", n * 3 * size.pixels())
            .into_iter()
            .map(|u| (2.0 * (2.0 * u - 1.0)) as f32)
            .collect();
        let labels: Vec<i64> = uniform("labels", n)
            .into_iter()
            .map(|u| (classes as f64 * u).floor() as i64)
            .collect();
        Ok((
            Tensor::from_vec(images, (n, 3, size.height, size.width), &Device::Cpu)?,
            Tensor::from_vec(labels, n, &Device::Cpu)?,
        ))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn hash_and_mix_match_their_published_reference_values() {
            // FNV-1a-64 of "" is the offset basis, of "a" 0xaf63dc4c8601ec8c (the FNV test suite).
            assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
            assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
            // Vigna's splitmix64 seeded with 0 first returns 0xe220a8397b1dcdaf.
            assert_eq!(mix(0, 0), 0xe220_a839_7b1d_cdaf);
            let u = uniform("x", 1000);
            assert!(u.iter().all(|u| (0.0..1.0).contains(u)));
        }
    }
}
