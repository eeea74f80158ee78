//! Writes a small ImageFolder of generated JPEG and PNG images: `OUT/train/<class>/` and
//! `OUT/val/<class>/`, one class per shape (circle, square, cross, stripes, ...), each
//! image a coloured shape at a random place and size over a noisy background, of random
//! size around --size. Most are colour JPEGs; some are grey JPEGs, RGB PNGs and RGBA PNGs,
//! as real datasets mix them. Nothing is downloaded.
//!
//!   cargo run --release --example make_image_folder -- --out shapes
//!   cargo run --release --example train_resnet -- --data-dir shapes --image-size 64 --steps 100

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wick::models::ImageSize;

#[derive(Parser)]
#[command(about = "Write a small ImageFolder of generated JPEG and PNG images")]
struct Args {
    /// The folder to create (it must not exist yet).
    #[arg(long)]
    out: PathBuf,
    /// Classes (shapes), at most 6.
    #[arg(long, default_value_t = 4)]
    classes: usize,
    /// Training images per class.
    #[arg(long, default_value_t = 48)]
    train_per_class: usize,
    /// Validation images per class.
    #[arg(long, default_value_t = 12)]
    val_per_class: usize,
    /// Typical image size, WIDTHxHEIGHT (each image varies by up to a quarter).
    #[arg(long, default_value = "96x80")]
    size: ImageSize,
    /// JPEG quality, 1-100.
    #[arg(long, default_value_t = 90)]
    quality: u8,
    /// Colour JPEGs only (for throughput measurements, as ImageNet is).
    #[arg(long)]
    jpeg_only: bool,
    /// Seed of the images.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

const SHAPES: [&str; 6] = ["circle", "cross", "diamond", "ring", "square", "stripes"];

fn main() -> Result<()> {
    let a = Args::parse();
    if a.classes == 0 || a.classes > SHAPES.len() {
        bail!("--classes {}: give 1 to {}", a.classes, SHAPES.len());
    }
    if a.size.width < 16 || a.size.height < 16 || a.size.width > 4096 || a.size.height > 4096 {
        bail!("--size {}: give 16x16 to 4096x4096", a.size);
    }
    if !(1..=100).contains(&a.quality) {
        bail!("--quality {}: give 1 to 100", a.quality);
    }
    if a.out.exists() {
        bail!(
            "--out {}: already exists; give a new folder",
            a.out.display()
        );
    }
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut written = 0;
    for (split, per_class) in [("train", a.train_per_class), ("val", a.val_per_class)] {
        if per_class == 0 {
            continue;
        }
        for (class, shape) in SHAPES.iter().take(a.classes).enumerate() {
            let dir = a.out.join(split).join(shape);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for i in 0..per_class {
                let w = vary(&mut rng, a.size.width);
                let h = vary(&mut rng, a.size.height);
                let rgb = draw(&mut rng, class, w, h);
                let kind = if a.jpeg_only {
                    0
                } else {
                    rng.random_range(0..10)
                };
                write_image(kind, &dir, i, &rgb, w, h, a.quality)?;
                written += 1;
            }
        }
    }
    println!(
        "{written} images of {} classes in {} (train/, and val/ when --val-per-class is not 0)",
        a.classes,
        a.out.display()
    );
    Ok(())
}

/// `side` changed by up to a quarter either way.
fn vary(rng: &mut StdRng, side: usize) -> usize {
    let q = side / 4;
    rng.random_range(side - q..=side + q)
}

/// A shape of `class` in its colour over a noisy background, `w` x `h` RGB bytes.
fn draw(rng: &mut StdRng, class: usize, w: usize, h: usize) -> Vec<u8> {
    let base: [f64; 3] = [
        rng.random_range(40.0..110.0),
        rng.random_range(40.0..110.0),
        rng.random_range(40.0..110.0),
    ];
    let colour = [
        [230.0, 60.0, 50.0],
        [60.0, 200.0, 80.0],
        [70.0, 90.0, 230.0],
        [230.0, 200.0, 40.0],
        [200.0, 70.0, 210.0],
        [60.0, 210.0, 220.0],
    ][class];
    let r = rng.random_range(0.2..0.4) * w.min(h) as f64;
    let (cx, cy) = (
        rng.random_range(r..w as f64 - r),
        rng.random_range(r..h as f64 - r),
    );
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let (dx, dy) = (x as f64 - cx, y as f64 - cy);
            let inside = match class {
                0 => dx.hypot(dy) < r,
                1 => (dx.abs() < r / 4.0 && dy.abs() < r) || (dy.abs() < r / 4.0 && dx.abs() < r),
                2 => dx.abs() + dy.abs() < r,
                3 => (dx.hypot(dy) - r * 0.7).abs() < r * 0.2,
                4 => dx.abs() < r * 0.8 && dy.abs() < r * 0.8,
                _ => dx.abs() < r && dy.abs() < r && ((y / 4) % 2 == 0),
            };
            for c in 0..3 {
                let v = if inside { colour[c] } else { base[c] } + rng.random_range(-20.0..20.0);
                out.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

/// Writes image `i` as `kind` says: 0-5 colour JPEG, 6 grey JPEG, 7-8 RGB PNG, 9 RGBA PNG.
fn write_image(
    kind: u32,
    dir: &Path,
    i: usize,
    rgb: &[u8],
    w: usize,
    h: usize,
    quality: u8,
) -> Result<()> {
    let (w16, h16) = (w as u16, h as u16);
    match kind {
        0..=6 => {
            let path = dir.join(format!("{i:04}.jpg"));
            let encoder = jpeg_encoder::Encoder::new_file(&path, quality)?;
            if kind == 6 {
                let grey: Vec<u8> = rgb
                    .chunks_exact(3)
                    .map(|p| {
                        ((p[0] as u32 * 299 + p[1] as u32 * 587 + p[2] as u32 * 114) / 1000) as u8
                    })
                    .collect();
                encoder.encode(&grey, w16, h16, jpeg_encoder::ColorType::Luma)?;
            } else {
                encoder.encode(rgb, w16, h16, jpeg_encoder::ColorType::Rgb)?;
            }
        }
        _ => {
            let path = dir.join(format!("{i:04}.png"));
            let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
            let mut encoder = png::Encoder::new(file, w as u32, h as u32);
            encoder.set_depth(png::BitDepth::Eight);
            if kind == 9 {
                encoder.set_color(png::ColorType::Rgba);
                let rgba: Vec<u8> = rgb
                    .chunks_exact(3)
                    .flat_map(|p| [p[0], p[1], p[2], 200])
                    .collect();
                encoder.write_header()?.write_image_data(&rgba)?;
            } else {
                encoder.set_color(png::ColorType::Rgb);
                encoder.write_header()?.write_image_data(rgb)?;
            }
        }
    }
    Ok(())
}
