//! `train_resnet`'s resume fingerprint (`examples/train_resnet/fingerprint.rs`): its unit
//! tests run here, with the example's argument parser, since a test build of an example
//! would replace the example binary the command-line tests run.
#![allow(dead_code)]

#[path = "../examples/train_resnet/args.rs"]
mod args;
#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/train_resnet/fingerprint.rs"]
mod fingerprint;
