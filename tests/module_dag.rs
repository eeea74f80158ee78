//! Every wick crate's source files form a DAG: no file depends, directly or through
//! others, on itself. A file depends on another when it names an item defined there:
//! through a `use`, through a `crate::` / `super::` / `self::` path, or through a path
//! whose first segment is a child module (`fold_batch_norm::run(graph)` in
//! `passes/mod.rs`) or a name a `use` bound (`use super::conv; conv::run()`). Re-exports
//! (`pub use`) are followed to the file that defines the item, so a facade such as
//! `lib.rs` does not close a cycle by itself: a re-export is not a dependency of the file
//! that makes it. `mod` declarations are not dependencies either;
//! `#[cfg(test)]` items are left out, and the code after them is read.
//!
//! The crates: wick-ops, wick-graph, wick-profiler, wick-models and wick itself (`src/`,
//! without its binaries). Each crate's top-level modules (`ops`, `passes`, `views`, ...)
//! also form a DAG. Run it alone with `cargo test --test module_dag -- --nocapture`: it
//! prints each crate's files and edges; on a cycle it prints the files of each strongly
//! connected component and the edges that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root, e.g. `["profiler", "trace"]`.
type ModPath = Vec<String>;

struct SourceFile {
    /// Every path the file names: each one absolute from the crate root.
    paths: Vec<ModPath>,
    /// `pub use` re-exports: the name they give, to the absolute path they name.
    reexports: BTreeMap<String, ModPath>,
}

/// Source text with comments, string and char literals blanked, and every `#[cfg(test)]`
/// item removed (the code after it stays).
fn code_only(text: &str) -> String {
    without_test_items(&blank_comments_and_literals(text))
}

