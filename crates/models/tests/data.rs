//! The data sources: CIFAR-10 binary files (a tiny hand-made set), batch files, synthetic
//! images and the prefetching thread.

mod common;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_models::checkpoint::write_safetensors;
use wick_models::data::{BatchFile, BatchSource, Cifar10, Prefetcher, SyntheticImages};
use wick_ops::compare::host_values;

/// A fresh directory, removed when the guard drops (even when the test fails).
fn dir() -> tempfile::TempDir {
    common::scratch("wick-data-")
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
    assert_mentions(&msg, &["test_batch.bin", "3073-byte"]);
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
    assert_mentions(&msg, &["labels", "b.safetensors"]);
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

/// A CIFAR-format folder of `n` test images and `n` training images per file, image `i`
/// of a file filled with the value `i` in every pixel, labelled `i % 10`.
fn cifar_folder(n: usize) -> tempfile::TempDir {
    let dir = common::scratch("wick-cifar-");
    let file = |name: &str| {
        let mut bytes = Vec::new();
        for i in 0..n {
            bytes.push((i % 10) as u8);
            bytes.extend(std::iter::repeat_n(i as u8, 3 * 32 * 32));
        }
        std::fs::write(dir.path().join(name), bytes).unwrap();
    };
    for b in 1..=5 {
        file(&format!("data_batch_{b}.bin"));
    }
    file("test_batch.bin");
    dir
}

/// The image index a normalised red pixel value came from.
fn index_of(v: f32) -> usize {
    ((v * 0.2470 + 0.4914) * 255.0).round() as usize
}

#[test]
fn evaluation_visits_every_test_image_once_in_order_with_the_last_batch_partial() {
    let dir = cifar_folder(23);
    let test = Cifar10::open(dir.path(), false, 8, 0).unwrap();
    assert_eq!(test.batches_in_order(8), 3);
    let mut seen = Vec::new();
    for b in 0..3 {
        let (images, labels, real) = test.batch_in_order(b, 8).unwrap();
        assert_eq!(
            images.dims(),
            [8, 3, 32, 32],
            "padded to the session's batch"
        );
        assert_eq!(labels.dims(), [real]);
        let red: Vec<f32> = images.flatten_all().unwrap().to_vec1().unwrap();
        let labels: Vec<i64> = labels.to_vec1().unwrap();
        for (k, label) in labels.iter().enumerate() {
            let i = index_of(red[k * 3 * 1024]);
            assert_eq!(*label as usize, i % 10);
            seen.push(i);
        }
    }
    assert_eq!(
        seen,
        (0..23).collect::<Vec<_>>(),
        "every image once, in file order"
    );
    assert!(
        test.batch_in_order(3, 8).is_err(),
        "past the end is an error"
    );
}

#[test]
fn augmentation_keeps_labels_and_shapes_and_moves_pixels_within_the_padding() {
    let dir = cifar_folder(40);
    let mut train = Cifar10::open(dir.path(), true, 16, 7)
        .unwrap()
        .with_augmentation(true);
    let (mut shifted, mut flipped_or_cropped) = (0, 0);
    for _ in 0..5 {
        let (images, labels) = train.next_batch().unwrap();
        assert_eq!(images.dims(), [16, 3, 32, 32]);
        let px: Vec<f32> = images.flatten_all().unwrap().to_vec1().unwrap();
        let labels: Vec<i64> = labels.to_vec1().unwrap();
        for (k, label) in labels.iter().enumerate() {
            let red = &px[k * 3 * 1024..k * 3 * 1024 + 1024];
            // Every pixel is the image's own value or the zero padding.
            let values: Vec<usize> = red
                .iter()
                .filter(|v| **v != 0.0)
                .map(|v| index_of(*v))
                .collect();
            assert!(
                values.len() >= 28 * 28,
                "a crop keeps at least 28x28 of the image"
            );
            let i = values[0];
            assert!(values.iter().all(|v| *v == i), "one image per slot");
            assert_eq!(*label as usize, i % 10, "the label follows its image");
            if values.len() < 1024 {
                shifted += 1;
            }
            flipped_or_cropped += 1;
        }
    }
    assert!(
        shifted > 40,
        "most crops move the image ({shifted} of {flipped_or_cropped})"
    );
}

/// Resuming needs batch `k` exactly as an uninterrupted stream made it: order and
/// augmentation (CIFAR, across an epoch boundary) and synthetic images alike.
#[test]
fn a_source_seeked_to_batch_k_continues_the_uninterrupted_stream_exactly() {
    let dir = cifar_folder(20);
    let values = |b: wick_models::data::Batch| -> (Vec<f32>, Vec<i64>) {
        (
            b.0.flatten_all().unwrap().to_vec1().unwrap(),
            b.1.to_vec1().unwrap(),
        )
    };
    let sources: Vec<Box<dyn Fn() -> Box<dyn BatchSource>>> = vec![
        Box::new(|| {
            Box::new(
                Cifar10::open(dir.path(), true, 16, 3)
                    .unwrap()
                    .with_augmentation(true),
            )
        }),
        Box::new(|| Box::new(SyntheticImages::new(4, 3, 8, 5).unwrap())),
    ];
    for make in &sources {
        let mut whole = make();
        let stream: Vec<_> = (0..14)
            .map(|_| values(whole.next_batch().unwrap()))
            .collect();
        let mut resumed = make();
        resumed.seek(9).unwrap();
        for expected in &stream[9..] {
            assert_eq!(&values(resumed.next_batch().unwrap()), expected);
        }
    }
}

#[test]
fn several_loader_threads_yield_the_one_thread_stream_in_order() {
    let images = |s: &mut dyn BatchSource| host_values(&s.next_batch().unwrap().0).unwrap();
    let stream: Vec<Vec<f64>> = {
        let mut s = SyntheticImages::new(3, 2, 8, 11).unwrap();
        s.seek(5).unwrap();
        (0..9).map(|_| images(&mut s)).collect()
    };
    let make: wick_models::data::SourceFactory =
        Box::new(|| Ok(Box::new(SyntheticImages::new(3, 2, 8, 11)?) as Box<dyn BatchSource>));
    let p = Prefetcher::ordered(make, 3, 2, 5);
    for (k, expected) in stream.iter().enumerate() {
        let got = host_values(&p.next_batch().unwrap().0).unwrap();
        assert_eq!(&got, expected, "batch {}", 5 + k);
    }
}

/// Issue #31: the crop and the flip can be chosen apart (flips are wrong for digits and
/// text). Images whose red channel rises from left to right show both: a crop shifts it
/// into the zero padding, a flip makes it fall. The labels and order are the same in
/// every mode.
#[test]
fn crop_and_flip_are_chosen_apart() {
    let dir = common::scratch("wick-cifar-ramp-");
    let mut bytes = Vec::new();
    for i in 0..32u8 {
        bytes.push(i % 10);
        for _channel in 0..3 {
            for _y in 0..32 {
                bytes.extend((0..32u8).map(|x| 100 + x));
            }
        }
    }
    for b in 1..=5 {
        std::fs::write(dir.path().join(format!("data_batch_{b}.bin")), &bytes).unwrap();
    }
    // Per image: (shifted into the padding, mirrored), and the labels.
    let look = |crop: bool, flip: bool| {
        let mut train = Cifar10::open(dir.path(), true, 16, 3)
            .unwrap()
            .with_augmentation_parts(crop, flip);
        let (mut shifted, mut mirrored, mut labels) = (0, 0, Vec::new());
        for _ in 0..4 {
            let (images, l) = train.next_batch().unwrap();
            labels.extend(l.to_vec1::<i64>().unwrap());
            let px: Vec<f32> = images.flatten_all().unwrap().to_vec1().unwrap();
            for k in 0..16 {
                let row: Vec<f32> = px[k * 3 * 1024 + 16 * 32..k * 3 * 1024 + 17 * 32]
                    .iter()
                    .copied()
                    .filter(|v| *v != 0.0)
                    .collect();
                shifted += usize::from(
                    row.len() < 32 || px[k * 3 * 1024..k * 3 * 1024 + 1024].contains(&0.0),
                );
                mirrored += usize::from(row.windows(2).any(|w| w[1] < w[0]));
            }
        }
        (shifted, mirrored, labels)
    };
    let (s, m, both) = look(true, true);
    assert!(
        s > 20 && m > 15,
        "crop and flip: {s} shifted, {m} mirrored of 64"
    );
    let (s, m, crop) = look(true, false);
    assert!(s > 20 && m == 0, "crop only: {s} shifted, {m} mirrored");
    let (s, m, flip) = look(false, true);
    assert!(s == 0 && m > 15, "flip only: {s} shifted, {m} mirrored");
    let (s, m, none) = look(false, false);
    assert_eq!((s, m), (0, 0));
    assert!(
        both == crop && crop == flip && flip == none,
        "one order in every mode"
    );
}

#[test]
fn text_becomes_bytes_or_characters_with_a_held_out_tail() {
    use wick_models::data::text::{ByteTokenizer, CharTokenizer, TextCorpus, Tokenizer};
    let guard = dir();
    let path = guard.path().join("t.txt");
    let text = "héllo wörld, ".repeat(20);
    std::fs::write(&path, &text).unwrap();
    let chars = CharTokenizer::of_text(&text);
    // Sorted distinct characters: ' ', ',', 'd', 'h', 'l', 'o', 'r', 'w', 'é', 'ö'.
    assert_eq!(chars.vocab_size(), 10);
    let ids = chars.encode(text.as_bytes()).unwrap();
    assert_eq!(ids.len(), text.chars().count());
    assert_eq!(chars.decode(&ids), text);
    assert!(chars.encode("x".as_bytes()).unwrap_err().contains("'x'"));
    let c = TextCorpus::open(&path, &chars, 10, 8).unwrap();
    assert_eq!(c.train.len(), 260 * 90 / 100);
    assert_eq!(c.train.len() + c.held_out.len(), 260);
    assert_eq!(&c.held_out[..], &ids[234..]);
    // Bytes: é and ö are two bytes each.
    let b = TextCorpus::open(&path, &ByteTokenizer, 10, 8).unwrap();
    assert_eq!(b.train.len() + b.held_out.len(), text.len());
    // Windows are a function of (seed, step) and come from the training part.
    let w = c.windows(4, 8, 3, 7).unwrap();
    assert_eq!(w.dims(), &[4, 8]);
    assert_eq!(
        w.to_vec2::<i64>().unwrap(),
        c.windows(4, 8, 3, 7).unwrap().to_vec2::<i64>().unwrap()
    );
    assert_ne!(
        w.to_vec2::<i64>().unwrap(),
        c.windows(4, 8, 3, 8).unwrap().to_vec2::<i64>().unwrap()
    );
    assert_eq!(c.held_out_windows(8, 16).unwrap().len(), 26 / 8);
    // Not UTF-8, too short: errors naming the file.
    std::fs::write(&path, [b'a', 0xFF, b'b']).unwrap();
    let e = TextCorpus::open(&path, &chars, 10, 1)
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["t.txt", "not UTF-8 at byte 1"]);
    let e = TextCorpus::open(&path, &ByteTokenizer, 10, 8)
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["t.txt", "shorter context"]);
}

