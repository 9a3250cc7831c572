//! The workspace's layering: the crate graph in `docs/architecture.md` is the graph the
//! `Cargo.toml` files declare, every crate sits in one layer, and no crate depends on
//! a crate in its own layer or above.
//!
//! The manifests are read as text: a dependency on a workspace crate is a line that
//! starts with `gpuvet-` in a `[dependencies]` or `[dev-dependencies]` table.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// (crate, dependency, dev-only) edges.
type Edges = BTreeSet<(String, String, bool)>;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/<name> sits two levels below the workspace root")
        .to_path_buf()
}

/// Every crate under `crates/` and its workspace dependencies, from its manifest.
fn declared_graph(root: &Path) -> (BTreeSet<String>, Edges) {
    let mut crates = BTreeSet::new();
    let mut edges = Edges::new();
    for entry in fs::read_dir(root.join("crates")).expect("read crates/") {
        let manifest = entry.expect("crates/ entry").path().join("Cargo.toml");
        let Ok(text) = fs::read_to_string(&manifest) else {
            continue;
        };
        let name = package_name(&text)
            .unwrap_or_else(|| panic!("{} has no package name", manifest.display()));
        edges.extend(
            workspace_dependencies(&text)
                .into_iter()
                .map(|(dep, dev)| (name.clone(), dep, dev)),
        );
        crates.insert(name);
    }
    (crates, edges)
}

fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name") {
            return Some(
                value
                    .trim_start_matches([' ', '='])
                    .trim_matches('"')
                    .to_owned(),
            );
        }
    }
    None
}

/// The `gpuvet-*` dependencies of a manifest, each with whether it is dev-only.
fn workspace_dependencies(manifest: &str) -> Vec<(String, bool)> {
    let mut table = "";
    let mut deps = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            table = line;
        } else if matches!(table, "[dependencies]" | "[dev-dependencies]")
            && line.starts_with("gpuvet-")
        {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            deps.push((name, table == "[dev-dependencies]"));
        }
    }
    deps
}

/// The layers and edges the document declares, between its graph markers.
fn documented_graph(doc: &str) -> (BTreeMap<String, usize>, Edges) {
    const BEGIN: &str = "<!-- crate-graph:begin -->";
    let begin = doc
        .find(BEGIN)
        .expect("docs/architecture.md has a crate-graph:begin marker")
        + BEGIN.len();
    let end = doc
        .find("<!-- crate-graph:end -->")
        .expect("docs/architecture.md has a crate-graph:end marker");
    let mut layers = BTreeMap::new();
    let mut edges = Edges::new();
    for line in doc[begin..end].lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("layer ") {
            let (number, names) = rest.split_once(':').expect("`layer N: a, b`");
            let number: usize = number.trim().parse().expect("a layer number");
            for name in names.split(',').map(str::trim) {
                let earlier = layers.insert(name.to_owned(), number);
                assert!(earlier.is_none(), "`{name}` is in two layers");
            }
        } else if let Some((from, deps)) = line.split_once("->") {
            for dep in deps.split(',').map(str::trim) {
                let (dep, dev) = match dep.strip_suffix("(dev)") {
                    Some(dep) => (dep.trim(), true),
                    None => (dep, false),
                };
                edges.insert((from.trim().to_owned(), dep.to_owned(), dev));
            }
        }
    }
    (layers, edges)
}

#[test]
fn the_documented_crate_graph_is_the_declared_one_and_points_down() {
    let root = workspace_root();
    let (crates, declared) = declared_graph(&root);
    let doc =
        fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md exists");
    let (layers, documented) = documented_graph(&doc);

    let placed: BTreeSet<String> = layers.keys().cloned().collect();
    assert_eq!(
        placed, crates,
        "docs/architecture.md's layers must list every crate under crates/ once"
    );
    let missing: Vec<_> = declared.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&declared).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's crate graph differs from the Cargo.toml files:\n  \
         declared but not documented: {missing:?}\n  documented but not declared: {stale:?}"
    );
    for (from, to, _) in &declared {
        assert!(
            layers[to] < layers[from],
            "`{from}` (layer {}) depends on `{to}` (layer {}): a crate may only use crates in lower layers",
            layers[from],
            layers[to]
        );
    }
}

#[test]
fn manifests_and_the_graph_block_parse() {
    let manifest = "[package]\nname = \"gpuvet-x\"\n\n[dependencies]\ngpuvet-model.workspace = true\nserde = \"1\"\n\n[dev-dependencies]\ngpuvet-testkit = { path = \"../t\" }\n[features]\ngpuvet-fake = []\n";
    assert_eq!(package_name(manifest).as_deref(), Some("gpuvet-x"));
    assert_eq!(
        workspace_dependencies(manifest),
        [
            ("gpuvet-model".to_owned(), false),
            ("gpuvet-testkit".to_owned(), true)
        ]
    );
    let doc = "x\n<!-- crate-graph:begin -->\nlayer 0: a, b\nlayer 1: c\nc -> a, b (dev)\n<!-- crate-graph:end -->\nd -> e\n";
    let (layers, edges) = documented_graph(doc);
    assert_eq!(layers["b"], 0);
    assert_eq!(layers["c"], 1);
    assert_eq!(edges.len(), 2);
    assert!(edges.contains(&("c".to_owned(), "b".to_owned(), true)));
}
