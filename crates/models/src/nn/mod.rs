//! The module layer: layers that create their named, initialised parameters from one path,
//! as candle-nn's `VarBuilder::pp` and PyTorch modules do, and record the model's state
//! spec (name, shape, role, initialiser) as they go.
//!
//! # Examples
//!
//! ```
//! use candle_core::DType;
//! use wick_graph::{GraphBuilder, Mode};
//! use wick_models::nn::{Conv, Init, Layers};
//!
//! let mut b = GraphBuilder::new(Mode::Train, DType::F32);
//! let x = b.input("images", &[2, 3, 16, 16], DType::F32)?;
//! let mut nn = Layers::new(&mut b);
//! let h = nn.conv2d("features.0", x, Conv::new(3, 8, 3).padding(1))?;
//! let h = nn.batch_norm("features.1", h, 8)?;
//! let h = nn.builder().relu(h)?;
//! let h = nn.builder().global_avg_pool(h)?;
//! let h = nn.builder().flatten(h)?;
//! let logits = nn.linear("fc", h, 8, 10, Init::LinearDefault)?;
//! let specs = nn.into_specs();
//! assert_eq!(specs[0].name, "features.0.weight");
//! assert_eq!(specs.len(), 7); // conv weight, 4 batch-norm entries, fc weight and bias
//! let weights = wick_models::nn::initial_state(&specs, 0)?; // torchvision's init, seeded
//! assert_eq!(weights["fc.bias"].dims(), &[10]);
//! # let _ = logits;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};
use wick_graph::{GraphBuilder, ValueId, ValueKind};
use wick_ops::{BatchNorm2dParams, Conv2dParams};

use crate::error::{ModelError, Result};

/// What a layer returns: its output value, or the graph's error naming the op and layer.
pub type LayerResult = wick_graph::Result<ValueId>;

mod recurrent;
mod sequence;

pub use recurrent::{GruOutput, LstmOutput, Recurrent};

/// What a state-dict entry is, for the fixture formula ([`crate::init::formula`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    /// Convolution weight.
    ConvWeight,
    /// Convolution bias.
    ConvBias,
    /// Normalisation scale (batch, layer or group norm).
    BnWeight,
    /// Normalisation shift.
    BnBias,
    /// Batch-norm running mean.
    RunningMean,
    /// Batch-norm running variance.
    RunningVar,
    /// Fully connected weight.
    FcWeight,
    /// Fully connected bias.
    FcBias,
    /// A per-channel scale (ConvNeXt's layer scale).
    LayerScale,
}

/// How a fresh tensor is initialised (torchvision's rule for its layer type and model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Kaiming normal, fan out, ReLU gain: `N(0, 2 / fan_out)` (ResNet, MobileNet, VGG convolutions).
    KaimingNormalFanOut,
    /// Kaiming normal, fan in, ReLU gain: `N(0, 2 / fan_in)` (DenseNet's convolutions).
    KaimingNormalFanIn,
    /// PyTorch's `nn.Linear`/`nn.Conv2d` default: uniform within ±1/sqrt(fan_in), for the
    /// weight and the bias alike (fan_in from the weight).
    LinearDefault,
    /// `N(0, std²)`.
    Normal(f64),
    /// `N(0, std²)` truncated to ±2 (absolute, as `trunc_normal_`'s defaults).
    TruncNormal(f64),
    /// Uniform within ±bound.
    Uniform(f64),
    /// Every value the same.
    Constant(f64),
}

/// One entry of a model's state dict: name, shape, role and initialiser.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// torchvision's name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its role.
    pub role: TensorRole,
    /// How it is initialised.
    pub init: Init,
    /// The fan-in of its layer (for [`Init::LinearDefault`] biases).
    pub fan_in: usize,
}

/// A convolution's settings for [`Layers::conv2d`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conv {
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Square kernel side.
    pub kernel: usize,
    /// Stride, padding, dilation, groups.
    pub params: Conv2dParams,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// The weight's initialiser (the bias is zero, or [`Init::LinearDefault`] with it).
    pub init: Init,
}

