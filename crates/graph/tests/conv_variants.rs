//! Each convolution node tells hooks what kind it is (depthwise, grouped, 1x1, or plain
//! dense), forward and backward, while its kernel and kernel name stay those of every
//! convolution (SINGA's lines print `ConvForward` for all of them).

use std::sync::{Arc, Mutex};

use candle_core::{DType, Device};
use wick_graph::hooks::{Hook, NodeInfo};
use wick_graph::{Executor, GraphBuilder, Mode, Result};
use wick_ops::{Conv2dParams, Kernel, KernelVariant};

/// A hook that keeps what it is told on attach.
struct Nodes(Arc<Mutex<Vec<NodeInfo>>>);

impl Hook for Nodes {
    fn on_attach(&mut self, nodes: &[NodeInfo], _device: &Device) -> Result<()> {
        *self.0.lock().unwrap() = nodes.to_vec();
        Ok(())
    }
}

#[test]
fn convolutions_carry_their_kind_forward_and_backward() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[1, 4, 6, 6], DType::F32).unwrap();
    let conv = |b: &mut GraphBuilder, x, name: &str, w: &[usize], p: Conv2dParams| {
        let w = b.param(&format!("{name}.weight"), w).unwrap();
        b.in_layer(name, |b| b.conv2d(x, w, None, p)).unwrap()
    };
    let grouped = |groups| Conv2dParams {
        groups,
        ..Conv2dParams::new(1, 1)
    };
    let h = conv(&mut b, x, "dense", &[4, 4, 3, 3], Conv2dParams::new(1, 1));
    let h = conv(
        &mut b,
        h,
        "pointwise",
        &[8, 4, 1, 1],
        Conv2dParams::new(2, 0),
    );
    let h = conv(&mut b, h, "depthwise", &[8, 1, 3, 3], grouped(8));
    let h = conv(&mut b, h, "grouped", &[8, 4, 3, 3], grouped(2));
    let loss = b.sum(h, &[0, 1, 2, 3], false).unwrap();
    b.output(loss);
    b.backward(loss).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let seen = Arc::new(Mutex::new(Vec::new()));
    exec.add_hook(Nodes(seen.clone())).unwrap();

    let expected = [
        ("dense", None),
        ("pointwise", Some(KernelVariant::PointwiseConv)),
        ("depthwise", Some(KernelVariant::DepthwiseConv)),
        ("grouped", Some(KernelVariant::GroupedConv)),
    ];
    let nodes = seen.lock().unwrap();
    for (layer, variant) in expected {
        let convs: Vec<&NodeInfo> = nodes
            .iter()
            .filter(|n| n.origin.layer.as_deref() == Some(layer))
            .filter(|n| {
                matches!(
                    n.kernel,
                    Kernel::ConvForward | Kernel::ConvBackwardData | Kernel::ConvBackwardFilter
                )
            })
            .collect();
        // The first layer's input needs no gradient: no ConvBackwardData there.
        let want = if layer == "dense" { 2 } else { 3 };
        assert_eq!(convs.len(), want, "{layer}: {convs:?}");
        for n in convs {
            assert_eq!(n.variant, variant, "{layer} {}", n.name);
            assert!(n.name.starts_with("Conv"), "{}", n.name);
        }
    }
}
