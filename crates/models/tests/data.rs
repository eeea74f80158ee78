//! The data sources: CIFAR-10 binary files (a tiny hand-made set), batch files, synthetic
//! images and the prefetching thread.

use candle_core::{DType, Device, Tensor};
use wick_models::checkpoint::write_safetensors;
use wick_models::data::{BatchFile, BatchSource, Cifar10, Prefetcher, SyntheticImages};

/// A fresh directory, removed when the guard drops (even when the test fails).
fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("wick-data-")
        .tempdir()
        .unwrap()
}

/// One CIFAR-10 record: label, then 3072 bytes (all `value`).
fn record(label: u8, value: u8) -> Vec<u8> {
    let mut r = vec![label];
    r.extend(std::iter::repeat_n(value, 3072));
    r
}

#[test]
fn cifar10_binaries_are_read_normalised_and_reshuffled() {
    let guard = dir();
    let d = guard.path();
    for i in 1..=5u8 {
        let bytes: Vec<u8> = (0..2u8).flat_map(|j| record((i + j) % 10, 255)).collect();
        std::fs::write(d.join(format!("data_batch_{i}.bin")), bytes).unwrap();
    }
    std::fs::write(d.join("test_batch.bin"), record(3, 0)).unwrap();
    let mut train = Cifar10::open(d, true, 4, 0).unwrap();
    assert_eq!(train.len(), 10);
    let mut seen = 0;
    for _ in 0..5 {
        let (images, labels) = train.next_batch().unwrap();
        assert_eq!(images.dims(), &[4, 3, 32, 32]);
        assert_eq!(labels.dtype(), DType::I64);
        // Every pixel is 255: (1 - mean) / std per channel.
        let red = images
            .narrow(1, 0, 1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(red
            .iter()
            .all(|v| (v - (1.0 - 0.4914) / 0.2470).abs() < 1e-5));
        seen += labels.dim(0).unwrap();
    }
    assert_eq!(seen, 20, "batches keep coming across epochs");
    let mut test = Cifar10::open(d, false, 1, 0).unwrap();
    assert_eq!(
        test.next_batch().unwrap().1.to_vec1::<i64>().unwrap(),
        vec![3]
    );

    std::fs::write(d.join("test_batch.bin"), &record(3, 0)[..100]).unwrap();
    let msg = Cifar10::open(d, false, 1, 0).unwrap_err().to_string();
    assert!(
        msg.contains("test_batch.bin") && msg.contains("3073-byte"),
        "{msg}"
    );
    std::fs::write(d.join("test_batch.bin"), record(12, 0)).unwrap();
    let msg = Cifar10::open(d, false, 1, 0).unwrap_err().to_string();
    assert!(msg.contains("label 12"), "{msg}");
}

#[test]
fn batch_files_need_images_and_integer_labels() {
    let guard = dir();
    let d = guard.path();
    let path = d.join("b.safetensors");
    let images = Tensor::zeros((2, 3, 8, 8), DType::F32, &Device::Cpu).unwrap();
    let labels = Tensor::new(&[1i64, 4], &Device::Cpu).unwrap();
    write_safetensors(
        &[
            ("images".to_string(), images.clone()),
            ("labels".to_string(), labels),
        ]
        .into(),
        &path,
    )
    .unwrap();
    let mut f = BatchFile::open(&path).unwrap();
    let (x, y) = f.next_batch().unwrap();
    assert_eq!(x.dims(), &[2, 3, 8, 8]);
    assert_eq!(y.to_vec1::<i64>().unwrap(), vec![1, 4]);
    let bad = Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap();
    write_safetensors(
        &[("images".to_string(), images), ("labels".to_string(), bad)].into(),
        &path,
    )
    .unwrap();
    let msg = BatchFile::open(&path).unwrap_err().to_string();
    assert!(
        msg.contains("labels") && msg.contains("b.safetensors"),
        "{msg}"
    );
}

#[test]
fn synthetic_batches_are_learnable_shapes_and_prefetched_in_order() {
    let src = SyntheticImages::new(4, 3, 16, 9).unwrap();
    let mut direct = SyntheticImages::new(4, 3, 16, 9).unwrap();
    let pre = Prefetcher::new(Box::new(src), 2);
    for _ in 0..3 {
        let (a, la) = pre.next_batch().unwrap();
        let (b, lb) = direct.next_batch().unwrap();
        assert_eq!(la.to_vec1::<i64>().unwrap(), lb.to_vec1::<i64>().unwrap());
        assert!(la
            .to_vec1::<i64>()
            .unwrap()
            .iter()
            .all(|l| (0..4).contains(l)));
        let diff = wick_ops::max_abs_diff(&a, &b).unwrap();
        assert_eq!(
            diff, 0.0,
            "the prefetching thread yields the same batches in order"
        );
    }
    assert!(SyntheticImages::new(0, 1, 16, 0).is_err());
}