impl Conv {
    /// A `kernel`x`kernel` convolution from `cin` to `cout` channels: stride 1, no padding,
    /// no bias, Kaiming normal (fan out) weights.
    pub fn new(cin: usize, cout: usize, kernel: usize) -> Self {
        Conv {
            cin,
            cout,
            kernel,
            params: Conv2dParams::new(1, 0),
            bias: false,
            init: Init::KaimingNormalFanOut,
        }
    }

    /// With this stride.
    pub fn stride(mut self, s: usize) -> Self {
        self.params.stride = [s, s];
        self
    }

    /// With this padding.
    pub fn padding(mut self, p: usize) -> Self {
        self.params.padding = [p, p];
        self
    }

    /// With `(kernel - 1) / 2` padding: the output keeps the input's size at stride 1.
    pub fn same_padding(self) -> Self {
        let p = (self.kernel - 1) / 2;
        self.padding(p)
    }

    /// With this many groups (`cin` groups: depthwise).
    pub fn groups(mut self, g: usize) -> Self {
        self.params.groups = g;
        self
    }

    /// With a bias.
    pub fn bias(mut self) -> Self {
        self.bias = true;
        self
    }

    /// With this weight initialiser.
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }
}

/// Records layers on a [`GraphBuilder`], each creating its parameters under its module
/// path (`features.3.conv.0.0.weight`), and collects the model's state spec.
///
/// # Examples
///
/// Layers nest with [`scope`](Layers::scope), as PyTorch modules do:
///
/// ```
/// use candle_core::DType;
/// use wick_graph::{GraphBuilder, Mode};
/// use wick_models::nn::{Conv, Layers};
///
/// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
/// let x = b.input("x", &[1, 8, 4, 4], DType::F32)?;
/// let mut nn = Layers::new(&mut b);
/// let y = nn.scope("block.0", |nn| {
///     let h = nn.conv2d("dw", x, Conv::new(8, 8, 3).padding(1).groups(8))?;
///     nn.batch_norm("bn", h, 8)
/// })?;
/// let names: Vec<_> = nn.specs().iter().map(|s| s.name.as_str()).collect();
/// assert_eq!(names[..2], ["block.0.dw.weight", "block.0.bn.weight"]);
/// assert_eq!(nn.builder().shape(y), &[1, 8, 4, 4]);
/// # Ok::<(), wick_graph::GraphError>(())
/// ```
pub struct Layers<'a> {
    b: &'a mut GraphBuilder,
    specs: Vec<TensorSpec>,
    batch_norm: BatchNorm2dParams,
}

impl<'a> Layers<'a> {
    /// Layers recorded on `b`, batch norms with PyTorch's defaults (eps 1e-5, momentum 0.1).
    pub fn new(b: &'a mut GraphBuilder) -> Self {
        Layers {
            b,
            specs: Vec::new(),
            batch_norm: BatchNorm2dParams::default(),
        }
    }

    /// Batch norms recorded from now on use these settings (MobileNetV3: eps 1e-3,
    /// momentum 0.01).
    pub fn set_batch_norm(&mut self, p: BatchNorm2dParams) {
        self.batch_norm = p;
    }

    /// The builder, for ops without parameters.
    pub fn builder(&mut self) -> &mut GraphBuilder {
        self.b
    }

    /// The state spec recorded so far, in creation order.
    pub fn specs(&self) -> &[TensorSpec] {
        &self.specs
    }

    /// The state spec recorded.
    pub fn into_specs(self) -> Vec<TensorSpec> {
        self.specs
    }

    /// Records what `f` records inside layer `path` (nested under the current layer).
    pub fn scope<T>(
        &mut self,
        path: &str,
        f: impl FnOnce(&mut Self) -> wick_graph::Result<T>,
    ) -> wick_graph::Result<T> {
        let outer = self.b.enter_layer(path);
        let result = f(self);
        self.b.leave_layer(outer);
        result
    }

