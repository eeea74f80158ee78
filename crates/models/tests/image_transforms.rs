//! Image decoding against PIL and the transforms against torchvision, on the images and
//! references of `fixtures/images` (scripts/make_image_fixtures.py).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::SeedableRng;
use wick_models::checkpoint::read_safetensors;
use wick_models::data::decode::RgbImage;
use wick_models::data::transforms::{CropBox, Normalize, RandomResizedCrop, ResamplePlan, Resize};
use wick_models::ImageSize;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/images")
}

fn references() -> HashMap<String, Tensor> {
    read_safetensors(&dir().join("reference.safetensors")).unwrap()
}

/// PIL's decoding of `key`, the transforms' input in the references.
fn pil_image(refs: &HashMap<String, Tensor>, key: &str) -> RgbImage {
    let t = &refs[&format!("{key}.rgb")];
    RgbImage {
        height: t.dim(0).unwrap(),
        width: t.dim(1).unwrap(),
        pixels: pil_rgb(refs, key),
    }
}

fn image(key: &str) -> RgbImage {
    // `rgb_jpg` is the file `rgb.jpg`.
    let (stem, ext) = key.rsplit_once('_').unwrap();
    RgbImage::open(&dir().join(format!("{stem}.{ext}"))).unwrap()
}

const TRANSFORMED: [&str; 3] = ["rgb_jpg", "grey_png", "palette_png"];
const IDENTITY: Normalize = Normalize {
    mean: [0.0; 3],
    std: [1.0; 3],
};

fn pil_rgb(refs: &HashMap<String, Tensor>, key: &str) -> Vec<u8> {
    refs[&format!("{key}.rgb")]
        .flatten_all()
        .unwrap()
        .to_vec1::<u8>()
        .unwrap()
}

/// The largest difference, in 8-bit levels, and the mean difference.
fn byte_diff(a: &[u8], b: &[u8]) -> (u8, f64) {
    assert_eq!(a.len(), b.len());
    let worst = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap();
    let sum: f64 = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y) as f64).sum();
    (worst, sum / a.len() as f64)
}

#[test]
fn pngs_decode_exactly_as_pil_converts_them_to_rgb() {
    let refs = references();
    for key in [
        "rgb_png",
        "rgba_png",
        "palette_png",
        "grey_png",
        "grey_alpha_png",
        "rgb16_png",
    ] {
        let img = image(key);
        assert_eq!((img.height, img.width), (30, 41), "{key}");
        assert_eq!(img.pixels, pil_rgb(&refs, key), "{key} differs from PIL");
    }
}

#[test]
fn sixteen_bit_grey_keeps_its_high_byte_where_pil_clips_to_white() {
    let refs = references();
    let raw = refs["grey16_png.raw"]
        .flatten_all()
        .unwrap()
        .to_vec1::<i32>()
        .unwrap();
    let img = image("grey16_png");
    let expected: Vec<u8> = raw.iter().flat_map(|&v| [(v >> 8) as u8; 3]).collect();
    assert_eq!(img.pixels, expected);
    assert!(
        pil_rgb(&refs, "grey16_png").iter().all(|&v| v == 255),
        "PIL clips"
    );
}

#[test]
fn jpegs_decode_close_to_pil() {
    // libjpeg-turbo (PIL) and zune-jpeg round their inverse DCTs differently (a level or
    // two), and upsample subsampled chroma (4:2:0) with different filters (up to ~10
    // levels at sharp colour edges, well under one on average).
    let refs = references();
    for (key, worst_allowed, mean_allowed) in [
        ("rgb444_jpg", 2, 0.1),
        ("grey_jpg", 1, 0.1),
        ("cmyk_jpg", 2, 0.1),
        ("rgb_jpg", 12, 1.0),
        ("progressive_jpg", 12, 1.0),
    ] {
        let (worst, mean) = byte_diff(&image(key).pixels, &pil_rgb(&refs, key));
        println!("{key}: worst {worst} levels, mean {mean:.3}");
        assert!(worst <= worst_allowed, "{key}: {worst} levels from PIL");
        assert!(
            mean <= mean_allowed,
            "{key}: {mean} levels from PIL on average"
        );
    }
}

#[test]
fn corrupt_truncated_and_foreign_files_are_errors_naming_the_file() {
    let jpeg = std::fs::read(dir().join("rgb.jpg")).unwrap();
    let png = std::fs::read(dir().join("rgb.png")).unwrap();
    let name = Path::new("photos/cat/0001.jpg");
    for (what, bytes) in [
        ("truncated JPEG", jpeg[..jpeg.len() / 2].to_vec()),
        ("truncated PNG", png[..png.len() / 2].to_vec()),
        ("JPEG header only", jpeg[..20].to_vec()),
        ("text", b"hello, not an image".to_vec()),
        ("empty", Vec::new()),
    ] {
        let e = RgbImage::decode(&bytes, name).expect_err(what).to_string();
        assert!(e.contains("photos/cat/0001.jpg"), "{what}: {e}");
        println!("{what}: {e}");
    }
    // A corrupted PNG chunk (CRC mismatch) is refused too.
    let mut bad = png.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0xFF;
    assert!(RgbImage::decode(&bad, name).is_err());
}

