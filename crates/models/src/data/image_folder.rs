//! torchvision's `ImageFolder` layout: `root/<class>/.../<image>`, one folder per class,
//! classes numbered in sorted order, images in sorted order within each.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::seed_for;
use crate::error::{ModelError, Result};

/// Extensions wick decodes, compared without case.
const DECODED: [&str; 3] = ["jpg", "jpeg", "png"];
/// torchvision's other image extensions: files wick cannot decode, refused by name rather
/// than left out without a word.
const OTHER_IMAGES: [&str; 6] = ["ppm", "bmp", "pgm", "tif", "tiff", "webp"];
/// How deep class folders are walked (torchvision follows links; a loop stops here).
const MAX_DEPTH: usize = 32;

/// The images of an ImageFolder and their classes.
#[derive(Debug, Clone)]
pub struct ImageFolder {
    root: PathBuf,
    classes: Arc<[String]>,
    /// (file, class index), by class then path.
    samples: Arc<[(PathBuf, u32)]>,
}

impl ImageFolder {
    /// Lists `root`'s class folders and their JPEG and PNG files, as torchvision's
    /// `ImageFolder(root)` does: classes are the subfolders' names sorted, each numbered
    /// by its place; files are found in any depth below their class folder. Other files
    /// are left out; image formats wick does not decode (BMP, TIFF, WebP, ...) are an
    /// error naming one of them.
    pub fn open(root: &Path) -> Result<ImageFolder> {
        let bad = ModelError::data(root);
        let meta = std::fs::metadata(root).map_err(ModelError::io(root))?;
        if !meta.is_dir() {
            return Err(bad(
                "not a folder: give an ImageFolder (one subfolder of images per class)".into(),
            ));
        }
        let mut classes: Vec<String> = read_dir_sorted(root)?
            .into_iter()
            .filter(|p| p.is_dir())
            .map(|p| {
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        classes.sort();
        if classes.is_empty() {
            return Err(bad(
                "has no class folders: an ImageFolder holds one subfolder of images per class (root/cat/1.jpg, root/dog/2.png)".into(),
            ));
        }
        let mut samples = Vec::new();
        for (index, class) in classes.iter().enumerate() {
            let before = samples.len();
            let dir = root.join(class);
            walk(&dir, 0, &mut HashSet::new(), &mut |file| {
                samples.push((file, index as u32));
            })?;
            if samples.len() == before {
                return Err(ModelError::Data {
                    path: dir,
                    message: format!(
                        "class `{class}` has no JPEG or PNG images (.jpg, .jpeg, .png): remove the folder or add its images"
                    ),
                });
            }
        }
        Ok(ImageFolder {
            root: root.to_path_buf(),
            classes: classes.into(),
            samples: samples.into(),
        })
    }

    /// The folder's training and validation parts: its `train/` and `val/` subfolders
    /// when it has both (each an ImageFolder, with the same classes), or else a split of
    /// the whole folder with `val_share` of the images held out, drawn by `seed`.
    pub fn open_train_val(root: &Path, val_share: f64, seed: u64) -> Result<(Self, Self)> {
        let (train, val) = (root.join("train"), root.join("val"));
        if train.is_dir() && val.is_dir() {
            let (train, val) = (ImageFolder::open(&train)?, ImageFolder::open(&val)?);
            if train.classes != val.classes {
                return Err(ModelError::Data {
                    path: root.to_path_buf(),
                    message: format!(
                        "train/ and val/ have different classes ({} and {}): the labels would not mean the same; give both the same class folders",
                        preview(&train.classes),
                        preview(&val.classes)
                    ),
                });
            }
            return Ok((train, val));
        }
        ImageFolder::open(root)?.split(val_share, seed)
    }

    /// Holds `val_share` of the images out, drawn by `seed` (the same split every time):
    /// the rest, and the held-out images, each in file order.
    pub fn split(&self, val_share: f64, seed: u64) -> Result<(Self, Self)> {
        let n = self.samples.len();
        let held = (n as f64 * val_share).round() as usize;
        if !(val_share > 0.0 && val_share < 1.0) || held == 0 || held >= n {
            return Err(ModelError::Config(format!(
                "a validation split of {val_share} of {n} images leaves {held} held out and {} to train on: give a share above 0 and below 1 that leaves at least one of each",
                n.saturating_sub(held)
            )));
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut StdRng::seed_from_u64(seed_for(seed, u64::MAX)));
        let mut val: Vec<usize> = order[..held].to_vec();
        let mut train: Vec<usize> = order[held..].to_vec();
        val.sort_unstable();
        train.sort_unstable();
        let part = |idx: Vec<usize>| ImageFolder {
            root: self.root.clone(),
            classes: self.classes.clone(),
            samples: idx.into_iter().map(|i| self.samples[i].clone()).collect(),
        };
        Ok((part(train), part(val)))
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Class names, by index.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// Every image and its class index.
    pub fn samples(&self) -> &[(PathBuf, u32)] {
        &self.samples
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

fn preview(classes: &[String]) -> String {
    let shown: Vec<&str> = classes.iter().take(4).map(String::as_str).collect();
    let more = classes.len().saturating_sub(4);
    if more > 0 {
        format!("{} classes: {}, ...", classes.len(), shown.join(", "))
    } else {
        format!("{} classes: {}", classes.len(), shown.join(", "))
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let io = ModelError::io(dir);
    let mut entries = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(io)?;
    entries.sort();
    Ok(entries)
}

/// Calls `found` with every JPEG and PNG file below `dir`, in sorted order.
fn walk(
    dir: &Path,
    depth: usize,
    seen: &mut HashSet<PathBuf>,
    found: &mut dyn FnMut(PathBuf),
) -> Result<()> {
    let real = std::fs::canonicalize(dir).map_err(ModelError::io(dir))?;
    if depth > MAX_DEPTH || !seen.insert(real.clone()) {
        return Err(ModelError::Data {
            path: dir.to_path_buf(),
            message: "a folder link that loops back (or folders deeper than 32): ImageFolder follows links, so the class would never end".into(),
        });
    }
    for path in read_dir_sorted(dir)? {
        if path.is_dir() {
            walk(&path, depth + 1, seen, found)?;
            continue;
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let image = DECODED.contains(&ext.as_str());
        if image && !path.is_file() {
            return Err(ModelError::Data {
                path,
                message: "not a regular file (a FIFO, socket or device): reading it would block or never end".into(),
            });
        }
        if image {
            found(path);
        } else if OTHER_IMAGES.contains(&ext.as_str()) {
            return Err(ModelError::Data {
                path,
                message: format!(
                    "a .{ext} image: wick decodes JPEG and PNG; convert the folder's .{ext} files (for example with ImageMagick's `mogrify -format png`)"
                ),
            });
        }
    }
    seen.remove(&real);
    Ok(())
}
