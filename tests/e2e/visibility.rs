//! The visibility rule of docs/architecture.md, checked on every test
//! run: a module is `pub` only if a user outside the library (src/main.rs,
//! this test binary, the fuzz targets) names it as `megaconn::<path>`.
//! The `unreachable_pub` lint (Cargo.toml) keeps every other item
//! crate-private, but it cannot see a `pub mod` nobody outside uses.
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

/// The module path a file under `src/` defines (`lib.rs` -> "",
/// `client/mod.rs` and `client.rs` -> "client", `client/x.rs` -> "client::x").
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if !matches!(stem, "lib" | "mod") {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// Every `pub mod name;` in `files` (relative path, text), as its full
/// path in the crate.
fn pub_mods(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut mods = Vec::new();
    for (rel, text) in files {
        let parent = module_of(rel);
        for line in text.lines() {
            if let Some(name) = line.strip_prefix("pub mod ").and_then(|l| l.strip_suffix(';')) {
                mods.push(if parent.is_empty() { name.to_string() } else { format!("{parent}::{name}") });
            }
        }
    }
    mods.sort();
    mods
}

/// The public modules no outside user names: `megaconn::<path>` followed
/// by `::` or `;` or `}` or `,` does not occur in `outside`.
fn unused(mods: &[String], outside: &str) -> Vec<String> {
    mods.iter()
        .filter(|m| {
            let named = format!("megaconn::{m}");
            !outside.match_indices(&named).any(|(i, _)| {
                let rest = &outside[i + named.len()..];
                rest.starts_with("::") || rest.starts_with(['{', ';', ',', '}'])
            })
        })
        .cloned()
        .collect()
}

/// What the users outside the library say: src/main.rs, tests/e2e and
/// the fuzz targets, in one text.
fn outside_text(root: &Path) -> String {
    let mut files = vec![root.join("src/main.rs")];
    sources(&root.join("tests/e2e"), &mut files);
    sources(&root.join("fuzz/fuzz_targets"), &mut files);
    // This file names modules in its own test; it is not a user.
    files.retain(|f| !f.ends_with("tests/e2e/visibility.rs"));
    files.iter().map(|f| std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()))).collect::<Vec<_>>().join("\n")
}

#[test]
fn every_pub_mod_is_named_by_a_user_outside_the_library() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let files: Vec<(PathBuf, String)> =
        files.into_iter().map(|f| (f.strip_prefix(&src).unwrap().to_path_buf(), std::fs::read_to_string(&f).unwrap())).collect();
    let mods = pub_mods(&files);
    assert!(mods.iter().any(|m| m == "cli"), "the scan found lib.rs's pub mods: {mods:?}");
    let unused = unused(&mods, &outside_text(root));
    assert!(
        unused.is_empty(),
        "pub mod that no outside user (src/main.rs, tests/e2e, fuzz/fuzz_targets) names: {unused:?}; \
         make them pub(crate) (docs/architecture.md, Visibility)"
    );
}

/// The check itself finds a public module nobody outside names.
#[test]
fn an_unused_pub_mod_is_found() {
    let files = vec![
        (PathBuf::from("lib.rs"), "pub mod cli;\npub(crate) mod net;\npub mod stats;\n".to_string()),
        (PathBuf::from("stats/mod.rs"), "pub mod counters;\npub mod format;\n".to_string()),
    ];
    let mods = pub_mods(&files);
    assert_eq!(mods, ["cli", "stats", "stats::counters", "stats::format"]);
    let outside = "use megaconn::cli::{self, Cli};\nuse megaconn::stats::counters::Kind;\nlet x = megaconn::stats::formatted();";
    assert_eq!(unused(&mods, outside), ["stats::format"]);
}