    /// Records what `f` records in eval mode inside a training graph (PyTorch's
    /// `module.eval()`): batch norms use their running statistics, dropout is off
    /// ([`GraphBuilder::in_eval_mode`]).
    pub fn eval<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> wick_graph::Result<T>,
    ) -> wick_graph::Result<T> {
        let outer = self.b.enter_eval_mode();
        let result = f(self);
        self.b.leave_eval_mode(outer);
        result
    }

    /// `name` under the current layer's path.
    fn full_name(&self, name: &str) -> String {
        match self.b.layer_path() {
            Some(p) => format!("{p}.{name}"),
            None => name.to_string(),
        }
    }

    /// Notes the spec of `name` in the current layer; returns its full name.
    fn note(&mut self, name: &str, shape: &[usize], kind: (TensorRole, Init, usize)) -> String {
        let (role, init, fan_in) = kind;
        let full = self.full_name(name);
        let shape = shape.to_vec();
        let name = full.clone();
        self.specs.push(TensorSpec {
            name,
            shape,
            role,
            init,
            fan_in,
        });
        full
    }

    /// A trainable parameter `name` of the current layer. A layer applied again under
    /// the same path shares its parameters, as a PyTorch module called twice does (an
    /// RNN's time steps, a GAN's discriminator on real and fake batches): the second call
    /// returns the first call's parameter, whose gradient then sums both uses. A shape
    /// that differs from the first call's is an error naming both.
    pub fn param(
        &mut self,
        name: &str,
        shape: &[usize],
        role: TensorRole,
        init: Init,
        fan_in: usize,
    ) -> LayerResult {
        let full = self.full_name(name);
        if let Some(v) = self.b.graph().find(&full) {
            let info = self.b.graph().value(v);
            if info.kind == ValueKind::Param && info.shape == shape {
                return Ok(v);
            }
            return Err(wick_graph::GraphError::Usage(format!(
                "`{full}` is applied again with shape {shape:?}, but it was created as a {:?} of shape {:?}",
                info.kind, info.shape
            )));
        }
        let full = self.note(name, shape, (role, init, fan_in));
        self.b.param(&full, shape)
    }

    /// A persistent non-trainable value `name` of the current layer (running statistics).
    pub fn state(
        &mut self,
        name: &str,
        shape: &[usize],
        role: TensorRole,
        init: Init,
    ) -> LayerResult {
        let full = self.full_name(name);
        if self.b.graph().find(&full).is_some() {
            return Err(wick_graph::GraphError::Usage(format!(
                "`{full}` is applied twice: a layer with running statistics updates them in \
                 place, so it cannot be shared within one graph (share the layers around it)"
            )));
        }
        let full = self.note(name, shape, (role, init, 0));
        self.b.state(&full, shape)
    }

    /// A convolution as layer `path`: `path.weight` `[cout, cin/groups, k, k]` and, with
    /// a bias, `path.bias`.
    pub fn conv2d(&mut self, path: &str, x: ValueId, c: Conv) -> LayerResult {
        self.scope(path, |nn| {
            let per_group = c.cin / c.params.groups.max(1);
            let shape = [c.cout, per_group, c.kernel, c.kernel];
            let fan_in = per_group * c.kernel * c.kernel;
            let w = nn.param("weight", &shape, TensorRole::ConvWeight, c.init, fan_in)?;
            let bias_init = if c.init == Init::LinearDefault {
                Init::LinearDefault
            } else {
                Init::Constant(0.0)
            };
            let b = match c.bias {
                true => {
                    Some(nn.param("bias", &[c.cout], TensorRole::ConvBias, bias_init, fan_in)?)
                }
                false => None,
            };
            nn.b.conv2d(x, w, b, c.params)
        })
    }

    /// `nn.ConvTranspose2d(cin, cout, k, stride, padding, output_padding, groups, bias)` as
    /// layer `path` (a decoder's or a GAN generator's upsampling): `path.weight` `[cin,
    /// cout/groups, k, k]` and, with a bias, `path.bias`, both with PyTorch's default
    /// initialisation (uniform within ±1/sqrt(cout/groups·k²); `c.init` is not used).
    pub fn conv_transpose2d(
        &mut self,
        path: &str,
        x: ValueId,
        c: Conv,
        output_padding: usize,
    ) -> LayerResult {
        self.scope(path, |nn| {
            let per_group = c.cout / c.params.groups.max(1);
            let shape = [c.cin, per_group, c.kernel, c.kernel];
            let fan_in = per_group * c.kernel * c.kernel;
            let init = Init::LinearDefault;
            let w = nn.param("weight", &shape, TensorRole::ConvWeight, init, fan_in)?;
            let b = match c.bias {
                true => Some(nn.param("bias", &[c.cout], TensorRole::ConvBias, init, fan_in)?),
                false => None,
            };
            let pad = [output_padding, output_padding];
            nn.b.conv_transpose2d(x, w, b, c.params, pad)
        })
    }

    /// A batch norm over `c` channels as layer `path` (weight 1, bias 0, running mean 0,
    /// running variance 1).
    pub fn batch_norm(&mut self, path: &str, x: ValueId, c: usize) -> LayerResult {
        let p = self.batch_norm;
        self.scope(path, |nn| {
            let w = nn.param("weight", &[c], TensorRole::BnWeight, Init::Constant(1.0), 0)?;
            let b = nn.param("bias", &[c], TensorRole::BnBias, Init::Constant(0.0), 0)?;
            let mut stat = |name, role, v| nn.state(name, &[c], role, Init::Constant(v));
            let rm = stat("running_mean", TensorRole::RunningMean, 0.0)?;
            let rv = stat("running_var", TensorRole::RunningVar, 1.0)?;
            nn.b.batch_norm(x, w, b, rm, rv, p)
        })
    }

    /// A fully connected layer as `path` over the last dimension of `x` (`[..., cin]` →
    /// `[..., cout]`), with a bias; `init` for the weight (the bias: zero, or PyTorch's
    /// default with [`Init::LinearDefault`]).
    pub fn linear(
        &mut self,
        path: &str,
        x: ValueId,
        cin: usize,
        cout: usize,
        init: Init,
    ) -> LayerResult {
        let bias_init = if init == Init::LinearDefault {
            Init::LinearDefault
        } else {
            Init::Constant(0.0)
        };
        self.linear_with(path, x, cin, cout, init, Some(bias_init))
    }

    /// [`linear`](Layers::linear) with the bias's initialiser given too; `None`: no bias
    /// (`nn.Linear(cin, cout, bias=False)`).
    pub fn linear_with(
        &mut self,
        path: &str,
        x: ValueId,
        cin: usize,
        cout: usize,
        init: Init,
        bias_init: Option<Init>,
    ) -> LayerResult {
        self.scope(path, |nn| {
            let w = nn.param("weight", &[cout, cin], TensorRole::FcWeight, init, cin)?;
            let bias = match bias_init {
                Some(i) => Some(nn.param("bias", &[cout], TensorRole::FcBias, i, cin)?),
                None => None,
            };
            let shape = nn.b.shape(x).to_vec();
            if shape.len() == 2 || shape.is_empty() {
                return nn.b.linear(x, w, bias);
            }
            let rows = shape[..shape.len() - 1].iter().product();
            let flat = nn.b.reshape(x, &[rows, cin])?;
            let y = nn.b.linear(flat, w, bias)?;
            let mut out = shape;
            *out.last_mut().expect("rank >= 1") = cout;
            nn.b.reshape(y, &out)
        })
    }

    /// A layer norm over the last dimension (`dim` values) as layer `path`.
    pub fn layer_norm(&mut self, path: &str, x: ValueId, dim: usize, eps: f64) -> LayerResult {
        self.scope(path, |nn| {
            let (w, b) = (nn.norm_weight(dim)?, nn.norm_bias(dim)?);
            nn.b.layer_norm(x, Some(w), Some(b), eps)
        })
    }

    /// An RMS norm over the last dimension (`dim` values) as layer `path`: PyTorch's
    /// `nn.RMSNorm(dim, eps)`, its `weight` initialised to ones; `eps: None` is PyTorch's
    /// default, the machine epsilon of `x`'s dtype.
    pub fn rms_norm(
        &mut self,
        path: &str,
        x: ValueId,
        dim: usize,
        eps: Option<f64>,
    ) -> LayerResult {
        self.scope(path, |nn| {
            let w = nn.norm_weight(dim)?;
            nn.b.rms_norm(x, Some(w), eps)
        })
    }

    /// A norm's `weight` of `dim` ones.
    fn norm_weight(&mut self, dim: usize) -> LayerResult {
        self.param(
            "weight",
            &[dim],
            TensorRole::BnWeight,
            Init::Constant(1.0),
            0,
        )
    }

    /// A norm's `bias` of `dim` zeros.
    fn norm_bias(&mut self, dim: usize) -> LayerResult {
        self.param("bias", &[dim], TensorRole::BnBias, Init::Constant(0.0), 0)
    }

    /// A layer norm over the channels of an `[N, C, H, W]` input as layer `path`
    /// (torchvision's `LayerNorm2d`, without its permutes to channels-last and back).
    pub fn layer_norm2d(&mut self, path: &str, x: ValueId, c: usize, eps: f64) -> LayerResult {
        self.scope(path, |nn| {
            let (w, b) = (nn.norm_weight(c)?, nn.norm_bias(c)?);
            nn.b.layer_norm2d(x, Some(w), Some(b), eps)
        })
    }
}

