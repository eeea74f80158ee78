//! Text for language models: a plain text file as token ids, split into a training part
//! and a held-out part, and the windows a training step reads. The tokenizer is a trait,
//! so a BPE tokenizer fits beside the two here: bytes ([`ByteTokenizer`], GPT-2's
//! byte-level base) and characters ([`CharTokenizer`], nanoGPT's `shakespeare_char`).

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::error::{ModelError, Result};

/// Turns text into token ids and back.
pub trait Tokenizer: Send + Sync + std::fmt::Debug {
    /// Token ids of `bytes` (the file's contents); an error names what cannot be encoded.
    fn encode(&self, bytes: &[u8]) -> std::result::Result<Vec<u32>, String>;
    /// The text of `ids` (invalid sequences shown as U+FFFD).
    fn decode(&self, ids: &[u32]) -> String;
    /// Ids run from 0 to this, exclusive.
    fn vocab_size(&self) -> usize;
    /// What it is, in words (`bytes`, `65 characters`).
    fn describe(&self) -> String;
}

/// Every byte its own token: a vocabulary of 256, any file.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByteTokenizer;

impl Tokenizer for ByteTokenizer {
    fn encode(&self, bytes: &[u8]) -> std::result::Result<Vec<u32>, String> {
        Ok(bytes.iter().map(|&b| b as u32).collect())
    }
    fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().map(|&t| t.min(255) as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    fn vocab_size(&self) -> usize {
        256
    }
    fn describe(&self) -> String {
        "bytes".into()
    }
}

/// Every distinct character of a UTF-8 text its own token, numbered in code point order:
/// the same text always gives the same vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharTokenizer {
    chars: Vec<char>,
}

impl CharTokenizer {
    /// The vocabulary of `text`'s characters.
    pub fn of_text(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        CharTokenizer { chars }
    }
}

impl Tokenizer for CharTokenizer {
    fn encode(&self, bytes: &[u8]) -> std::result::Result<Vec<u32>, String> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            format!(
                "not UTF-8 at byte {}: character-level text must be UTF-8 (byte-level reads any file)",
                e.valid_up_to()
            )
        })?;
        text.chars()
            .map(|c| {
                self.chars
                    .binary_search(&c)
                    .map(|i| i as u32)
                    .map_err(|_| format!("the character {c:?} is not in the text's vocabulary"))
            })
            .collect()
    }
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i as usize).copied().unwrap_or('\u{FFFD}'))
            .collect()
    }
    fn vocab_size(&self) -> usize {
        self.chars.len()
    }
    fn describe(&self) -> String {
        format!("{} characters", self.chars.len())
    }
}

/// A text file as token ids: the first part for training, the last `held_out_percent` for
/// evaluation (a contiguous tail, so no window of one part overlaps the other).
#[derive(Debug, Clone)]
pub struct TextCorpus {
    /// The file.
    pub path: PathBuf,
    /// Training tokens.
    pub train: Vec<u32>,
    /// Held-out tokens.
    pub held_out: Vec<u32>,
}

impl TextCorpus {
    /// Reads `path`, encodes it with `tokenizer` and holds out its last
    /// `held_out_percent` (of the tokens, rounded down to train on); each part must hold at
    /// least one window of `window` tokens.
    pub fn open(
        path: &Path,
        tokenizer: &dyn Tokenizer,
        held_out_percent: usize,
        window: usize,
    ) -> Result<Self> {
        let bad = ModelError::data(path);
        let bytes = std::fs::read(path).map_err(ModelError::io(path))?;
        let ids = tokenizer.encode(&bytes).map_err(bad)?;
        if !(1..=99).contains(&held_out_percent) {
            return Err(ModelError::Config(format!(
                "{held_out_percent}% held out: give 1 to 99"
            )));
        }
        let cut = ids.len() * (100 - held_out_percent) / 100;
        let (train, rest) = ids.split_at(cut);
        if train.len() < window || rest.len() < window {
            return Err(bad(format!(
                "{} tokens ({}) split into {} to train on and {} held out: each needs a window of {window}; use a longer text or a shorter context",
                ids.len(),
                tokenizer.describe(),
                train.len(),
                rest.len()
            )));
        }
        Ok(TextCorpus {
            path: path.to_path_buf(),
            train: train.to_vec(),
            held_out: rest.to_vec(),
        })
    }

    /// `n` windows of `len` training tokens `[n, len]` (int64), each starting where a
    /// hash of (`seed`, `step`, row) says: a run's batches are a function of its seed.
    pub fn windows(&self, n: usize, len: usize, seed: u64, step: u64) -> Result<Tensor> {
        let room = (self.train.len() - len + 1) as u64;
        let mut tokens = Vec::with_capacity(n * len);
        for row in 0..n as u64 {
            let mut z = seed
                ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ row.wrapping_mul(0xD6E8_FEB8_6659_FD93);
            z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let start = ((z ^ (z >> 29)) % room) as usize;
            tokens.extend(self.train[start..start + len].iter().map(|&t| t as i64));
        }
        Ok(Tensor::from_vec(tokens, (n, len), &Device::Cpu)?)
    }

    /// Up to `max` non-overlapping held-out windows of `len` tokens, each `[1, len]`.
    pub fn held_out_windows(&self, len: usize, max: usize) -> Result<Vec<Tensor>> {
        self.held_out
            .chunks_exact(len)
            .take(max)
            .map(|c| {
                let ids: Vec<i64> = c.iter().map(|&t| t as i64).collect();
                Ok(Tensor::from_vec(ids, (1, len), &Device::Cpu)?)
            })
            .collect()
    }
}
