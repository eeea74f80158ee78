//! Reading a Hugging Face `config.json`: typed fields, each error naming the model family
//! and the field. A field that is absent or `null` keeps the default, as transformers'
//! config classes do.

use serde_json::Value;

use crate::error::{ModelError, Result};

/// Reads each named positive-integer field of `$config` from the `config.json` key of
/// the same name (Hugging Face's keys are the config structs' field names).
macro_rules! read_sizes {
    ($json:expr, $config:expr; $($field:ident),+ $(,)?) => {
        $($json.size(stringify!($field), &mut $config.$field)?;)+
    };
}
pub(crate) use read_sizes;

/// A parsed `config.json` of one model family.
pub(crate) struct ConfigJson {
    v: Value,
    family: &'static str,
    /// The object's place in the file (`rope_parameters.`), before its keys in messages.
    path: String,
}

impl ConfigJson {
    /// `text` parsed; an error naming `family` when it is not JSON.
    pub(crate) fn parse(family: &'static str, text: &str) -> Result<Self> {
        let v = serde_json::from_str(text)
            .map_err(|e| ModelError::Config(format!("{family} config.json: {e}")))?;
        Ok(ConfigJson {
            v,
            family,
            path: String::new(),
        })
    }

    /// The object in field `key`, unless absent or `null`.
    pub(crate) fn object(&self, key: &str) -> Option<ConfigJson> {
        self.get(key).map(|v| ConfigJson {
            v: v.clone(),
            family: self.family,
            path: format!("{}{key}.", self.path),
        })
    }

    /// A [`ModelError::Config`] saying `message` about this file.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> ModelError {
        ModelError::Config(format!("{} config.json: {message}", self.family))
    }

    /// Field `key`, unless absent or `null`.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.v.get(key).filter(|x| !x.is_null())
    }

    /// A positive integer field into `into`.
    pub(crate) fn size(&self, key: &str, into: &mut usize) -> Result<()> {
        if let Some(x) = self.get(key) {
            *into = x.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                self.error(format!(
                    "`{}{key}` must be a positive integer, got {x}",
                    self.path
                ))
            })? as usize;
        }
        Ok(())
    }

    /// A real field into `into`: a probability in `[0, 1)` when `probability`, else above 0.
    pub(crate) fn real(&self, key: &str, into: &mut f64, probability: bool) -> Result<()> {
        if let Some(x) = self.get(key) {
            *into = x
                .as_f64()
                .filter(|p| {
                    if probability {
                        (0.0..1.0).contains(p)
                    } else {
                        *p > 0.0
                    }
                })
                .ok_or_else(|| self.error(format!("`{}{key}` is out of range: {x}", self.path)))?;
        }
        Ok(())
    }

    /// A real field above 0 that must be there; `why` says what needs it.
    pub(crate) fn required_real(&self, key: &str, why: &str) -> Result<f64> {
        if self.get(key).is_none() {
            return Err(self.error(format!("`{}{key}` is missing ({why})", self.path)));
        }
        let mut v = 0.0;
        self.real(key, &mut v, false)?;
        Ok(v)
    }

    /// A boolean field into `into`.
    pub(crate) fn flag(&self, key: &str, into: &mut bool) -> Result<()> {
        if let Some(x) = self.get(key) {
            *into = x.as_bool().ok_or_else(|| {
                self.error(format!(
                    "`{}{key}` must be true or false, got {x}",
                    self.path
                ))
            })?;
        }
        Ok(())
    }

    /// A string field, unless absent or `null`.
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(x) => x.as_str().map(|s| Some(s.to_string())).ok_or_else(|| {
                self.error(format!("`{}{key}` must be a string, got {x}", self.path))
            }),
        }
    }

    /// An error unless boolean field `key` is absent or `want`: a setting of the
    /// family's model that wick does not implement, refused rather than ignored.
    pub(crate) fn require_flag(&self, key: &str, want: bool) -> Result<()> {
        match self.get(key) {
            Some(x) if x.as_bool() != Some(want) => Err(self.error(format!(
                "`{}{key}`: {x} is not supported (only {want})",
                self.path
            ))),
            _ => Ok(()),
        }
    }

    /// An error unless string field `key` is absent or `want`.
    pub(crate) fn require_str(&self, key: &str, want: &str) -> Result<()> {
        match self.get(key) {
            Some(x) if x.as_str() != Some(want) => Err(self.error(format!(
                "`{}{key}` {x} is not supported (only \"{want}\")",
                self.path
            ))),
            _ => Ok(()),
        }
    }
}
