//! Issue #28's probe, as a user outside wick writes it: every op and feature the probe
//! could not reach (26 "no method" errors before), through the `wick` crate's public API,
//! recorded into one training graph that runs a step with AdamW.

use wick::candle_core::{DType, Device, Tensor};
use wick::graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
use wick::graph::{Executor, GraphBuilder, LoadMode, Mode};
use wick::models::nn::{self, Conv, Init, Layers};
use wick::ops::conv::Conv2dParams;
use wick::ops::resample::UpsampleMode;
use wick::ops::AdamParams;

#[test]
fn every_probed_op_and_feature_is_reachable_from_the_public_api() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[2, 3, 8, 8], DType::F32).unwrap();
    let labels = b.input("labels", &[2], DType::I64).unwrap();
    let target = b.input("target", &[2, 10], DType::F32).unwrap();
    let mut nn = Layers::new(&mut b);
    let h = nn.conv2d("conv", x, Conv::new(3, 8, 3).padding(1)).unwrap();
    let h = nn.layer_norm2d("ln", h, 8, 1e-6).unwrap();
    let s = nn
        .param(
            "scale",
            &[8, 1, 1],
            nn::TensorRole::LayerScale,
            Init::Constant(1.0),
            0,
        )
        .unwrap();
    let specs = nn.into_specs();
    // element-wise with broadcasting, and a constant
    let h = b.mul(h, s).unwrap();
    let h = b.sub(h, s).unwrap();
    let h = b.div(h, s).unwrap();
    let h = b.scale(h, 0.5).unwrap();
    // activations
    let a = [
        b.sigmoid(h),
        b.tanh(h),
        b.silu(h),
        b.gelu(h),
        b.gelu_tanh(h),
        b.relu6(h),
        b.hardswish(h),
        b.hardsigmoid(h),
        b.leaky_relu(h, 0.1),
    ];
    let a: Vec<_> = a.into_iter().map(|v| v.unwrap()).collect();
    // shape ops, dropout, normalisation
    let h = b.concat(&a, 1).unwrap(); // [2, 72, 8, 8]
    let h = b.dropout(h, 0.1).unwrap();
    let h = b.group_norm(h, 8, None, None, 1e-5).unwrap();
    let h = b.permute(h, &[0, 2, 3, 1]).unwrap();
    let h = b.transpose(h, 1, 2).unwrap();
    let h = b.reshape(h, &[2, 72, 8, 8]).unwrap();
    // decoder ops
    let w = b.param("up.weight", &[72, 4, 2, 2]).unwrap();
    let h = b
        .conv_transpose2d(h, w, None, Conv2dParams::new(2, 0), [0, 0])
        .unwrap(); // [2, 4, 16, 16]
    let h = b.upsample(h, 4, 4, UpsampleMode::Bilinear).unwrap();
    let h = b.flatten(h).unwrap(); // [2, 64]
    let fc = b.param("fc.weight", &[10, 64]).unwrap();
    let logits = b.linear(h, fc, None).unwrap();
    let probs = b.softmax(logits, 1).unwrap();
    // losses, and backward from their sum
    let ce = b.cross_entropy(logits, labels).unwrap();
    let mse = b.mse_loss(probs, target).unwrap();
    let bce = b.bce_with_logits(logits, target).unwrap();
    let loss = b.add(ce, mse).unwrap();
    let loss = b.add(loss, bce).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    let adamw = OptimizerConfig::from(Optimizer::Adam(AdamParams::adamw(1e-3)))
        .no_weight_decay_on(ParamSelector::OneDimensional)
        .clip_grad_norm(1.0);
    b.optimize(&grads, &adamw).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let mut state = nn::initial_state(&specs, 0).unwrap();
    state.insert(
        "up.weight".into(),
        (Tensor::ones((72, 4, 2, 2), DType::F32, &Device::Cpu).unwrap() * 0.01).unwrap(),
    );
    state.insert(
        "fc.weight".into(),
        (Tensor::ones((10, 64), DType::F32, &Device::Cpu).unwrap() * 0.01).unwrap(),
    );
    let report = exec.load_state_dict(&state, LoadMode::Strict).unwrap();
    assert_eq!(report.loaded.len(), 6);
    exec.set(
        "x",
        &Tensor::ones((2, 3, 8, 8), DType::F32, &Device::Cpu).unwrap(),
    )
    .unwrap();
    exec.set("labels", &Tensor::new(&[1i64, 2], &Device::Cpu).unwrap())
        .unwrap();
    exec.set(
        "target",
        &Tensor::zeros((2, 10), DType::F32, &Device::Cpu).unwrap(),
    )
    .unwrap();
    exec.set("step", &Tensor::new(0i64, &Device::Cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
    let loss = exec.value(loss).unwrap().to_scalar::<f32>().unwrap();
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
}