/// Fresh values for every entry of `specs` by its initialiser, drawn in spec order from
/// one generator seeded with `seed` (f32, CPU).
pub fn initial_state(specs: &[TensorSpec], seed: u64) -> Result<HashMap<String, Tensor>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = HashMap::new();
    for spec in specs {
        let n: usize = spec.shape.iter().product();
        let bad = |e: &dyn std::fmt::Display| ModelError::Config(format!("{}: {e}", spec.name));
        let fan_out =
            spec.shape.first().copied().unwrap_or(1) * spec.shape.iter().skip(2).product::<usize>();
        let fan_in = spec.shape.iter().skip(1).product::<usize>();
        let mut normal = |std: f64| -> Result<Vec<f32>> {
            let d = Normal::new(0.0, std as f32).map_err(|e| bad(&e))?;
            Ok((0..n).map(|_| d.sample(&mut rng)).collect())
        };
        let data: Vec<f32> = match spec.init {
            Init::KaimingNormalFanOut => normal((2.0 / fan_out as f64).sqrt())?,
            Init::KaimingNormalFanIn => normal((2.0 / fan_in as f64).sqrt())?,
            Init::Normal(std) => normal(std)?,
            Init::TruncNormal(std) => {
                let d = Normal::new(0.0, std as f32).map_err(|e| bad(&e))?;
                (0..n)
                    .map(|_| loop {
                        let v = d.sample(&mut rng);
                        if v.abs() <= 2.0 {
                            break v;
                        }
                    })
                    .collect()
            }
            Init::LinearDefault | Init::Uniform(_) => {
                let bound = match spec.init {
                    Init::Uniform(b) => b,
                    _ => 1.0 / (spec.fan_in.max(1) as f64).sqrt(),
                } as f32;
                let d = Uniform::new_inclusive(-bound, bound).map_err(|e| bad(&e))?;
                (0..n).map(|_| d.sample(&mut rng)).collect()
            }
            Init::Constant(v) => vec![v as f32; n],
        };
        out.insert(
            spec.name.clone(),
            Tensor::from_vec(data, spec.shape.as_slice(), &Device::Cpu)?,
        );
    }
    Ok(out)
}
