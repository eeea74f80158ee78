//! Files wick writes (checkpoints, profiles, traces): only where asked, atomically and
//! durably.
//!
//! - **Where:** a symlink is followed to its target, which is replaced; the link stays. A
//!   target that exists and is not a regular file (a directory, a device such as
//!   `/dev/null`, a FIFO, a socket) is refused.
//! - **Atomically:** the bytes go to a temporary file beside the target, which is flushed
//!   to disk (`fsync`) and renamed over the target; the folder is then flushed too. A
//!   reader, or a crash at any moment, sees the complete old file or the complete new one.
//! - **Temporary files** are named `.<target name>.wick-partial.<pid>.<n>`: hidden, and never
//!   ending in the target's extension, so nothing mistakes one for a checkpoint. One left
//!   by a killed process is removed by the next write of the same target.
//! - **Permissions:** a replaced file keeps its mode; a new one gets the umask's.
//! - [`check_writable`] checks all of this before a long run starts, so that a typo in an
//!   output path does not lose the run's result.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file wick could not write, or will not: the path and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct OutputError {
    /// The path as the caller gave it (and its resolved target, where that differs).
    pub path: String,
    /// What is wrong, with the OS error where there is one.
    pub problem: String,
}

fn error(path: &Path, problem: impl Into<String>) -> OutputError {
    OutputError {
        path: path.display().to_string(),
        problem: problem.into(),
    }
}

/// What marks a temporary file of wick's: `.<target name><MARKER>.<pid>.<n>`.
pub const PARTIAL_MARKER: &str = ".wick-partial";

/// Symlinks followed before giving up (Linux's own limit is 40).
const MAX_LINKS: usize = 40;

/// The file that writing `path` replaces: `path`, or where its chain of symlinks ends.
/// Errors when a link loops, or when the target exists and is not a regular file.
pub fn resolve_target(path: &Path) -> Result<PathBuf, OutputError> {
    if path.as_os_str().to_string_lossy().ends_with('/') {
        return Err(error(
            path,
            "ends with '/', which names a folder: give a file name",
        ));
    }
    // What the path leads to, links followed (a pipe behind /dev/stdout has no path).
    if let Ok(meta) = fs::metadata(path) {
        if !meta.is_file() {
            let what = describe(&meta.file_type());
            return Err(error(
                path,
                format!("leads to {what}, not a regular file: wick writes only regular files, atomically (a temporary file beside it, then renamed over it), which {what} cannot take"),
            ));
        }
    }
    let mut target = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let meta = match fs::symlink_metadata(&target) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(target),
            Err(e) => return Err(error(path, format!("cannot inspect: {e}"))),
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            let link = fs::read_link(&target)
                .map_err(|e| error(path, format!("cannot read the symlink: {e}")))?;
            target = match target.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link,
            };
            continue;
        }
        if kind.is_file() {
            return Ok(target);
        }
        let what = describe(&kind);
        let shown = if target == path {
            format!("is {what}, not a regular file: wick writes only regular files")
        } else {
            format!(
                "leads to {} ({what}), not a regular file: wick writes only regular files",
                target.display()
            )
        };
        return Err(error(path, shown));
    }
    Err(error(
        path,
        format!("more than {MAX_LINKS} symlinks (a loop?)"),
    ))
}

#[cfg(unix)]
fn describe(kind: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn describe(kind: &fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// The folder a target lives in (`.` for a bare file name).
fn folder(target: &Path) -> PathBuf {
    match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The longest target name kept whole in a temporary file's name: with the marker, the
/// process id and a counter it stays within the 255 bytes every Linux filesystem allows.
const KEPT_NAME_BYTES: usize = 160;

/// The prefix of every temporary file of `target`. A long name (any legal one, up to 255
/// bytes) is cut and tagged with a hash of the whole, so the temporary name is legal too.
fn partial_prefix(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.len() <= KEPT_NAME_BYTES {
        return format!(".{name}{PARTIAL_MARKER}.");
    }
    let mut cut = KEPT_NAME_BYTES;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!(".{}~{hash:016x}{PARTIAL_MARKER}.", &name[..cut])
}

/// Whether wick may replace a read-only file (see [`allow_read_only_replacement`]).
static REPLACE_READ_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets this process replace read-only files. By default a file with no write permission
/// is refused, as `cp` or `torch.save` would refuse it: replacing it through a rename
/// would bypass the permission its owner set. The examples' `--replace-read-only` calls
/// this.
pub fn allow_read_only_replacement(allow: bool) {
    REPLACE_READ_ONLY.store(allow, Ordering::Relaxed);
}

/// Refuses a read-only `target` unless allowed.
fn check_not_read_only(path: &Path, target: &Path) -> Result<(), OutputError> {
    match fs::metadata(target) {
        Ok(meta)
            if meta.permissions().readonly() && !REPLACE_READ_ONLY.load(Ordering::Relaxed) =>
        {
            Err(error(
                path,
                "is read-only: wick would replace it, bypassing its permissions; make it writable, or pass --replace-read-only",
            ))
        }
        _ => Ok(()),
    }
}

static NEXT_PARTIAL: AtomicU64 = AtomicU64::new(0);

/// Creates a new temporary file beside `target` (never an existing one).
fn create_partial(path: &Path, target: &Path) -> Result<(PathBuf, File), OutputError> {
    let dir = folder(target);
    match fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(error(path, format!("{} is not a folder", dir.display()))),
        Err(e) => {
            return Err(error(
                path,
                format!("its folder {} is not usable: {e}", dir.display()),
            ))
        }
    }
    let n = NEXT_PARTIAL.fetch_add(1, Ordering::Relaxed);
    let partial = dir.join(format!(
        "{}{}.{n}",
        partial_prefix(target),
        std::process::id()
    ));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
        .map_err(|e| error(path, format!("cannot create {}: {e}", partial.display())))?;
    Ok((partial, file))
}

/// Checks, before any work, that `path` can be written: its target (after symlinks) is a
/// regular file or absent, and its folder exists and takes new files (tried by creating
/// and removing a temporary file). Returns the target.
pub fn check_writable(path: &Path) -> Result<PathBuf, OutputError> {
    let target = resolve_target(path)?;
    check_not_read_only(path, &target)?;
    let (partial, file) = create_partial(path, &target)?;
    drop(file);
    fs::remove_file(&partial)
        .map_err(|e| error(path, format!("cannot remove {}: {e}", partial.display())))?;
    Ok(target)
}

/// Writes what `write` produces to `path` atomically and durably (see the module docs).
/// On any error the target is untouched and the temporary file removed.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), OutputError> {
    let target = resolve_target(path)?;
    check_not_read_only(path, &target)?;
    remove_stale_partials(&target);
    let (partial, file) = create_partial(path, &target)?;
    let result = fill_and_replace(path, &target, &partial, file, write);
    if result.is_err() {
        let _ = fs::remove_file(&partial);
    }
    result
}

/// [`write_atomically`] for bytes already in memory.
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_atomically(path, |w| w.write_all(bytes))
}

