//! torchvision's initialisation of a ResNet, from a seed.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};

use crate::error::{ModelError, Result};
use crate::resnet::{ResNetConfig, TensorRole};

/// Fresh weights as torchvision makes them: Kaiming-normal convolutions (fan out, relu
/// gain), batch-norm weight 1 and bias 0, running mean 0 and variance 1, and `nn.Linear`'s
/// default (uniform within ±1/sqrt(fan_in) for weight and bias). f32, on the CPU.
pub fn torchvision_init(config: &ResNetConfig, seed: u64) -> Result<HashMap<String, Tensor>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = HashMap::new();
    for spec in config.state_spec()? {
        let n: usize = spec.shape.iter().product();
        let data: Vec<f32> = match spec.role {
            TensorRole::ConvWeight => {
                let fan_out = spec.shape[0] * spec.shape[2] * spec.shape[3];
                let normal = Normal::new(0.0, (2.0 / fan_out as f32).sqrt())
                    .map_err(|e| ModelError::Config(format!("{}: {e}", spec.name)))?;
                (0..n).map(|_| normal.sample(&mut rng)).collect()
            }
            TensorRole::FcWeight | TensorRole::FcBias => {
                let fan_in = config.features() as f32;
                let bound = 1.0 / fan_in.sqrt();
                let uniform = Uniform::new(-bound, bound)
                    .map_err(|e| ModelError::Config(format!("{}: {e}", spec.name)))?;
                (0..n).map(|_| uniform.sample(&mut rng)).collect()
            }
            TensorRole::BnWeight | TensorRole::RunningVar => vec![1.0; n],
            TensorRole::BnBias | TensorRole::RunningMean => vec![0.0; n],
        };
        out.insert(spec.name, Tensor::from_vec(data, spec.shape, &Device::Cpu)?);
    }
    Ok(out)
}
