//! Training checkpoints that resume exactly. Each is a folder `step-<N>` holding
//! `model.safetensors` (the torchvision-named state dict, loadable for inference as any
//! checkpoint) and `training.safetensors`: the optimizer's state by PyTorch's names
//! (`<param>.momentum_buffer`, `<param>.exp_avg`, `<param>.exp_avg_sq`) and, in its metadata, the step and epoch counters and the caller's own fields (the
//! schedule, the seed). The data order and augmentation are functions of the seed and the
//! batch index ([`BatchSource::seek`](crate::data::BatchSource::seek)), so the counters
//! are all a resumed run needs of them.
//!
//! A checkpoint is written into a hidden `.step-<N>.partial` folder, each file atomically
//! and durably, then the folder is renamed: a kill leaves the previous checkpoints whole,
//! and the partial folder is removed by the next save.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::checkpoint::read_safetensors;
use crate::error::{ModelError, Result};
pub use crate::optimizer_state::{optimizer_state_of, set_optimizer_state_of};
use crate::session::Session;

/// What a training checkpoint saves and restores of a run: its weights (one safetensors
/// file under the model's own names) and its optimizer's state. [`Session`] is one; a
/// model trained on an executor of its own (`train_gpt`'s GPT-2) implements it with
/// [`optimizer_state_of`] and [`set_optimizer_state_of`].
pub trait Checkpointable {
    /// Writes the weights to `path`.
    fn save_weights(&self, path: &Path) -> Result<()>;
    /// Reads the weights from `path`, checking their names and shapes.
    fn load_weights(&mut self, path: &Path) -> Result<()>;
    /// The optimizer's state by full name (`<param>.exp_avg`, ...).
    fn optimizer_state(&self) -> Result<Vec<(String, Tensor)>>;
    /// Restores the optimizer's state and the count of steps taken.
    fn set_optimizer_state(&mut self, state: &HashMap<String, Tensor>, steps: u64) -> Result<()>;
}

impl Checkpointable for Session {
    fn save_weights(&self, path: &Path) -> Result<()> {
        self.save_checkpoint(path)
    }
    fn load_weights(&mut self, path: &Path) -> Result<()> {
        self.load_checkpoint(path)
    }
    fn optimizer_state(&self) -> Result<Vec<(String, Tensor)>> {
        Session::optimizer_state(self)
    }
    fn set_optimizer_state(&mut self, state: &HashMap<String, Tensor>, steps: u64) -> Result<()> {
        Session::set_optimizer_state(self, state, steps)
    }
}

/// The counters and fields a training checkpoint records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainingState {
    /// Training steps completed.
    pub step: u64,
    /// Epochs completed.
    pub epoch: u64,
    /// The caller's fields (seed, schedule, best accuracy, ...), as text.
    pub fields: BTreeMap<String, String>,
}

const MODEL: &str = "model.safetensors";
const TRAINING: &str = "training.safetensors";

/// The file that marks a checkpoint folder as wick's: wick replaces or prunes only
/// folders that hold it (or, from before it existed, exactly its two files).
const MARKER: &str = "wick-checkpoint";

/// Whether `folder` is a checkpoint wick wrote.
fn is_wicks(folder: &Path) -> bool {
    if folder.join(MARKER).is_file() {
        return true;
    }
    let Ok(entries) = fs::read_dir(folder) else {
        return false;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names == [MODEL, TRAINING]
}

/// Refuses to replace `target` unless it is absent or a checkpoint wick wrote.
fn check_replaceable(target: &Path) -> Result<()> {
    let Ok(meta) = fs::symlink_metadata(target) else {
        return Ok(());
    };
    if meta.is_dir() && is_wicks(target) {
        return Ok(());
    }
    Err(ModelError::Checkpoint {
        path: target.to_path_buf(),
        message: format!(
            "exists and is not a checkpoint wick wrote ({}): wick replaces only its own checkpoints; move it away or choose another --checkpoint-dir",
            if meta.is_dir() { "a folder of yours" } else { "a file" }
        ),
    })
}

/// Checks, before a run starts, that wick can write its checkpoints into `dir`: a `best`
/// entry there must be a checkpoint wick wrote (a folder of the user's, or a file, is
/// refused rather than replaced at the end of the first epoch).
pub fn check_dir(dir: &Path) -> Result<()> {
    check_replaceable(&dir.join("best"))
}

/// A checkpoint folder held by one run: a `.wick-lock` file with the holder's process
/// id, under an advisory `flock` that the kernel releases when the holder's process ends,
/// however it ends; the file is removed when the lock is dropped. A second run on the
/// folder is refused while the first lives. A lock file left by a process that is gone
/// (its `flock` released with it) is taken over: a reused process id cannot keep a folder
/// locked.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    /// Holds the `flock` for as long as the lock lives.
    _file: fs::File,
    taken_over: Option<String>,
}

