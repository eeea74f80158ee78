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

mod graph;
mod source;
mod text;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use graph::{edges, report, top_level, ModPath};
use source::load;

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

/// Asserts that the check finds the 2-file cycle `cycle` in the planted `files`
/// (`case` names the scratch folder), and prints its report.
fn assert_cycle(case: &str, files: &[(&str, &str)], cycle: &str) {
    let text = planted(case, files);
    println!("{text}");
    assert!(
        text.contains(&format!("cycle of 2 files: {cycle}")),
        "{text}"
    );
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
    let files_with_back_edge =
        files("pub struct Conv(crate::Thing);\nconst S: &str = \"crate::x\";\n");
    assert_cycle("reexport", &files_with_back_edge, "a, ops::conv");
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
    let child_imports_back = files("use super::remove_nodes;\npub fn run() { remove_nodes() }\n");
    assert_cycle("child", &child_imports_back, "passes, passes::fold");
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
    let back_edge_after_tests = b("pub struct B;\n#[cfg(test)]\nmod tests {\n    fn f() { if true { } }\n}\npub fn g() -> crate::a::A { crate::a::A }\n");
    assert_cycle("after-test", &back_edge_after_tests, "a, b");
    let test_only = planted(
        "test-only",
        &b("pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n"),
    );
    assert!(test_only.is_empty(), "{test_only}");
}
