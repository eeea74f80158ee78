//! torchvision's image transforms, with its names, parameters and semantics:
//! [`RandomResizedCrop`], [`Resize`], [`CenterCrop`], [`RandomHorizontalFlip`] and
//! [`Normalize`], composed as torchvision's ImageNet recipes compose them
//! ([`ImageTransform::train`], [`ImageTransform::eval`]).
//!
//! Resizing is antialiased bilinear interpolation, torchvision's tensor path
//! (`F.resize(t, size, antialias=True)`, PIL's filter). Crop, resize, flip, `ToTensor` and
//! normalisation run as one pass pair over the pixels ([`ResamplePlan`]): a horizontal
//! pass over the source rows the output needs, then a vertical pass that writes the
//! normalised float32 planes `[3, H, W]`.

use rand::Rng;

use super::decode::RgbImage;
use crate::image::ImageSize;

/// A crop in source pixels, torchvision's `(top, left, height, width)`. Parts outside the
/// image read as black (torchvision pads with zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropBox {
    /// First row (may be negative: padding above).
    pub top: i64,
    /// First column (may be negative).
    pub left: i64,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

/// One output pixel's source pixels along an axis: `weights[k]` for source `start + k`.
/// No weights: the output lies in padding.
#[derive(Debug, Clone, Default, PartialEq)]
struct Taps {
    start: usize,
    weights: Vec<f32>,
}

/// How every output index along one axis is made from the source.
#[derive(Debug, Clone, PartialEq)]
struct Axis(Vec<Taps>);