impl DirLock {
    /// Takes `dir`'s lock (creating `dir`).
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::io::AsRawFd;
        fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
        let path = dir.join(".wick-lock");
        // A lock file unlinked by its holder between our open and our flock is retried.
        for _ in 0..8 {
            let mut file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(ModelError::io(&path))?;
            let mut before = String::new();
            let _ = file.read_to_string(&mut before);
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let holder = before.trim();
                return Err(ModelError::Checkpoint {
                    path: dir.to_path_buf(),
                    message: format!(
                        "another run (process {}) is writing checkpoints here: two runs would replace each other's; wait for it, or give this one another --checkpoint-dir",
                        if holder.is_empty() { "?" } else { holder }
                    ),
                });
            }
            let same = fs::metadata(&path)
                .ok()
                .zip(file.metadata().ok())
                .is_some_and(|(p, f)| p.ino() == f.ino() && p.dev() == f.dev());
            if !same {
                continue;
            }
            file.set_len(0).map_err(ModelError::io(&path))?;
            file.rewind().map_err(ModelError::io(&path))?;
            writeln!(file, "{}", std::process::id()).map_err(ModelError::io(&path))?;
            let taken_over = Some(before.trim().to_string()).filter(|s| !s.is_empty());
            return Ok(DirLock {
                path,
                _file: file,
                taken_over,
            });
        }
        Err(ModelError::Checkpoint {
            path: path.clone(),
            message: "cannot take the folder's lock: other runs keep replacing it".into(),
        })
    }

    /// The process id a lock file left behind named, when this lock took it over (its
    /// process had ended without removing it: a kill, a crash).
    pub fn taken_over(&self) -> Option<&str> {
        self.taken_over.as_deref()
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while the flock is held, then released when the file closes.
        let _ = fs::remove_file(&self.path);
    }
}