fn fill_and_replace(
    path: &Path,
    target: &Path,
    partial: &Path,
    file: File,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), OutputError> {
    let failed = |what: &str, e: io::Error| error(path, format!("{what}: {e}"));
    if let Ok(meta) = fs::metadata(target) {
        file.set_permissions(meta.permissions())
            .map_err(|e| failed("cannot keep the file's permissions", e))?;
    }
    let mut out = BufWriter::with_capacity(1 << 20, file);
    write(&mut out).map_err(|e| failed("writing", e))?;
    let file = out
        .into_inner()
        .map_err(|e| failed("writing", e.into_error()))?;
    file.sync_all().map_err(|e| failed("flushing to disk", e))?;
    drop(file);
    fs::rename(partial, target).map_err(|e| {
        failed(
            &format!("renaming {} over {}", partial.display(), target.display()),
            e,
        )
    })?;
    // The rename is durable once the folder's entry is; some file systems cannot sync a
    // folder (the file itself is already on disk), so that failure is not an error.
    if let Ok(dir) = File::open(folder(target)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Removes temporary files of `target` left by processes that no longer run (killed
/// mid-write). Files of running processes, this one included, are left alone. Needs
/// `/proc` to tell (Linux); elsewhere nothing is removed.
fn remove_stale_partials(target: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = partial_prefix(target);
    let Ok(entries) = fs::read_dir(folder(target)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let pid = rest.split('.').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !process_runs(pid) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Whether process `pid` exists and is not a zombie (killed, not yet reaped).
fn process_runs(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: "pid (comm) S ...".
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("wick-out-")
            .tempdir()
            .unwrap()
    }

    fn leftovers(d: &Path) -> Vec<String> {
        fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(PARTIAL_MARKER))
            .collect()
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_file() {
        let d = dir();
        let p = d.path().join("a.json");
        write_bytes_atomically(&p, b"old").unwrap();
        write_bytes_atomically(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert!(leftovers(d.path()).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn writes_through_a_symlink_and_keeps_the_link_and_the_mode() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let d = dir();
        let real = d.path().join("real.bin");
        fs::write(&real, b"old").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.path().join("link.bin");
        symlink("real.bin", &link).unwrap();
        write_bytes_atomically(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        let mode = fs::metadata(&real).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[cfg(unix)]
    #[test]
    fn refuses_devices_folders_fifos_and_link_loops() {
        use std::os::unix::fs::symlink;
        let d = dir();
        let e = write_bytes_atomically(Path::new("/dev/null"), b"x").unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = write_bytes_atomically(d.path(), b"x").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = check_writable(&fifo).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        symlink("b", d.path().join("a")).unwrap();
        symlink("a", d.path().join("b")).unwrap();
        let e = check_writable(&d.path().join("a")).unwrap_err();
        assert!(e.to_string().contains("symlinks"), "{e}");
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_it_before_any_work() {
        let d = dir();
        let p = d.path().join("no-such-folder").join("out.json");
        let e = check_writable(&p).unwrap_err();
        assert!(e.to_string().contains("no-such-folder"), "{e}");
    }

    #[test]
    fn a_failing_writer_leaves_the_old_file_and_no_temporary_file() {
        let d = dir();
        let p = d.path().join("a.json");
        write_bytes_atomically(&p, b"old").unwrap();
        let e = write_atomically(&p, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert!(leftovers(d.path()).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_dead_process_temporary_file_is_removed_by_the_next_write() {
        let d = dir();
        let p = d.path().join("a.json");
        // pid_max is at most 2^22 on Linux: this pid never runs.
        let stale = d
            .path()
            .join(format!(".a.json{PARTIAL_MARKER}.4294967295.0"));
        fs::write(&stale, b"partial").unwrap();
        let ours = d.path().join(format!(
            ".a.json{PARTIAL_MARKER}.{}.999",
            std::process::id()
        ));
        fs::write(&ours, b"in use").unwrap();
        write_bytes_atomically(&p, b"new").unwrap();
        assert!(!stale.exists(), "the dead process's file is removed");
        assert!(ours.exists(), "a running process's file is left alone");
    }
}
