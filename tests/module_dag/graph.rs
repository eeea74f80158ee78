//! The dependency graph of a crate's files, its cycles (Tarjan's strongly connected
//! components) and their report.

use std::collections::{BTreeMap, BTreeSet};

use crate::source::Crate;

/// A module path from the crate root, e.g. `["profiler", "trace"]`.
pub type ModPath = Vec<String>;

/// Each file's dependencies: the modules whose files define what it names.
pub fn edges(krate: &Crate) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
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

pub fn report(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> String {
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
pub fn top_level(
    graph: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let top = |m: &ModPath| m.iter().take(1).cloned().collect::<ModPath>();
    let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (m, deps) in graph {
        let entry = out.entry(top(m)).or_default();
        entry.extend(deps.iter().map(top).filter(|d| *d != top(m)));
    }
    out
}
