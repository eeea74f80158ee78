//! JPEG and PNG files decoded to 8-bit RGB, as torchvision's ImageFolder loader
//! (`PIL.Image.open(f).convert("RGB")`) gives them.
//!
//! - JPEG by `zune-jpeg` (baseline and progressive; grey, YCbCr, CMYK and YCCK), PNG by
//!   `png` (every colour type and bit depth).
//! - Grey is copied to the three channels; alpha is dropped, not composited (PIL's
//!   `convert("RGB")`); palettes are expanded; CMYK becomes RGB with PIL's formula
//!   `(255 - C)(255 - K) / 255`.
//! - 16-bit channels keep their high byte, as PIL does for 16-bit RGB. For 16-bit grey,
//!   PIL clips every value above 255 to white (its "I;16" mode); wick takes the high byte
//!   there too, so such an image stays an image.
//! - A truncated or corrupt file is an error naming the file, never a partly black image.

use std::path::Path;

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use crate::error::{ModelError, Result};

/// The largest side accepted, in pixels (PNG and JPEG files can claim up to 2^31 and
/// 65,535): a larger claim is a corrupt or hostile file.
pub const MAX_SIDE: usize = 1 << 15;

/// An 8-bit RGB image, rows of `width` pixels of three bytes (HWC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// `height * width * 3` bytes, row by row.
    pub pixels: Vec<u8>,
}

/// The file formats wick decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// JPEG (JFIF or Exif).
    Jpeg,
    /// PNG.
    Png,
}

impl ImageFormat {
    /// The format whose signature `bytes` start with.
    pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageFormat::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageFormat::Png)
        } else {
            None
        }
    }
}

impl RgbImage {
    /// Reads and decodes the image file at `path`.
    pub fn open(path: &Path) -> Result<RgbImage> {
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(ModelError::Data {
                path: path.to_path_buf(),
                message: "not a regular file (a folder, FIFO or device): give a JPEG or PNG file"
                    .into(),
            });
        }
        let bytes = std::fs::read(path).map_err(ModelError::io(path))?;
        RgbImage::decode(&bytes, path)
    }

    /// Decodes the bytes of a JPEG or PNG file; `path` names it in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<RgbImage> {
        let bad = ModelError::data(path);
        let image = match ImageFormat::sniff(bytes) {
            Some(ImageFormat::Jpeg) => decode_jpeg(bytes),
            Some(ImageFormat::Png) => decode_png(bytes),
            None if bytes.is_empty() => Err("an empty file, not an image".into()),
            None => Err(format!(
                "not a JPEG or PNG image (it starts with {:02x?})",
                &bytes[..bytes.len().min(8)]
            )),
        }
        .map_err(bad)?;
        Ok(image)
    }

    /// The pixel at row `y`, column `x`.
    pub fn pixel(&self, y: usize, x: usize) -> [u8; 3] {
        let i = (y * self.width + x) * 3;
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }
}

/// Checks a decoded size before anything that large is allocated.
fn check_size(width: usize, height: usize) -> std::result::Result<(), String> {
    if width == 0 || height == 0 {
        return Err(format!("a {width}x{height} image has no pixels"));
    }
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(format!(
            "a {width}x{height} image is larger than wick decodes ({MAX_SIDE} pixels a side): a corrupt file, or resize it first"
        ));
    }
    Ok(())
}