impl Axis {
    /// PyTorch's antialiased bilinear weights (`_compute_indices_weights_aa`) for
    /// resizing source indices `[from, from + len)` of a source of `source_len` to
    /// `out_len` outputs. Source indices outside the source are padding and weigh 0.
    fn resize(from: i64, len: usize, source_len: usize, out_len: usize) -> Axis {
        let scale = len as f64 / out_len as f64;
        let support = if scale >= 1.0 { scale } else { 1.0 };
        let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        let taps = (0..out_len)
            .map(|i| {
                let center = scale * (i as f64 + 0.5);
                // int64 truncation of non-negative values, as PyTorch's.
                let lo = ((center - support + 0.5).max(0.0)) as usize;
                let hi = ((center + support + 0.5) as usize).min(len);
                let mut w: Vec<f64> = (lo..hi)
                    .map(|j| {
                        let x = ((j as f64 - center + 0.5) * invscale).abs();
                        if x < 1.0 {
                            1.0 - x
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let total: f64 = w.iter().sum();
                if total > 0.0 {
                    w.iter_mut().for_each(|v| *v /= total);
                }
                // Back to the whole source's indices, dropping padding (weight 0).
                let mut start = None;
                let mut weights = Vec::new();
                for (k, v) in w.into_iter().enumerate() {
                    let s = from + (lo + k) as i64;
                    if s >= 0 && (s as usize) < source_len {
                        start.get_or_insert(s as usize);
                        weights.push(v as f32);
                    } else if start.is_some() {
                        break;
                    }
                }
                Taps {
                    start: start.unwrap_or(0),
                    weights,
                }
            })
            .collect();
        Axis(taps)
    }

    /// Outputs `[start, start + len)` of this axis; outside it, padding.
    fn window(self, start: i64, len: usize) -> Axis {
        Axis(
            (0..len as i64)
                .map(|i| {
                    usize::try_from(start + i)
                        .ok()
                        .and_then(|j| self.0.get(j).cloned())
                        .unwrap_or_default()
                })
                .collect(),
        )
    }

    /// The source indices any output reads: `[first, end)`.
    fn span(&self) -> (usize, usize) {
        let mut span = (usize::MAX, 0);
        for t in self.0.iter().filter(|t| !t.weights.is_empty()) {
            span.0 = span.0.min(t.start);
            span.1 = span.1.max(t.start + t.weights.len());
        }
        if span.0 > span.1 {
            (0, 0)
        } else {
            span
        }
    }
}

/// Where every output pixel comes from: crop, resize and padding folded together.
#[derive(Debug, Clone, PartialEq)]
pub struct ResamplePlan {
    rows: Axis,
    cols: Axis,
}

impl ResamplePlan {
    /// torchvision's `F.resized_crop(img, top, left, height, width, size)`: the crop
    /// resized to `size`.
    pub fn resized_crop(image: &RgbImage, crop: CropBox, size: ImageSize) -> ResamplePlan {
        ResamplePlan {
            rows: Axis::resize(crop.top, crop.height, image.height, size.height),
            cols: Axis::resize(crop.left, crop.width, image.width, size.width),
        }
    }

    /// `F.resize(img, resized)` then `F.center_crop(img, crop)` (torchvision's rounding of
    /// the offsets; padding where the crop is larger).
    pub fn resize_then_center_crop(
        image: &RgbImage,
        resized: ImageSize,
        crop: ImageSize,
    ) -> ResamplePlan {
        // torchvision pads a smaller image by (crop - size) // 2 before, then rounds.
        let offset = |from: usize, to: usize| {
            if to > from {
                -(((to - from) / 2) as i64)
            } else {
                round_half_even((from - to) as f64 / 2.0)
            }
        };
        ResamplePlan {
            rows: Axis::resize(0, image.height, image.height, resized.height)
                .window(offset(resized.height, crop.height), crop.height),
            cols: Axis::resize(0, image.width, image.width, resized.width)
                .window(offset(resized.width, crop.width), crop.width),
        }
    }

    /// The output's size.
    pub fn size(&self) -> ImageSize {
        ImageSize::new(self.cols.0.len(), self.rows.0.len())
    }

    /// Resamples `image`, mirrored left to right when `flip`, into `out` as float32 planes
    /// `[3, H, W]` normalised by `normalize` (`ToTensor` then `Normalize`). `scratch` is
    /// reused between calls.
    pub fn apply(
        &self,
        image: &RgbImage,
        flip: bool,
        normalize: &Normalize,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let (h, w) = (self.rows.0.len(), self.cols.0.len());
        assert_eq!(out.len(), 3 * h * w, "the output holds [3, {h}, {w}]");
        let (first, end) = self.rows.span();
        // Horizontal pass: the needed source rows, resampled to the output's columns
        // (pixel-interleaved, in 0..=255).
        scratch.clear();
        scratch.resize((end - first) * w * 3, 0.0);
        for (r, row) in scratch.chunks_exact_mut(w * 3).enumerate() {
            let src = &image.pixels[(first + r) * image.width * 3..][..image.width * 3];
            for (x, taps) in self.cols.0.iter().enumerate() {
                let mut acc = [0f32; 3];
                for (k, &wt) in taps.weights.iter().enumerate() {
                    let p = &src[(taps.start + k) * 3..][..3];
                    for c in 0..3 {
                        acc[c] += wt * p[c] as f32;
                    }
                }
                row[x * 3..x * 3 + 3].copy_from_slice(&acc);
            }
        }
        // Vertical pass, with ToTensor's 1/255, the normalisation and the flip.
        let scale = normalize.std.map(|s| 1.0 / (255.0 * s));
        let shift = [0, 1, 2].map(|c| -normalize.mean[c] / normalize.std[c]);
        let mut line = vec![0f32; w * 3];
        for (y, taps) in self.rows.0.iter().enumerate() {
            line.iter_mut().for_each(|v| *v = 0.0);
            for (k, &wt) in taps.weights.iter().enumerate() {
                let src = &scratch[(taps.start + k - first) * w * 3..][..w * 3];
                for (l, s) in line.iter_mut().zip(src) {
                    *l += wt * s;
                }
            }
            for c in 0..3 {
                let plane = &mut out[(c * h + y) * w..][..w];
                for (x, o) in plane.iter_mut().enumerate() {
                    let sx = if flip { w - 1 - x } else { x };
                    *o = line[sx * 3 + c] * scale[c] + shift[c];
                }
            }
        }
    }
}

/// Python's `round`: halves to even.
fn round_half_even(v: f64) -> i64 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 && r as i64 % 2 != 0 {
        (r - v.signum()) as i64
    } else {
        r as i64
    }
}

/// `transforms.Normalize(mean, std)` on `ToTensor`'s [0, 1] values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Per channel, RGB.
    pub mean: [f32; 3],
    /// Per channel, RGB.
    pub std: [f32; 3],
}

impl Normalize {
    /// ImageNet's statistics, torchvision's default for its pretrained models.
    pub const IMAGENET: Normalize = Normalize {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };
}

impl Default for Normalize {
    fn default() -> Self {
        Normalize::IMAGENET
    }
}

/// `transforms.Resize(size)`: an `int` matches the shorter side, keeping the aspect
/// ratio (the longer side truncated, as torchvision computes it); a pair is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// The shorter side becomes this many pixels.
    ShorterSide(usize),
    /// Exactly this size.
    Exact(ImageSize),
}

impl Resize {
    /// The size an image of `height` x `width` is resized to.
    pub fn output_size(&self, height: usize, width: usize) -> ImageSize {
        match *self {
            Resize::Exact(s) => s,
            Resize::ShorterSide(side) => {
                let (short, long) = (height.min(width), height.max(width));
                let new_long = (side as f64 * long as f64 / short as f64) as usize;
                if width <= height {
                    ImageSize::new(side, new_long)
                } else {
                    ImageSize::new(new_long, side)
                }
            }
        }
    }
}

/// `transforms.CenterCrop(size)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CenterCrop(pub ImageSize);

