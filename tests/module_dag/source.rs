//! A crate's files, each with the paths it names and the names it re-exports, resolved to
//! the module whose file defines each item.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::graph::ModPath;
use crate::text::{code_only, expand, is_ident, tokens};

pub struct SourceFile {
    /// Every path the file names: each one absolute from the crate root.
    pub paths: Vec<ModPath>,
    /// `pub use` re-exports: the name they give, to the absolute path they name.
    pub reexports: BTreeMap<String, ModPath>,
}

/// Source text with comments, string and char literals blanked, and every `#[cfg(test)]`
pub struct Crate {
    root: PathBuf,
    pub files: BTreeMap<ModPath, SourceFile>,
}

impl Crate {
    fn module_file(&self, m: &ModPath) -> Option<PathBuf> {
        if m.is_empty() {
            return Some(self.root.join("lib.rs"));
        }
        let base = m.iter().fold(self.root.clone(), |p, s| p.join(s));
        let flat = base.with_extension("rs");
        let nested = base.join("mod.rs");
        [flat, nested].into_iter().find(|p| p.exists())
    }

    /// Makes a path absolute, from the module that names it.
    fn absolute(&self, from: &ModPath, path: &[String]) -> Option<ModPath> {
        let mut p = path.to_vec();
        let mut base: ModPath;
        match p.first().map(String::as_str) {
            Some("crate") => {
                base = Vec::new();
                p.remove(0);
            }
            Some("self") => {
                base = from.clone();
                p.remove(0);
            }
            Some("super") => {
                base = from.clone();
                while p.first().map(String::as_str) == Some("super") {
                    base.pop();
                    p.remove(0);
                }
            }
            Some(first) => {
                // A child module named without `self::` (2018 paths).
                let mut child = from.clone();
                child.push(first.to_string());
                self.module_file(&child)?;
                base = from.clone();
            }
            None => return None,
        }
        base.extend(p);
        Some(base)
    }

    /// The module whose file defines the item an absolute path names.
    pub fn resolve(&self, path: &ModPath, depth: usize) -> ModPath {
        let mut module = Vec::new();
        let mut rest = path.as_slice();
        while let Some(seg) = rest.first() {
            let mut next = module.clone();
            next.push(seg.clone());
            if self.module_file(&next).is_none() {
                break;
            }
            module = next;
            rest = &rest[1..];
        }
        if let (Some(name), Some(file)) = (rest.first(), self.files.get(&module)) {
            if let Some(target) = file.reexports.get(name) {
                if depth < 16 {
                    let mut full = target.clone();
                    full.extend(rest[1..].iter().cloned());
                    return self.resolve(&full, depth + 1);
                }
            }
        }
        module
    }
}

fn module_of(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: ModPath = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            // A crate's binaries are crates of their own.
            if p.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

pub fn load(root: &Path) -> Crate {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    let mut krate = Crate {
        root: root.to_path_buf(),
        files: BTreeMap::new(),
    };
    let mut raw = Vec::new();
    for p in paths {
        let module = module_of(root, &p);
        raw.push((module, code_only(&std::fs::read_to_string(&p).unwrap())));
    }
    for (module, code) in &raw {
        let mut file = SourceFile {
            paths: Vec::new(),
            reexports: BTreeMap::new(),
        };
        let bindings = use_statements(&krate, module, code, &mut file);
        inline_paths(&krate, module, &without_uses(code), &bindings, &mut file);
        krate.files.insert(module.clone(), file);
    }
    krate
}

/// Reads a file's `use` statements into its paths and re-exports; returns the names they
/// bind, each to its absolute path.
fn use_statements(
    krate: &Crate,
    module: &ModPath,
    code: &str,
    file: &mut SourceFile,
) -> BTreeMap<String, ModPath> {
    let mut bindings = BTreeMap::new();
    let mut search = 0;
    while let Some(at) = code[search..].find("use ") {
        let start = search + at;
        search = start + 4;
        let before = code[..start].chars().next_back();
        if before.is_some_and(is_ident) {
            continue;
        }
        let end = start + code[start..].find(';').unwrap();
        let toks = tokens(&code[start + 4..end]);
        let mut bound = Vec::new();
        let mut pos = 0;
        expand(&toks, &mut pos, &Vec::new(), &mut bound);
        let public =
            code[..start].trim_end().ends_with("pub") || code[..start].trim_end().ends_with(')');
        for (path, name) in bound {
            let Some(abs) = krate.absolute(module, &path) else {
                continue;
            };
            // A re-export is followed, not a dependency of the file that makes it: the
            // facade uses nothing it re-exports.
            if public && name != "*" {
                file.reexports.insert(name, abs);
                continue;
            }
            if name != "*" {
                bindings.insert(name, abs.clone());
            }
            file.paths.push(abs);
        }
        search = end;
    }
    bindings
}

/// The code with each `use` statement blanked: its paths are read by [`use_statements`].
fn without_uses(code: &str) -> String {
    let mut out = code.to_string();
    let mut search = 0;
    while let Some(at) = code[search..].find("use ") {
        let start = search + at;
        search = start + 4;
        if code[..start].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let end = start + code[start..].find(';').unwrap();
        out.replace_range(start..end, &" ".repeat(end - start));
        search = end;
    }
    out
}

/// Reads every path in the code (`a::b::c`, outside `use` statements too) whose first
/// segment is `crate`, `super`, `self`, a child module, or a name a `use` bound.
fn inline_paths(
    krate: &Crate,
    module: &ModPath,
    code: &str,
    bindings: &BTreeMap<String, ModPath>,
    file: &mut SourceFile,
) {
    let mut search = 0;
    while let Some(at) = code[search..].find("::") {
        let sep = search + at;
        search = sep + 2;
        let start = code[..sep]
            .rfind(|c: char| !is_ident(c))
            .map_or(0, |i| i + 1);
        if start == sep || code[..start].ends_with(':') {
            continue;
        }
        let end = code[start..]
            .find(|c: char| !(is_ident(c) || c == ':'))
            .map_or(code.len(), |e| start + e);
        search = end.max(search);
        let segs: ModPath = code[start..end]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let abs = match bindings.get(&segs[0]) {
            Some(bound) if !matches!(segs[0].as_str(), "crate" | "super" | "self") => {
                let mut full = bound.clone();
                full.extend(segs[1..].iter().cloned());
                Some(full)
            }
            _ => krate.absolute(module, &segs),
        };
        if let Some(abs) = abs {
            file.paths.push(abs);
        }
    }
}
