//! safetensors checkpoints with torchvision's `state_dict` names.
//!
//! Loading converts f16, bf16 and f64 tensors to the model's f32 and checks every name
//! and shape; saving goes through [`wick_graph::atomic_write`]: atomic, durable, through
//! symlinks, never over a device or a folder.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{ModelError, Result};
use crate::model::ModelConfig;

/// A state dict: tensors by torchvision name.
pub type StateDict = HashMap<String, Tensor>;

/// Refuses anything but a regular file: a FIFO or a device would block or never end.
fn regular_file(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(ModelError::io(path))?;
    if meta.is_file() {
        return Ok(());
    }
    Err(ModelError::Checkpoint {
        path: path.to_path_buf(),
        message: "not a regular file (a folder, FIFO or device): give a safetensors file".into(),
    })
}

/// Reads every tensor of a safetensors file onto the CPU. Only regular files are read (a
/// FIFO or a device would block or never end).
pub fn read_safetensors(path: &Path) -> Result<StateDict> {
    let io = ModelError::io(path);
    regular_file(path)?;
    let bytes = std::fs::read(path).map_err(io)?;
    if let Some(name) = duplicate_header_key(&bytes) {
        return Err(ModelError::Checkpoint {
            path: path.to_path_buf(),
            message: format!(
                "its header declares `{name}` twice: which one is meant is unknown (safetensors' own parser refuses such files)"
            ),
        });
    }
    candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
        ModelError::Checkpoint {
            path: path.to_path_buf(),
            message: format!("not a valid safetensors file ({} bytes): {e}", bytes.len()),
        }
    })
}

/// The first tensor name a safetensors header declares twice (a JSON object keeps only
/// the last of equal keys, silently); `None` when every name is unique or the header is
/// not readable (the parser then says why).
fn duplicate_header_key(bytes: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a safetensors header")
        }
        fn visit_map<A: MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            // The whole map is read (the parser checks that it ends), keeping the first
            // name seen twice.
            let (mut seen, mut twice) = (std::collections::HashSet::new(), None);
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) && twice.is_none() {
                    twice = Some(key);
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(twice)
        }
    }
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let header = bytes.get(8..8usize.checked_add(usize::try_from(len).ok()?)?)?;
    let mut de = serde_json::Deserializer::from_slice(header);
    de.deserialize_map(Keys).ok().flatten()
}

/// What loading checks in a checkpoint's values (names, shapes and dtypes are always
/// checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueChecks {
    /// Refuse NaN or infinite values, a negative `running_var` and a negative
    /// `num_batches_tracked`: such a checkpoint gives plausible logits and wrong answers.
    Strict,
    /// Load the values as they are (to inspect a diverged run, say).
    Unchecked,
}

/// Refuses poisoned values (see [`ValueChecks::Strict`]), naming the tensor, the element
/// and its value.
fn check_values(name: &str, t: &Tensor, path: &Path) -> Result<()> {
    let poisoned = |message: String| ModelError::Checkpoint {
        path: path.to_path_buf(),
        message: format!(
            "tensor `{name}` {message} (load with ValueChecks::Unchecked to accept it)"
        ),
    };
    if let Some((i, v)) = wick_ops::first_non_finite(t)? {
        return Err(poisoned(format!(
            "has the non-finite value {v} at element {i}"
        )));
    }
    if name.ends_with("running_var") {
        let values = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| **v < 0.0) {
            return Err(poisoned(format!(
                "has the negative variance {v} at element {i}"
            )));
        }
    }
    Ok(())
}

/// The checked state dict of `config` from `tensors` (read from `path`): float tensors
/// converted to f32, `num_batches_tracked` (int64, optional, 0 when absent) returned apart,
/// values checked as `checks` says.
pub fn validate(
    config: &ModelConfig,
    tensors: StateDict,
    path: &Path,
    checks: ValueChecks,
) -> Result<(StateDict, HashMap<String, i64>)> {
    let spec = config.state_spec()?;
    let bn_names = config.batch_norm_names()?;
    let missing = spec
        .iter()
        .filter(|s| !tensors.contains_key(&s.name))
        .map(|s| s.name.clone());
    none_of(missing, |names| ModelError::MissingTensors {
        path: path.to_path_buf(),
        names,
    })?;
    let tracked_names: HashMap<String, String> = bn_names
        .iter()
        .map(|bn| (format!("{bn}.num_batches_tracked"), bn.clone()))
        .collect();
    let extra = tensors
        .keys()
        .filter(|k| !tracked_names.contains_key(*k) && !spec.iter().any(|s| &s.name == *k))
        .cloned();
    none_of(extra, |names| ModelError::ExtraTensors {
        path: path.to_path_buf(),
        names,
    })?;
    let mut state = StateDict::new();
    let mut tracked = HashMap::new();
    for (name, t) in tensors {
        if let Some(bn) = tracked_names.get(&name) {
            tracked.insert(bn.clone(), batch_count(&name, &t, path, checks)?);
            continue;
        }
        let s = spec.iter().find(|s| s.name == name).expect("checked above");
        let t = weight(&name, t, &s.shape, path)?;
        if checks == ValueChecks::Strict {
            check_values(&name, &t, path)?;
        }
        state.insert(name, t);
    }
    for bn in bn_names {
        tracked.entry(bn).or_insert(0);
    }
    Ok((state, tracked))
}