/// `transforms.RandomHorizontalFlip(p)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomHorizontalFlip {
    /// The probability of a flip.
    pub p: f64,
}

/// `transforms.RandomResizedCrop(size, scale, ratio)`: a random crop of `scale` of the
/// area and `ratio` of aspect, resized to `size`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomResizedCrop {
    /// The output size.
    pub size: ImageSize,
    /// The crop's area as a share of the image's, drawn uniformly: (0.08, 1.0) by default.
    pub scale: (f64, f64),
    /// The crop's width / height, drawn log-uniformly: (3/4, 4/3) by default.
    pub ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// torchvision's defaults for `size`.
    pub fn new(size: ImageSize) -> Self {
        RandomResizedCrop {
            size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    /// torchvision's `get_params`: ten tries at a crop of the drawn area and aspect that
    /// fits, then the central crop of the nearest allowed aspect.
    pub fn get_params(&self, height: usize, width: usize, rng: &mut impl Rng) -> CropBox {
        let area = (height * width) as f64;
        let (lo, hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target = area * rng.random_range(self.scale.0..=self.scale.1);
            let aspect = rng.random_range(lo..=hi).exp();
            let w = (target * aspect).sqrt().round() as usize;
            let h = (target / aspect).sqrt().round() as usize;
            if 0 < w && w <= width && 0 < h && h <= height {
                let top = rng.random_range(0..=height - h) as i64;
                let left = rng.random_range(0..=width - w) as i64;
                return CropBox {
                    top,
                    left,
                    height: h,
                    width: w,
                };
            }
        }
        let in_ratio = width as f64 / height as f64;
        let (h, w) = if in_ratio < self.ratio.0 {
            ((width as f64 / self.ratio.0).round() as usize, width)
        } else if in_ratio > self.ratio.1 {
            (height, (height as f64 * self.ratio.1).round() as usize)
        } else {
            (height, width)
        };
        CropBox {
            top: ((height - h) / 2) as i64,
            left: ((width - w) / 2) as i64,
            height: h,
            width: w,
        }
    }
}

/// An image dataset's transform, as torchvision's ImageNet recipes compose it, always
/// ending in `ToTensor()` and `Normalize`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ImageTransform {
    /// Training: `RandomResizedCrop(size)`, then `RandomHorizontalFlip(p)` when given.
    Train {
        /// The crop.
        crop: RandomResizedCrop,
        /// The flip, if any.
        flip: Option<RandomHorizontalFlip>,
        /// The normalisation.
        normalize: Normalize,
    },
    /// Evaluation: `Resize(resize)` then `CenterCrop(crop)`.
    Eval {
        /// The resize.
        resize: Resize,
        /// The crop.
        crop: CenterCrop,
        /// The normalisation.
        normalize: Normalize,
    },
}

impl ImageTransform {
    /// torchvision's ImageNet training transform at `size`: `RandomResizedCrop(size)`,
    /// `RandomHorizontalFlip()`, ImageNet's normalisation.
    pub fn train(size: ImageSize) -> Self {
        ImageTransform::Train {
            crop: RandomResizedCrop::new(size),
            flip: Some(RandomHorizontalFlip { p: 0.5 }),
            normalize: Normalize::IMAGENET,
        }
    }

    /// torchvision's ImageNet evaluation transform at `size`: `Resize` of the shorter
    /// side to `size * 256 / 224` (256 at 224), `CenterCrop(size)`.
    pub fn eval(size: ImageSize) -> Self {
        let side = size.height.max(size.width);
        ImageTransform::Eval {
            resize: Resize::ShorterSide(side * 256 / 224),
            crop: CenterCrop(size),
            normalize: Normalize::IMAGENET,
        }
    }

    /// The output size.
    pub fn size(&self) -> ImageSize {
        match self {
            ImageTransform::Train { crop, .. } => crop.size,
            ImageTransform::Eval { crop, .. } => crop.0,
        }
    }

    /// Transforms `image` into `out` (`[3, H, W]` float32), drawing from `rng`: the crop's
    /// draws first, then the flip's, as torchvision draws them.
    pub fn apply(
        &self,
        image: &RgbImage,
        rng: &mut impl Rng,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        match self {
            ImageTransform::Train {
                crop,
                flip,
                normalize,
            } => {
                let bx = crop.get_params(image.height, image.width, rng);
                // torch.rand(1) < p.
                let flipped = flip.is_some_and(|f| rng.random::<f64>() < f.p);
                ResamplePlan::resized_crop(image, bx, crop.size)
                    .apply(image, flipped, normalize, out, scratch)
            }
            ImageTransform::Eval {
                resize,
                crop,
                normalize,
            } => {
                let resized = resize.output_size(image.height, image.width);
                ResamplePlan::resize_then_center_crop(image, resized, crop.0)
                    .apply(image, false, normalize, out, scratch)
            }
        }
    }
}
