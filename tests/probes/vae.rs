//! A VAE: the encoder's mean and log-variance, the reparameterised sample
//! `mu + eps · exp(logvar / 2)`, a sigmoid decoder under binary cross-entropy, and the KL
//! term `-0.5 · mean(sum(1 + logvar - mu² - exp(logvar), 1))`.

use candle_core::{DType, Device, Tensor};
use wick::graph::GraphBuilder;
use wick::models::nn::{Init, Layers};

use crate::{Probe, Recorded};

const N: usize = 8;
const D: usize = 12;
const Z: usize = 2;

#[test]
fn a_vae_with_a_kl_term_learns_to_reconstruct() {
    let cpu = Device::Cpu;
    let x: Vec<f32> = (0..N * D)
        .map(|i| {
            if (i * 7 + i / D).is_multiple_of(3) {
                0.9
            } else {
                0.1
            }
        })
        .collect();
    let eps: Vec<f32> = (0..N * Z)
        .map(|i| ((i * 5) % 7) as f32 / 7.0 - 0.4)
        .collect();
    let feed = [
        ("x", Tensor::from_vec(x, (N, D), &cpu).unwrap()),
        ("eps", Tensor::from_vec(eps, (N, Z), &cpu).unwrap()),
    ];
    let record = |b: &mut GraphBuilder| {
        let x = b.input("x", &[N, D], DType::F32)?;
        let eps = b.input("eps", &[N, Z], DType::F32)?;
        let mut nn = Layers::new(b);
        let h = nn.linear("enc", x, D, 16, Init::LinearDefault)?;
        let h = nn.builder().relu(h)?;
        let mu = nn.linear("mu", h, 16, Z, Init::LinearDefault)?;
        let logvar = nn.linear("logvar", h, 16, Z, Init::LinearDefault)?;
        let half = nn.builder().mul_scalar(logvar, 0.5)?;
        let std = nn.builder().exp(half)?;
        let noise = nn.builder().mul(eps, std)?;
        let z = nn.builder().broadcast_add(mu, noise)?;
        let h = nn.linear("dec.0", z, Z, 16, Init::LinearDefault)?;
        let h = nn.builder().relu(h)?;
        let logits = nn.linear("dec.2", h, 16, D, Init::LinearDefault)?;
        let specs = nn.into_specs();
        let recon = b.sigmoid(logits)?;
        let bce = b.binary_cross_entropy(recon, x)?;
        // KL(q(z|x) || N(0, 1)).
        let mu2 = b.pow(mu, 2.0)?;
        let var = b.exp(logvar)?;
        let t = b.add_scalar(logvar, 1.0)?;
        let t = b.sub(t, mu2)?;
        let t = b.sub(t, var)?;
        let per_sample = b.sum(t, &[1], false)?;
        let kl = b.mean(per_sample, &[], false)?;
        let kl = b.mul_scalar(kl, -0.5 / D as f64)?;
        let loss = b.broadcast_add(bce, kl)?;
        Ok(Recorded { loss, specs })
    };
    Probe {
        name: "vae",
        lr: 2e-2,
        steps: 60,
        loss_ratio: 0.8,
        ops: &["Exp", "ExpBackward", "Pow", "Sum", "Mean", "BceLossForward"],
    }
    .check(record, &feed);
}