#[test]
fn a_batch_file_with_a_non_finite_pixel_is_refused_naming_the_file() {
    let guard = dir();
    let path = guard.path().join("nan_batch.safetensors");
    let mut v = vec![0.5f32; 2 * 3 * 4 * 4];
    v[3 * 16 + 5] = f32::NAN;
    let images = Tensor::from_vec(v, (2, 3, 4, 4), &Device::Cpu).unwrap();
    let labels = Tensor::new(&[1i64, 0], &Device::Cpu).unwrap();
    let state = [
        ("images".to_string(), images),
        ("labels".to_string(), labels),
    ];
    write_safetensors(&state.into_iter().collect(), &path).unwrap();
    let e = BatchFile::open(&path).unwrap_err().to_string();
    assert_mentions(&e, &["nan_batch.safetensors", "NaN", "image 1"]);
}

#[test]
fn a_cifar_test_set_smaller_than_a_batch_is_evaluated_and_an_empty_one_named() {
    let guard = dir();
    let d = guard.path();
    for i in 1..=5u8 {
        std::fs::write(d.join(format!("data_batch_{i}.bin")), record(i % 10, 9)).unwrap();
    }
    std::fs::write(d.join("test_batch.bin"), record(3, 0)).unwrap();
    // One test image, batches of 4: evaluation pads the batch.
    let test = Cifar10::open(d, false, 4, 0).unwrap();
    let (_, labels, real) = test.batch_in_order(0, 4).unwrap();
    assert_eq!((real, labels.dims()), (1, &[1][..]));
    // Five training images cannot fill a batch of 8: the files are named.
    let e = Cifar10::open(d, true, 8, 0).unwrap_err().to_string();
    assert_mentions(&e, &["data_batch_1.bin", "one training batch of 8"]);
}
