//! DenseNet-121 (Huang et al. 2017) as torchvision defines it (`densenet.py`): dense
//! blocks whose layers read the concatenation of every earlier feature map.

use wick_graph::ValueId;
use wick_ops::Pool2dParams;

use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers};

const GROWTH: usize = 32;
const BN_SIZE: usize = 4;
const BLOCKS: [usize; 4] = [6, 12, 24, 16];
const INIT_FEATURES: usize = 64;

/// DenseNet-121's forward pass of `x`; returns the logits.
pub fn densenet121(nn: &mut Layers, x: ValueId, cfg: &ModelConfig) -> wick_graph::Result<ValueId> {
    let conv = |cin, cout, k| Conv::new(cin, cout, k).init(Init::KaimingNormalFanIn);
    let mut h = nn.scope("features", |nn| {
        let h = nn.conv2d("conv0", x, conv(3, INIT_FEATURES, 7).stride(2).padding(3))?;
        let h = nn.batch_norm("norm0", h, INIT_FEATURES)?;
        let h = nn.scope("relu0", |nn| nn.builder().relu(h))?;
        nn.scope("pool0", |nn| {
            nn.builder().max_pool2d(h, Pool2dParams::new(3, 2, 1))
        })
    })?;
    let mut c = INIT_FEATURES;
    for (i, &layers) in BLOCKS.iter().enumerate() {
        h = nn.scope(&format!("features.denseblock{}", i + 1), |nn| {
            let mut features = vec![h];
            for l in 0..layers {
                let cin = c + l * GROWTH;
                let new = nn.scope(&format!("denselayer{}", l + 1), |nn| {
                    let cat = if features.len() == 1 {
                        features[0]
                    } else {
                        nn.builder().concat(&features, 1)?
                    };
                    let y = nn.batch_norm("norm1", cat, cin)?;
                    let y = nn.scope("relu1", |nn| nn.builder().relu(y))?;
                    let y = nn.conv2d("conv1", y, conv(cin, BN_SIZE * GROWTH, 1))?;
                    let y = nn.batch_norm("norm2", y, BN_SIZE * GROWTH)?;
                    let y = nn.scope("relu2", |nn| nn.builder().relu(y))?;
                    nn.conv2d("conv2", y, conv(BN_SIZE * GROWTH, GROWTH, 3).padding(1))
                })?;
                features.push(new);
            }
            nn.builder().concat(&features, 1)
        })?;
        c += layers * GROWTH;
        if i + 1 < BLOCKS.len() {
            h = nn.scope(&format!("features.transition{}", i + 1), |nn| {
                let y = nn.batch_norm("norm", h, c)?;
                let y = nn.scope("relu", |nn| nn.builder().relu(y))?;
                let y = nn.conv2d("conv", y, conv(c, c / 2, 1))?;
                nn.scope("pool", |nn| {
                    nn.builder().avg_pool2d(y, Pool2dParams::new(2, 2, 0))
                })
            })?;
            c /= 2;
        }
    }
    let h = nn.batch_norm("features.norm5", h, c)?;
    let h = nn.builder().relu(h)?;
    let h = nn.builder().global_avg_pool(h)?;
    let h = nn.builder().flatten(h)?;
    let bias = Init::Constant(0.0);
    nn.linear_with(
        "classifier",
        h,
        c,
        cfg.num_classes,
        Init::LinearDefault,
        Some(bias),
    )
}

/// `densenet121`.
pub const DENSENET121: Architecture = Architecture::new("densenet121", densenet121);
