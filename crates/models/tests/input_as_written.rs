//! Issue #31: input read as written. A safetensors header that declares a name twice,
//! 8-bit images, float labels, a `num_batches_tracked` that is not a scalar count, a
//! weight stored as an integer, a FIFO in a data folder: each is refused with what is
//! wrong and what to do, never read as something else.

mod common;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_models::checkpoint::write_safetensors;
use wick_models::data::{BatchFile, Cifar10};
use wick_models::init::torchvision_init;
use wick_models::{Depth, ResNetConfig, Session, Stem};

/// A safetensors file with `entries` (name, f32 values) in its header, in order,
/// duplicates included, each pointing at its own bytes.
fn raw_safetensors(path: &Path, entries: &[(&str, &[f32])]) {
    let (mut header, mut data) = (Vec::new(), Vec::new());
    for (name, values) in entries {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.push(format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{start},{}]}}",
            values.len(),
            data.len()
        ));
    }
    let mut json = format!("{{{}}}", header.join(",")).into_bytes();
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend(json);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

fn err_of<T>(r: wick_models::Result<T>) -> String {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn input_that_would_be_read_as_something_else_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let mut cases = 0;

    // A header that declares `images` twice: not "the last one wins".
    let dup = p.join("dup.safetensors");
    raw_safetensors(&dup, &[("images", &[1.0; 4]), ("images", &[2.0; 4])]);
    let e = err_of(BatchFile::open(&dup));
    assert!(e.contains("declares `images` twice"), "{e}");
    cases += 1;

    // 8-bit images would become 0-255 floats: refused with what to do.
    let images = Tensor::zeros((2, 3, 4, 4), DType::U8, &Device::Cpu).unwrap();
    let labels = Tensor::new(&[1i64, 2], &Device::Cpu).unwrap();
    let batch = |images: &Tensor, labels: &Tensor| {
        let path = p.join("b.safetensors");
        let t = [
            ("images".to_string(), images.clone()),
            ("labels".to_string(), labels.clone()),
        ];
        write_safetensors(&t.into_iter().collect(), &path).unwrap();
        BatchFile::open(&path)
    };
    let e = err_of(batch(&images, &labels));
    assert_mentions(&e, &["`images` are stored as U8", "divide by 255"]);
    cases += 1;
    // Integer labels of any width are class indices; float labels are refused clearly.
    let images = images.to_dtype(DType::F32).unwrap();
    for dtype in [DType::U8, DType::U32, DType::I32, DType::I64] {
        assert!(
            batch(&images, &labels.to_dtype(dtype).unwrap()).is_ok(),
            "{dtype:?}"
        );
        cases += 1;
    }
    let e = err_of(batch(&images, &labels.to_dtype(DType::F32).unwrap()));
    assert_mentions(&e, &["integer class indices", "got F32"]);
    cases += 1;
    let e = err_of(batch(
        &images,
        &Tensor::new(&[1i64, 2, 3], &Device::Cpu).unwrap(),
    ));
    assert!(e.contains("shape [2] (one per image), got [3]"), "{e}");
    cases += 1;

    // Checkpoint entries must have torchvision's shape and kind, scalars included.
    let cfg = ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap();
    let load = |name: &str, t: Tensor| {
        let mut w = torchvision_init(cfg, 0).unwrap();
        w.insert(name.into(), t);
        let path = p.join("w.safetensors");
        write_safetensors(&w, &path).unwrap();
        let mut s = Session::inference(cfg, 1, 16, &Device::Cpu).unwrap();
        s.load_checkpoint(&path)
    };
    let e = err_of(load(
        "bn1.num_batches_tracked",
        Tensor::new(&[1i64, 2, 3], &Device::Cpu).unwrap(),
    ));
    assert_mentions(&e, &["bn1.num_batches_tracked", "[3]"]);
    let e = err_of(load(
        "bn1.num_batches_tracked",
        Tensor::new(2.5f32, &Device::Cpu).unwrap(),
    ));
    assert!(e.contains("a count of batches is an integer"), "{e}");
    assert!(load(
        "bn1.num_batches_tracked",
        Tensor::new(7i64, &Device::Cpu).unwrap()
    )
    .is_ok());
    let e = err_of(load(
        "conv1.weight",
        Tensor::zeros((64, 3, 3, 3), DType::U8, &Device::Cpu).unwrap(),
    ));
    assert_mentions(&e, &["`conv1.weight` is stored as U8", "convert it"]);
    cases += 4;

    // A FIFO where a CIFAR file should be: an error at once, not a hang.
    let cifar = p.join("cifar");
    std::fs::create_dir(&cifar).unwrap();
    let fifo = cifar.join("data_batch_1.bin");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let e = err_of(Cifar10::open(&cifar, true, 4, 0));
    assert_mentions(&e, &["data_batch_1.bin", "not a regular file"]);
    assert!(started.elapsed().as_secs() < 5);
    cases += 1;
    println!("input read as written: {cases} cases");
}
