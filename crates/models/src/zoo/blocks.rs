//! Building blocks the zoo's families share, named as torchvision's modules name them:
//! `Conv2dNormActivation` (`<path>.0` convolution, `<path>.1` batch norm, then the
//! activation) and `SqueezeExcitation` (`<path>.fc1`, `<path>.fc2`).

use wick_graph::{GraphBuilder, ValueId};

use crate::nn::{Conv, Layers};

/// An activation without parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// None (a projection).
    Identity,
    /// ReLU.
    Relu,
    /// ReLU6.
    Relu6,
    /// Hardswish.
    Hardswish,
    /// SiLU.
    Silu,
    /// Sigmoid.
    Sigmoid,
    /// Hardsigmoid.
    Hardsigmoid,
}

impl Act {
    /// Records the activation of `x` (inside the builder's current layer).
    pub fn apply(self, b: &mut GraphBuilder, x: ValueId) -> wick_graph::Result<ValueId> {
        match self {
            Act::Identity => Ok(x),
            Act::Relu => b.relu(x),
            Act::Relu6 => b.relu6(x),
            Act::Hardswish => b.hardswish(x),
            Act::Silu => b.silu(x),
            Act::Sigmoid => b.sigmoid(x),
            Act::Hardsigmoid => b.hardsigmoid(x),
        }
    }
}

/// torchvision's `Conv2dNormActivation`: convolution without bias (`path.0`, padding
/// `(k - 1) / 2`), batch norm (`path.1`), activation (`path.2`).
pub fn conv_norm_act(
    nn: &mut Layers,
    path: &str,
    x: ValueId,
    conv: Conv,
    act: Act,
) -> wick_graph::Result<ValueId> {
    nn.scope(path, |nn| {
        let h = nn.conv2d("0", x, conv.same_padding())?;
        let h = nn.batch_norm("1", h, conv.cout)?;
        nn.scope("2", |nn| act.apply(nn.builder(), h))
    })
}

/// torchvision's `SqueezeExcitation`: global average, `fc1` (1x1 conv with bias) from `c`
/// to `squeeze` channels, `act` (`activation`), `fc2` back to `c`, `gate`
/// (`scale_activation`), and the input scaled by it.
pub fn squeeze_excitation(
    nn: &mut Layers,
    path: &str,
    x: ValueId,
    c: usize,
    squeeze: usize,
    act: Act,
    gate: Act,
) -> wick_graph::Result<ValueId> {
    nn.scope(path, |nn| {
        let s = nn.builder().global_avg_pool(x)?;
        let s = nn.conv2d("fc1", s, Conv::new(c, squeeze, 1).bias())?;
        let s = nn.scope("activation", |nn| act.apply(nn.builder(), s))?;
        let s = nn.conv2d("fc2", s, Conv::new(squeeze, c, 1).bias())?;
        let s = nn.scope("scale_activation", |nn| gate.apply(nn.builder(), s))?;
        nn.builder().mul(x, s)
    })
}

/// torchvision's `_make_divisible`: `v` rounded to the nearest multiple of `divisor`
/// (at least `divisor`), rounded up once more if that lost over 10%.
pub fn make_divisible(v: f64, divisor: usize) -> usize {
    let d = divisor as f64;
    let rounded = (((v + d / 2.0) as usize) / divisor * divisor).max(divisor);
    if (rounded as f64) < 0.9 * v {
        rounded + divisor
    } else {
        rounded
    }
}