/// Removes each `#[cfg(test)]` attribute and the item it marks: up to its first `;`, or
/// through the braces it opens (a test module), whichever comes first.
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let end = match item.find(['{', ';']) {
            Some(i) if item.as_bytes()[i] == b'{' => {
                let mut depth = 0;
                let mut close = item.len();
                for (j, c) in item.char_indices().skip(i) {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                close = j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                close
            }
            Some(i) => i + 1,
            None => item.len(),
        };
        out.push(' ');
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Source text with comments, string and char literals blanked.
fn blank_comments_and_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut end = j + 1;
            while end < b.len() {
                if b[end] == b'"'
                    && b[end + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    break;
                }
                end += 1;
            }
            i = end + 1 + hashes;
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A char literal ('x' or an escape); a lifetime has no closing quote.
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Tokens of a `use` tree: identifiers, `::`, `{`, `}`, `,`, `*`, `as`.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_ident(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else {
            if "{},*".contains(c) {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// Expands a `use` tree into (path, name it binds) pairs.
fn expand(toks: &[String], pos: &mut usize, prefix: &ModPath, out: &mut Vec<(ModPath, String)>) {
    let mut path = prefix.clone();
    while *pos < toks.len() {
        let t = toks[*pos].as_str();
        match t {
            "::" => *pos += 1,
            "{" => {
                *pos += 1;
                while *pos < toks.len() && toks[*pos] != "}" {
                    expand(toks, pos, &path, out);
                    if *pos < toks.len() && toks[*pos] == "," {
                        *pos += 1;
                    }
                }
                *pos += 1;
                return;
            }
            "," | "}" => break,
            "*" => {
                *pos += 1;
                out.push((path.clone(), "*".into()));
                return;
            }
            "as" => {
                let alias = toks[*pos + 1].clone();
                *pos += 2;
                out.push((path.clone(), alias));
                return;
            }
            _ => {
                path.push(t.to_string());
                *pos += 1;
            }
        }
    }
    if path.len() > prefix.len() {
        let name = path.last().unwrap().clone();
        out.push((path, name));
    }
}

struct Crate {
    root: PathBuf,
    files: BTreeMap<ModPath, SourceFile>,
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
    fn resolve(&self, path: &ModPath, depth: usize) -> ModPath {
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

fn load(root: &Path) -> Crate {
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

/// Each file's dependencies: the modules whose files define what it names.
fn edges(krate: &Crate) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut out = BTreeMap::new();
    for (module, file) in &krate.files {
        let deps: BTreeSet<ModPath> = file
            .paths
            .iter()
            .map(|p| krate.resolve(p, 0))
            .filter(|m| m != module)
            .collect();
        out.insert(module.clone(), deps);
    }
    out
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

fn report(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> String {
    let mut text = String::new();
    for comp in cycles(graph) {
        let members: BTreeSet<&ModPath> = comp.iter().collect();
        text += &format!(
            "cycle of {} files: {}\n",
            comp.len(),
            comp.iter().map(name).collect::<Vec<_>>().join(", ")
        );
        for m in &comp {
            for d in &graph[m] {
                if members.contains(d) {
                    text += &format!("  {} -> {}\n", name(m), name(d));
                }
            }
        }
    }
    text
}

/// The same graph with each top-level module (`ops`, `passes`, `views`, ...) as one node.
fn top_level(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let top = |m: &ModPath| m.iter().take(1).cloned().collect::<ModPath>();
    let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (m, deps) in graph {
        let entry = out.entry(top(m)).or_default();
        entry.extend(deps.iter().map(top).filter(|d| *d != top(m)));
    }
    out
}

/// Every crate of the workspace: its name and its source folder.
fn crates() -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        ("wick-ops", root.join("crates/ops/src")),
        ("wick-graph", root.join("crates/graph/src")),
        ("wick-profiler", root.join("crates/profiler/src")),
        ("wick-models", root.join("crates/models/src")),
        ("wick", root.join("src")),
    ]
}

fn module(path: &str) -> ModPath {
    path.split("::").map(String::from).collect()
}

#[test]
fn every_crates_modules_form_a_dag() {
    let mut failures = String::new();
    for (name, src) in crates() {
        let graph = edges(&load(&src));
        let count: usize = graph.values().map(BTreeSet::len).sum();
        println!("{name}: {} files, {count} edges", graph.len());
        let files = report(&graph);
        let tops = report(&top_level(&graph));
        if !files.is_empty() {
            failures += &format!("{name}'s files have cycles:\n{files}");
        }
        if !tops.is_empty() {
            failures += &format!("{name}'s top-level modules have cycles:\n{tops}");
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

#[test]
fn the_check_sees_real_dependencies() {
    let graph = edges(&load(&crates()[1].1));
    // The executor names the IR and the hooks; passes/mod.rs calls its passes through
    // their child modules, with no `use` of them.
    let exec = &graph[&module("executor")];
    assert!(exec.contains(&module("ir::graph")), "{exec:?}");
    assert!(exec.contains(&module("hooks")), "{exec:?}");
    let passes = &graph[&module("passes")];
    assert!(
        passes.contains(&module("passes::fold_batch_norm")),
        "{passes:?}"
    );
    // The profiler's record part names the graph's hooks through wick_graph, not a file
    // here, and its recorder names the profile it fills.
    let profiler = edges(&load(&crates()[2].1));
    let recorder = &profiler[&module("record::recorder")];
    assert!(recorder.contains(&module("profile::data")), "{recorder:?}");
}

/// Writes the planted files (path, text) into a fresh folder and returns the report of
/// its cycles.
fn planted(case: &str, files: &[(&str, &str)]) -> String {
    let dir = std::env::temp_dir().join(format!("wick-module-dag-{}-{case}", std::process::id()));
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let text = report(&edges(&load(&dir)));
    std::fs::remove_dir_all(&dir).unwrap();
    text
}

#[test]
fn the_check_finds_a_planted_cycle_through_a_reexport() {
    let files = |conv: &'static str| {
        [
            ("lib.rs", "pub mod a;\npub mod ops;\npub use a::Thing;\n"),
            (
                "a.rs",
                "use crate::ops::conv::Conv; // uses ops\npub struct Thing;\n",
            ),
            ("ops/mod.rs", "pub mod conv;\n"),
            ("ops/conv.rs", conv),
        ]
    };
    let text = planted(
        "reexport",
        &files("pub struct Conv(crate::Thing);\nconst S: &str = \"crate::x\";\n"),
    );
    println!("{text}");
    assert!(text.contains("cycle of 2 files: a, ops::conv"), "{text}");
    // Without the back edge through the re-export, it is a DAG.
    assert!(planted("reexport-dag", &files("pub struct Conv;\n")).is_empty());
}

#[test]
fn the_check_finds_a_planted_cycle_through_a_child_call() {
    // passes/mod.rs calls its child with no `use`; the child imports a helper back.
    let files = |child: &'static str| {
        [
            ("lib.rs", "pub mod passes;\n"),
            (
                "passes/mod.rs",
                "mod fold;\npub fn remove_nodes() {}\npub fn run() { fold::run() }\n",
            ),
            ("passes/fold.rs", child),
        ]
    };
    let text = planted(
        "child",
        &files("use super::remove_nodes;\npub fn run() { remove_nodes() }\n"),
    );
    println!("{text}");
    assert!(
        text.contains("cycle of 2 files: passes, passes::fold"),
        "{text}"
    );
    assert!(planted("child-dag", &files("pub fn run() {}\n")).is_empty());
}

#[test]
fn the_check_reads_code_after_a_test_module() {
    // The back edge sits after a `#[cfg(test)]` module; the test module's own `use` of
    // `a` is left out.
    let b = |after: &'static str| {
        [
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", after),
        ]
    };
    let text = planted(
        "after-test",
        &b("pub struct B;\n#[cfg(test)]\nmod tests {\n    fn f() { if true { } }\n}\npub fn g() -> crate::a::A { crate::a::A }\n"),
    );
    println!("{text}");
    assert!(text.contains("cycle of 2 files: a, b"), "{text}");
    let test_only = planted(
        "test-only",
        &b("pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n"),
    );
    assert!(test_only.is_empty(), "{test_only}");
}
