//! One file, one writer: the files a command reads and writes, by flag. An output that is
//! another of the command's inputs or outputs is refused before any work, naming both
//! flags, however the two paths are spelled: files that exist are compared by device and
//! inode (a symlink, a hard link, `./a` and `/abs/a` are one file), files that do not yet
//! exist by their canonical folder and name.
//!
//! ```
//! use wick::file_roles::FileRoles;
//! let dir = std::env::temp_dir();
//! let mut files = FileRoles::default();
//! files.output("--json", &dir.join("wick-doc-p.json"))?;
//! let clash = files.output("--report", &dir.join(".").join("wick-doc-p.json"));
//! assert!(clash.unwrap_err().to_string().contains("--json"));
//! # Ok::<(), wick_graph::OutputError>(())
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use wick_graph::atomic_write::{check_writable, resolve_target, OutputError};

/// Where a file is, whatever the spelling of its path: its device and inode when it
/// exists, and its canonical path (for a new file, its canonical folder and its name).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    inode: Option<(u64, u64)>,
    path: Option<PathBuf>,
}

impl Identity {
    fn same(&self, other: &Identity) -> bool {
        (self.inode.is_some() && self.inode == other.inode)
            || (self.path.is_some() && self.path == other.path)
    }
}

fn identity(path: &Path) -> Identity {
    // A folder or a device is not a file wick writes, but it is still one place.
    let target = resolve_target(path).unwrap_or_else(|_| path.to_path_buf());
    let inode = fs::metadata(&target).ok().map(|meta| {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    });
    let canonical = fs::canonicalize(&target).ok().or_else(|| {
        let name = target.file_name()?;
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Some(fs::canonicalize(parent).ok()?.join(name))
    });
    Identity {
        inode,
        path: canonical,
    }
}