/// Saves `session` and `state` as `dir/<name>` (`step-<N>` for periodic checkpoints,
/// `best`, ...), replacing a checkpoint of that name (never anything wick did not write:
/// see its `wick-checkpoint` marker). Returns its folder.
pub fn save(
    session: &impl Checkpointable,
    state: &TrainingState,
    dir: &Path,
    name: &str,
) -> Result<PathBuf> {
    fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    check_replaceable(&dir.join(name))?;
    let partial = dir.join(format!(".{name}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(ModelError::io(&partial))?;
    }
    fs::create_dir(&partial).map_err(ModelError::io(&partial))?;
    session.save_weights(&partial.join(MODEL))?;
    let buffers: HashMap<String, Tensor> = session.optimizer_state()?.into_iter().collect();
    let mut meta: HashMap<String, String> = state
        .fields
        .iter()
        .map(|(k, v)| (format!("field.{k}"), v.clone()))
        .collect();
    meta.insert("step".into(), state.step.to_string());
    meta.insert("epoch".into(), state.epoch.to_string());
    let cpu: HashMap<String, Tensor> = buffers
        .into_iter()
        .map(|(k, v)| Ok((k, v.to_device(&Device::Cpu)?)))
        .collect::<Result<_>>()?;
    let bytes =
        safetensors::tensor::serialize(&cpu, Some(meta)).map_err(|e| ModelError::Checkpoint {
            path: partial.join(TRAINING),
            message: format!("cannot serialise the training state: {e}"),
        })?;
    wick_graph::atomic_write::write_bytes_atomically(&partial.join(TRAINING), &bytes)?;
    let marker = format!("a wick training checkpoint, step {}\n", state.step);
    wick_graph::atomic_write::write_bytes_atomically(&partial.join(MARKER), marker.as_bytes())?;
    let target = dir.join(name);
    let old = dir.join(format!(".{name}.old"));
    if target.exists() {
        if old.exists() {
            fs::remove_dir_all(&old).map_err(ModelError::io(&old))?;
        }
        fs::rename(&target, &old).map_err(ModelError::io(&target))?;
    }
    fs::rename(&partial, &target).map_err(ModelError::io(&target))?;
    if old.exists() {
        fs::remove_dir_all(&old).map_err(ModelError::io(&old))?;
    }
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(target)
}

/// Whether `dir` is one checkpoint (its model and training state), not a run's folder.
pub fn is_checkpoint(dir: &Path) -> bool {
    dir.join(MODEL).is_file() && dir.join(TRAINING).is_file()
}

/// Where a run resumed from `resume` writes its checkpoints without --checkpoint-dir: the
/// run's folder (the parent of a checkpoint given itself).
pub fn run_folder_of(resume: &Path) -> PathBuf {
    match resume.parent() {
        Some(parent) if is_checkpoint(resume) => parent.to_path_buf(),
        _ => resume.to_path_buf(),
    }
}

/// The periodic checkpoints in `dir` (`step-<N>`), oldest first.
pub fn periodic(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut found: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .map_err(ModelError::io(dir))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("step-")?.parse().ok()?;
            let complete = e.path().join(TRAINING).exists() && e.path().join(MODEL).exists();
            (complete && is_wicks(&e.path())).then(|| (step, e.path()))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Keeps the `keep` newest periodic checkpoints in `dir` and removes the rest, and any
/// partial folder a killed save left.
pub fn prune(dir: &Path, keep: usize) -> Result<()> {
    let all = periodic(dir)?;
    for (_, path) in &all[..all.len().saturating_sub(keep)] {
        fs::remove_dir_all(path).map_err(ModelError::io(path))?;
    }
    for e in fs::read_dir(dir).map_err(ModelError::io(dir))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && (name.ends_with(".partial") || name.ends_with(".old")) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    Ok(())
}

/// The step, epoch and fields a checkpoint folder records, without loading its tensors.
pub fn read_state(ckpt: &Path) -> Result<TrainingState> {
    let path = ckpt.join(TRAINING);
    let bytes = fs::read(&path).map_err(ModelError::io(&path))?;
    let bad = |message: String| ModelError::Checkpoint {
        path: path.clone(),
        message,
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| bad(format!("not a training state: {e}")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let counter = |key: &str| -> Result<u64> {
        let value = meta
            .get(key)
            .ok_or_else(|| bad(format!("no `{key}` counter in its metadata")))?;
        value.parse().map_err(|_| {
            bad(format!(
                "its `{key}` counter is {value:?}, not a count of steps: the file was edited or damaged"
            ))
        })
    };
    let state = TrainingState {
        step: counter("step")?,
        epoch: counter("epoch")?,
        fields: meta
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("field.")?.to_string(), v.clone())))
            .collect(),
    };
    Ok(state)
}

/// Loads checkpoint folder `ckpt` into `session` (a training session of the same model
/// and batch shape) and returns its state.
pub fn load(session: &mut impl Checkpointable, ckpt: &Path) -> Result<TrainingState> {
    session.load_weights(&ckpt.join(MODEL))?;
    let state = read_state(ckpt)?;
    let path = ckpt.join(TRAINING);
    let tensors = read_safetensors(&path)?;
    session
        .set_optimizer_state(&tensors, state.step)
        .map_err(|e| ModelError::Checkpoint {
            path,
            message: e.to_string(),
        })?;
    Ok(state)
}