fn decode_jpeg(bytes: &[u8]) -> std::result::Result<RgbImage, String> {
    let options = DecoderOptions::default()
        .set_strict_mode(true)
        .set_max_width(MAX_SIDE)
        .set_max_height(MAX_SIDE);
    let mut header = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    header.decode_headers().map_err(jpeg_error)?;
    let (width, height) = header.dimensions().ok_or("a JPEG without dimensions")?;
    check_size(width, height)?;
    let cmyk = matches!(
        header.input_colorspace(),
        Some(ColorSpace::CMYK | ColorSpace::YCCK)
    );
    let out = if cmyk {
        ColorSpace::CMYK
    } else {
        ColorSpace::RGB
    };
    let mut decoder =
        JpegDecoder::new_with_options(ZCursor::new(bytes), options.jpeg_set_out_colorspace(out));
    let data = decoder.decode().map_err(jpeg_error)?;
    let pixels = if cmyk {
        // Adobe's CMYK JPEGs store inverted inks (libjpeg hands them over as stored; PIL
        // reads them as "CMYK;I").
        let inverted = has_adobe_marker(bytes);
        data.chunks_exact(4)
            .flat_map(|p| {
                let p = if inverted {
                    [0, 1, 2, 3].map(|i| 255 - p[i])
                } else {
                    [p[0], p[1], p[2], p[3]]
                };
                cmyk_to_rgb(&p)
            })
            .collect()
    } else {
        data
    };
    if pixels.len() != width * height * 3 {
        return Err(format!(
            "the JPEG decoded to {} bytes, not {width}x{height} RGB pixels",
            pixels.len()
        ));
    }
    Ok(RgbImage {
        width,
        height,
        pixels,
    })
}

/// A JPEG decoder's error in words.
fn jpeg_error(e: zune_jpeg::errors::DecodeErrors) -> String {
    use zune_jpeg::errors::DecodeErrors as E;
    match e {
        E::ExhaustedData | E::IoErrors(_) => {
            "a truncated JPEG: the file ends before the image's data does".into()
        }
        other => format!("a corrupt JPEG: {other:?}"),
    }
}

/// Whether the JPEG has an APP14 "Adobe" segment before its first scan.
fn has_adobe_marker(bytes: &[u8]) -> bool {
    let mut at = 2;
    while at + 4 <= bytes.len() && bytes[at] == 0xFF {
        let marker = bytes[at + 1];
        let len = u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        if marker == 0xEE && bytes[at + 4..].starts_with(b"Adobe") {
            return true;
        }
        if marker == 0xDA {
            return false;
        }
        at += 2 + len;
    }
    false
}

/// PIL's CMYK to RGB: each channel `(255 - ink) * (255 - K) / 255`, rounded as PIL's
/// `MULDIV255` rounds.
fn cmyk_to_rgb(p: &[u8]) -> [u8; 3] {
    let nk = 255 - p[3] as u32;
    let muldiv255 = |a: u32, b: u32| {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    };
    [0, 1, 2].map(|c| (nk - muldiv255(p[c] as u32, nk)) as u8)
}

fn decode_png(bytes: &[u8]) -> std::result::Result<RgbImage, String> {
    let limits = png::Limits {
        bytes: MAX_SIDE * MAX_SIDE,
    };
    let mut decoder = png::Decoder::new_with_limits(bytes, limits);
    // Palettes and low bit depths expanded to 8 bits, 16 bits cut to their high byte.
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder
        .read_info()
        .map_err(|e| format!("not a readable PNG: {e}"))?;
    let (width, height) = {
        let (w, h) = reader.info().size();
        (w as usize, h as usize)
    };
    check_size(width, height)?;
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let frame = reader
        .next_frame(&mut buf)
        .map_err(|e| format!("a corrupt or truncated PNG: {e}"))?;
    let (color, depth) = reader.output_color_type();
    if depth != png::BitDepth::Eight {
        return Err(format!("a PNG of {depth:?} bits that did not expand to 8"));
    }
    let line = frame.line_size;
    let channels = color.samples();
    let mut pixels = Vec::with_capacity(width * height * 3);
    for row in buf.chunks_exact(line).take(height) {
        for p in row[..width * channels].chunks_exact(channels) {
            match color {
                png::ColorType::Grayscale | png::ColorType::GrayscaleAlpha => {
                    pixels.extend_from_slice(&[p[0]; 3])
                }
                png::ColorType::Rgb | png::ColorType::Rgba => pixels.extend_from_slice(&p[..3]),
                png::ColorType::Indexed => return Err("a palette PNG that did not expand".into()),
            }
        }
    }
    Ok(RgbImage {
        width,
        height,
        pixels,
    })
}