fn assert_close(got: &[f32], want: &Tensor, what: &str) {
    let got = Tensor::new(got, &candle_core::Device::Cpu).unwrap();
    // NaN on either side makes the difference NaN, which fails the bound.
    let worst = wick_ops::max_abs_diff(&got, &want.flatten_all().unwrap())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(worst < 2e-6, "{what}: {worst} from torchvision");
}

fn run(img: &RgbImage, plan: &ResamplePlan, normalize: &Normalize) -> Vec<f32> {
    let mut out = vec![0f32; 3 * plan.size().pixels()];
    plan.apply(img, false, normalize, &mut out, &mut Vec::new());
    out
}

#[test]
fn antialiased_resize_matches_torchvision_up_and_down() {
    let refs = references();
    for key in TRANSFORMED {
        let img = pil_image(&refs, key);
        for (h, w) in [(12, 16), (7, 9), (45, 60), (30, 20)] {
            let size = ImageSize::new(w, h);
            let plan = ResamplePlan::resize_then_center_crop(&img, size, size);
            let got = run(&img, &plan, &IDENTITY);
            assert_close(&got, &refs[&format!("resize.{key}.{h}x{w}")], key);
        }
        let short = Resize::ShorterSide(20).output_size(img.height, img.width);
        assert_eq!(short, ImageSize::new(27, 20), "torchvision's truncation");
        let plan = ResamplePlan::resize_then_center_crop(&img, short, short);
        assert_close(
            &run(&img, &plan, &IDENTITY),
            &refs[&format!("resize_short.{key}")],
            key,
        );
    }
}

#[test]
fn center_crop_and_resized_crop_match_torchvision() {
    let refs = references();
    let meta_boxes = [
        (0, 0, 30, 41),
        (3, 5, 20, 17),
        (10, 2, 7, 30),
        (0, 20, 30, 21),
    ];
    for key in TRANSFORMED {
        let img = pil_image(&refs, key);
        let full = ImageSize::new(img.width, img.height);
        for (crop, name) in [((16, 13), "center_crop"), ((44, 34), "center_crop_big")] {
            let plan =
                ResamplePlan::resize_then_center_crop(&img, full, ImageSize::new(crop.0, crop.1));
            assert_close(
                &run(&img, &plan, &IDENTITY),
                &refs[&format!("{name}.{key}")],
                name,
            );
        }
        for (k, (top, left, height, width)) in meta_boxes.into_iter().enumerate() {
            let bx = CropBox {
                top,
                left,
                height,
                width,
            };
            let plan = ResamplePlan::resized_crop(&img, bx, ImageSize::new(14, 12));
            assert_close(
                &run(&img, &plan, &IDENTITY),
                &refs[&format!("resized_crop.{key}.{k}")],
                "resized_crop",
            );
        }
        let plan = ResamplePlan::resize_then_center_crop(&img, full, full);
        assert_close(
            &run(&img, &plan, &Normalize::IMAGENET),
            &refs[&format!("normalize.{key}")],
            "normalize",
        );
    }
}

#[test]
fn a_flip_mirrors_each_row() {
    let img = image("rgb_png");
    let plan = ResamplePlan::resized_crop(
        &img,
        CropBox {
            top: 2,
            left: 3,
            height: 20,
            width: 30,
        },
        ImageSize::new(11, 9),
    );
    let plain = run(&img, &plan, &IDENTITY);
    let mut flipped = vec![0f32; plain.len()];
    plan.apply(&img, true, &IDENTITY, &mut flipped, &mut Vec::new());
    for row in 0..3 * 9 {
        let (a, b) = (&plain[row * 11..][..11], &flipped[row * 11..][..11]);
        assert!(a.iter().eq(b.iter().rev()), "row {row}");
    }
}

#[test]
fn random_resized_crops_stay_inside_with_torchvisions_area_and_aspect() {
    let t = RandomResizedCrop::new(ImageSize::square(8));
    let mut rng = StdRng::seed_from_u64(3);
    for (h, w) in [(30, 41), (500, 375), (7, 300), (300, 7), (1, 1)] {
        for _ in 0..200 {
            let b = t.get_params(h, w, &mut rng);
            assert!(b.top >= 0 && b.left >= 0, "{b:?}");
            assert!(
                b.top as usize + b.height <= h && b.left as usize + b.width <= w,
                "{b:?}"
            );
            assert!(b.height > 0 && b.width > 0);
        }
    }
    // A very wide image has no crop of an allowed aspect among ten draws: torchvision's
    // fallback is the central crop of the widest allowed aspect (4/3).
    let b = t.get_params(7, 300, &mut rng);
    assert_eq!(
        b,
        CropBox {
            top: 0,
            left: 145,
            height: 7,
            width: 9
        }
    );
    // The mean area share on a square image: torchvision's is 0.4767 (20,000 draws of
    // `RandomResizedCrop.get_params` on 400x400; under scale's 0.54 because large crops of
    // a skewed aspect do not fit and are drawn again).
    let areas: Vec<f64> = (0..2000)
        .map(|_| {
            let b = t.get_params(400, 400, &mut rng);
            (b.height * b.width) as f64 / 160_000.0
        })
        .collect();
    let mean = areas.iter().sum::<f64>() / areas.len() as f64;
    assert!((mean - 0.4767).abs() < 0.015, "mean area share {mean}");
}
