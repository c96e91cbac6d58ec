//! The layer rule of docs/architecture.md, checked on every test run:
//! no import cycle between the crate's top-level modules (`crate::x`
//! paths outside `#[cfg(test)]` and `tests.rs` files, where a lower layer
//! may reach up in a unit test), nor between the rooms of `server/`
//! (`crate::server::x`: supervisor above worker above session above the
//! tables, the broker and the vocabulary they share). A cycle names the
//! files that make each of its edges.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Module of `src` -> the modules of `src` it names (as `prefix` + name)
/// -> the files naming them.
fn edges(src: &Path, prefix: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" || top == "mod" || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in code.match_indices(prefix) {
            let name: String = code[i + prefix.len()..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            if !name.is_empty() && name != top {
                edges.entry(top.clone()).or_default().entry(name).or_default().insert(rel.display().to_string());
            }
        }
    }
    edges
}

/// The strongly connected groups of more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        groups: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flat_map(|m| m.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let lw = self.low[w.as_str()];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.stack.contains(&w.as_str()) {
                    let iw = self.index[w.as_str()];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|s| *s == v).unwrap();
                let group: Vec<String> = self.stack.drain(at..).map(str::to_string).collect();
                if group.len() > 1 {
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), groups: Vec::new() };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.groups
}

/// Fails naming every edge of every cycle among the modules of `dir`.
fn assert_no_cycle(dir: &Path, prefix: &str, what: &str, at_least: usize) {
    let edges = edges(dir, prefix);
    assert!(edges.len() >= at_least, "the scan found the {what}: {:?}", edges.keys().collect::<Vec<_>>());
    let found = cycles(&edges);
    let mut explain = Vec::new();
    for g in &found {
        for a in g {
            for b in g {
                if let Some(files) = edges.get(a).and_then(|m| m.get(b)) {
                    explain.push(format!("{a} -> {b} in {files:?}"));
                }
            }
        }
    }
    assert!(found.is_empty(), "import cycles between {what}: {found:?}\n{}", explain.join("\n"));
}

#[test]
fn top_level_modules_import_each_other_one_way_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_no_cycle(&src, "crate::", "top-level modules", 10);
}

/// Sessions consume bytes with the worker's tables lent to them and name
/// nothing of the worker; the worker names no part of the supervisor;
/// the broker's vocabulary (commands, up_message) names no broker.
#[test]
fn the_rooms_of_the_server_import_each_other_one_way_only() {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    assert_no_cycle(&server, "crate::server::", "the rooms of server/", 8);
    let edges = edges(&server, "crate::server::");
    for (low, high) in [("session", "worker"), ("tables", "session"), ("tables", "worker"), ("worker", "supervisor"), ("broker", "worker")] {
        let files = edges.get(low).and_then(|m| m.get(high));
        assert!(files.is_none(), "server/{low} names server/{high}, a room above it, in {files:?}");
    }
}

/// The check itself finds a cycle where there is one.
#[test]
fn a_cycle_is_found() {
    let mut e: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (a, b) in [("net", "stats"), ("stats", "proto"), ("proto", "net"), ("cli", "net")] {
        e.entry(a.into()).or_default().entry(b.into()).or_default().insert("f.rs".into());
    }
    let mut found = cycles(&e);
    found.iter_mut().for_each(|g| g.sort());
    assert_eq!(found, vec![vec!["net".to_string(), "proto".into(), "stats".into()]]);
}