/// Where `path` is, for a containment check: its canonical place (see [`identity`]), or,
/// when neither it nor its folder exists yet, its absolute path with `.` and `..`
/// resolved by their names.
fn place(path: &Path, identity: &Identity) -> Option<PathBuf> {
    if let Some(p) = &identity.path {
        return Some(p.clone());
    }
    let absolute = std::env::current_dir().ok()?.join(path);
    let mut out = PathBuf::new();
    for c in absolute.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// One file's role in a command.
#[derive(Debug, Clone)]
struct Entry {
    flag: String,
    path: PathBuf,
    identity: Identity,
    output: bool,
    /// A folder the command writes as a whole (a checkpoint folder): no other output
    /// may be inside it.
    folder: bool,
}

/// The files of one command (see the module docs).
#[derive(Debug, Default)]
pub struct FileRoles {
    entries: Vec<Entry>,
}

impl FileRoles {
    /// Registers a file the command reads. It may be read under two flags, but no
    /// output may replace it.
    pub fn input(&mut self, flag: &str, path: &Path) -> Result<(), OutputError> {
        self.add(flag, path, false, false)
    }

    /// Registers a file the command writes: checks that it can be written (see
    /// [`check_writable`]) and that it is none of the command's other files.
    pub fn output(&mut self, flag: &str, path: &Path) -> Result<(), OutputError> {
        check_writable(path).map_err(|e| OutputError {
            path: format!("{flag} {}", e.path),
            problem: e.problem,
        })?;
        self.add(flag, path, true, false)
    }

    /// Registers a folder the command writes into (a checkpoint folder): it must be a
    /// folder that takes new files, or one its parent folder can take, and be none of the
    /// command's other files.
    pub fn output_dir(&mut self, flag: &str, path: &Path) -> Result<(), OutputError> {
        let fail = |problem: String| OutputError {
            path: format!("{flag} {}", path.display()),
            problem,
        };
        match fs::metadata(path) {
            Ok(meta) if !meta.is_dir() => {
                return Err(fail("exists and is not a folder".into()));
            }
            Ok(_) => {
                let probe = path.join(format!(".wick-probe.{}", std::process::id()));
                fs::File::create(&probe)
                    .map_err(|e| fail(format!("cannot create files in it: {e}")))?;
                let _ = fs::remove_file(&probe);
            }
            Err(_) if fs::symlink_metadata(path).is_ok() => {
                return Err(fail(
                    "is a symbolic link that leads nowhere (dangling) or around in a loop: point it at a folder, or remove it".into(),
                ));
            }
            Err(_) => {
                // Not there yet: its folder must take new entries (tried with a file that
                // is removed at once, so that a refused run leaves nothing behind).
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                let probe = parent.join(format!(".wick-probe.{}", std::process::id()));
                fs::File::create(&probe)
                    .map_err(|e| fail(format!("cannot be created in {}: {e}", parent.display())))?;
                let _ = fs::remove_file(&probe);
            }
        }
        self.add(flag, path, true, true)
    }

    fn add(
        &mut self,
        flag: &str,
        path: &Path,
        output: bool,
        folder: bool,
    ) -> Result<(), OutputError> {
        let identity = identity(path);
        if output {
            self.refuse_outputs_in_folders(flag, path, &identity, folder)?;
        }
        {
            let clash = self
                .entries
                .iter()
                .find(|e| (output || e.output) && e.identity.same(&identity));
            if let Some(other) = clash {
                let replaces = match (output, other.output) {
                    (true, true) => "one output would replace the other",
                    (true, false) => "the output would replace the input",
                    _ => "the input would be replaced by the output",
                };
                return Err(OutputError {
                    path: path.display().to_string(),
                    problem: format!(
                        "{flag} and {} ({}) name the same file: {replaces}; give each its own file",
                        other.flag,
                        other.path.display(),
                    ),
                });
            }
        }
        self.entries.push(Entry {
            flag: flag.to_string(),
            path: path.to_path_buf(),
            identity,
            output,
            folder,
        });
        Ok(())
    }

    /// Refuses an output inside a folder the command writes as a whole (a `--save` into
    /// the checkpoint folder's `best/` would be replaced, or replace it), and a folder
    /// that holds one of the outputs already registered.
    fn refuse_outputs_in_folders(
        &self,
        flag: &str,
        path: &Path,
        identity: &Identity,
        folder: bool,
    ) -> Result<(), OutputError> {
        let Some(here) = place(path, identity) else {
            return Ok(());
        };
        for e in self.entries.iter().filter(|e| e.output) {
            let Some(there) = place(&e.path, &e.identity) else {
                continue;
            };
            let new = (flag, path);
            let old = (e.flag.as_str(), e.path.as_path());
            let ((inner, inner_path), (outer, outer_path)) =
                if e.folder && here.starts_with(&there) && here != there {
                    (new, old)
                } else if folder && there.starts_with(&here) && here != there {
                    (old, new)
                } else {
                    continue;
                };
            return Err(OutputError {
                path: inner_path.display().to_string(),
                problem: format!(
                    "{inner} is inside {outer} {}, a folder wick writes and replaces as a whole: its checkpoints, markers and lock would overwrite it or be overwritten; write {inner} elsewhere",
                    outer_path.display()
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_under_two_spellings_or_a_link_is_refused_naming_both_flags() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let input = p.join("batch.safetensors");
        fs::write(&input, b"x").unwrap();
        std::os::unix::fs::symlink(&input, p.join("link")).unwrap();
        fs::hard_link(&input, p.join("hard")).unwrap();
        for other in [
            input.clone(),
            p.join("link"),
            p.join("hard"),
            p.join(".").join("batch.safetensors"),
        ] {
            let mut files = FileRoles::default();
            files.input("--input", &input).unwrap();
            let e = files.output("--output", &other).unwrap_err().to_string();
            assert!(
                e.contains("--output and --input (")
                    && e.contains("the output would replace the input"),
                "{e}"
            );
        }
        // Two outputs that do not exist yet, one spelled through `..`.
        let mut files = FileRoles::default();
        files.output("--json", &p.join("o.json")).unwrap();
        let sub = p.join("sub");
        fs::create_dir(&sub).unwrap();
        let e = files
            .output("--trace", &sub.join("..").join("o.json"))
            .unwrap_err();
        assert!(e.to_string().contains("--trace and --json ("), "{e}");
        // Two inputs may be one file; distinct outputs pass.
        let mut files = FileRoles::default();
        files.input("--a", &input).unwrap();
        files.input("--b", &p.join("link")).unwrap();
        files.output("--json", &p.join("a.json")).unwrap();
        files.output("--trace", &p.join("b.json")).unwrap();
        // A checkpoint folder that is a file, or the same as --save, is refused.
        let mut files = FileRoles::default();
        let e = files.output_dir("--checkpoint-dir", &input).unwrap_err();
        assert!(e.to_string().contains("not a folder"), "{e}");
        files.output("--save", &p.join("X")).unwrap();
        let e = files
            .output_dir("--checkpoint-dir", &p.join("X"))
            .unwrap_err();
        assert!(e.to_string().contains("--save"), "{e}");
    }

    #[test]
    fn an_output_inside_a_checkpoint_folder_is_refused_either_way_round() {
        let d = tempfile::tempdir().unwrap();
        let ck = d.path().join("ck");
        let inside = ck.join("best").join("model.safetensors");
        fs::create_dir_all(ck.join("best")).unwrap();
        fs::create_dir_all(d.path().join("x")).unwrap();
        let mut files = FileRoles::default();
        files.output_dir("--checkpoint-dir", &ck).unwrap();
        let e = files.output("--save", &inside).unwrap_err().to_string();
        assert!(
            e.contains("--save is inside --checkpoint-dir") && e.contains("write --save elsewhere"),
            "{e}"
        );
        // Spelled through `..`, and registered before the folder.
        let mut files = FileRoles::default();
        let sneaky = d.path().join("x").join("..").join("ck").join(".wick-lock");
        files.output("--log", &sneaky).unwrap();
        let e = files
            .output_dir("--checkpoint-dir", &ck)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--log is inside --checkpoint-dir"), "{e}");
        // Beside the folder is fine, and so is reading from it.
        let mut files = FileRoles::default();
        files.output_dir("--checkpoint-dir", &ck).unwrap();
        files
            .output("--save", &d.path().join("ck-final.safetensors"))
            .unwrap();
        files.input("--weights", &inside).unwrap();
    }
}
