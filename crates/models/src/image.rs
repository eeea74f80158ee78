//! The height and width of a model's input images, square or not.

use std::fmt;
use std::str::FromStr;

/// The height and width of input images, in pixels. Written and parsed as `WIDTHxHEIGHT`
/// (`320x224`), or a single number for a square (`224`), as the examples' `--image-size`
/// takes it. Tensors hold images as `[N, 3, height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageSize {
    /// Rows of pixels.
    pub height: usize,
    /// Columns of pixels.
    pub width: usize,
}

impl ImageSize {
    /// A `width` x `height` size.
    pub fn new(width: usize, height: usize) -> Self {
        ImageSize { height, width }
    }

    /// A square of `side` x `side`.
    pub fn square(side: usize) -> Self {
        ImageSize::new(side, side)
    }

    /// Whether height and width are equal.
    pub fn is_square(&self) -> bool {
        self.height == self.width
    }

    /// Pixels per image and channel.
    pub fn pixels(&self) -> usize {
        self.height * self.width
    }
}

impl From<usize> for ImageSize {
    /// A square of `side` x `side`.
    fn from(side: usize) -> Self {
        ImageSize::square(side)
    }
}

impl fmt::Display for ImageSize {
    /// `WIDTHxHEIGHT`, as `--image-size` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

impl FromStr for ImageSize {
    type Err = String;

    /// `224` (a square) or `320x224` (width x height); both at least 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let number = |part: &str, what: &str| -> Result<usize, String> {
            let n: usize = part.trim().parse().map_err(|_| {
                format!("`{s}` is not an image size: expected `224` or `WIDTHxHEIGHT` such as `320x224` ({what} `{part}` is not a whole number)")
            })?;
            if n == 0 {
                return Err(format!("`{s}`: the {what} must be at least 1 pixel"));
            }
            Ok(n)
        };
        match s.split_once(['x', 'X']) {
            Some((w, h)) => Ok(ImageSize::new(number(w, "width")?, number(h, "height")?)),
            None => Ok(ImageSize::square(number(s, "side")?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ImageSize;

    #[test]
    fn parses_squares_and_width_by_height() {
        assert_eq!("224".parse(), Ok(ImageSize::square(224)));
        let s: ImageSize = "320x224".parse().unwrap();
        assert_eq!((s.width, s.height), (320, 224));
        assert_eq!(s.to_string(), "320x224");
        assert_eq!("48X40".parse::<ImageSize>().unwrap().to_string(), "48x40");
        for bad in [
            "", "0", "x", "32x", "x32", "32x0", "-3", "3.5", "32x32x3", "abc",
        ] {
            let err = bad.parse::<ImageSize>().unwrap_err();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
    }
}