/// A batch norm's `num_batches_tracked` `t`: a scalar integer, not negative unless the
/// checks are off.
fn batch_count(name: &str, t: &Tensor, path: &Path, checks: ValueChecks) -> Result<i64> {
    let err = |message: String| ModelError::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    // torchvision saves a scalar; anything else is not this counter.
    if !t.dims().is_empty() && t.dims() != [1] {
        return Err(ModelError::ShapeMismatch {
            path: path.to_path_buf(),
            name: name.to_string(),
            expected: vec![],
            found: t.dims().to_vec(),
        });
    }
    if t.dtype().is_float() {
        return Err(err(format!(
            "`{name}` is {:?}: a count of batches is an integer (torchvision saves int64)",
            t.dtype()
        )));
    }
    let v = t.flatten_all()?.to_dtype(DType::I64)?.to_vec1::<i64>()?;
    let Some(&count) = v.first() else {
        return Err(err(format!("`{name}` is empty")));
    };
    if count < 0 && checks == ValueChecks::Strict {
        return Err(err(format!(
            "`{name}` is {count}: a count of batches cannot be negative (load with ValueChecks::Unchecked to accept it)"
        )));
    }
    Ok(count)
}

/// A weight `t` of the state spec's `shape`, as f32 (from f16, bf16 or f64).
fn weight(name: &str, t: Tensor, shape: &[usize], path: &Path) -> Result<Tensor> {
    if t.dims() != shape {
        return Err(ModelError::ShapeMismatch {
            path: path.to_path_buf(),
            name: name.to_string(),
            expected: shape.to_vec(),
            found: t.dims().to_vec(),
        });
    }
    Ok(match t.dtype() {
        DType::F32 => t,
        DType::F16 | DType::BF16 | DType::F64 => t.to_dtype(DType::F32)?,
        other => {
            return Err(ModelError::Checkpoint {
                path: path.to_path_buf(),
                message: format!(
                    "tensor `{name}` is stored as {other:?}: wick reads weights stored as f32, f16, bf16 or f64 (torchvision's dtypes); convert it to one of them"
                ),
            })
        }
    })
}

/// Writes `tensors` to `path` as safetensors, atomically and durably, through symlinks to
/// their target, never over a non-regular file ([`wick_graph::atomic_write`]).
pub fn write_safetensors(tensors: &StateDict, path: &Path) -> Result<()> {
    write_safetensors_with(tensors, None, path)
}

/// The metadata key of the classes' names: a JSON list, by class index.
pub const CLASSES_KEY: &str = "classes";

/// [`write_safetensors`] with `metadata` in the file's header.
pub fn write_safetensors_with(
    tensors: &StateDict,
    metadata: Option<HashMap<String, String>>,
    path: &Path,
) -> Result<()> {
    let cpu: HashMap<String, Tensor> = tensors
        .iter()
        .map(|(k, v)| Ok((k.clone(), v.to_device(&Device::Cpu)?)))
        .collect::<Result<_>>()?;
    let bytes =
        safetensors::tensor::serialize(&cpu, metadata).map_err(|e| ModelError::Checkpoint {
            path: path.to_path_buf(),
            message: format!("cannot serialise the tensors: {e}"),
        })?;
    wick_graph::atomic_write::write_bytes_atomically(path, &bytes)?;
    Ok(())
}

/// The classes' names a checkpoint carries (from a run on an ImageFolder), by index;
/// `None` when it has none.
pub fn read_class_names(path: &Path) -> Result<Option<Vec<String>>> {
    use std::io::Read;
    let bad = |message: String| ModelError::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    let io = ModelError::io(path);
    // The header alone: an 8-byte length, then that much JSON.
    regular_file(path)?;
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| bad("shorter than a safetensors header".into()))?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return Err(bad(format!(
            "a header of {len} bytes: not a safetensors file"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|_| bad("its header is cut short".into()))?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("its header is not JSON: {e}")))?;
    match header.get("__metadata__").and_then(|m| m.get(CLASSES_KEY)) {
        None => Ok(None),
        Some(list) => list
            .as_str()
            .and_then(|l| serde_json::from_str(l).ok())
            .map(Some)
            .ok_or_else(|| {
                bad(format!(
                    "its `{CLASSES_KEY}` metadata is not a list of names"
                ))
            }),
    }
}

/// `Ok` when `names` is empty; otherwise the error `err` makes of them, sorted.
fn none_of(
    names: impl Iterator<Item = String>,
    err: impl FnOnce(Vec<String>) -> ModelError,
) -> Result<()> {
    let mut names: Vec<String> = names.collect();
    names.sort();
    if names.is_empty() {
        Ok(())
    } else {
        Err(err(names))
    }
}
