//! Every model family, one file each, by torchvision's model names and `state_dict`
//! layout: resnet18 to resnet152, mobilenet_v2, mobilenet_v3_small/large, efficientnet_b0,
//! densenet121, convnext_tiny, vgg11_bn, vgg16_bn, vit_b_16, vit_b_32, vit_l_16, and
//! vit_ti_16 (torchvision's `VisionTransformer` at DeiT-Ti's sizes). Each file defines
//! one [`Architecture`](crate::model::Architecture) per name; [`crate::registry`] lists
//! them.

pub mod blocks;
pub mod convnext;
pub mod densenet;
pub mod efficientnet;
pub mod mobilenet;
pub mod resnet;
pub mod vgg;
pub mod vit;
