//! `explain` and `gpuvet bundle` on a store a real run wrote: the answer on the bundle
//! must equal the answer on the store, the bundle must pass `sha256sum -c` and hold no
//! token, and `explain`'s text is a snapshot once what differs between runs is hidden.
//! Shared by `tests/cli/explain.rs` and the network-namespace tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::group::GROUP_TOKEN;
use super::{Scratch, json, stderr, stdout};

/// The push token the runs hold; like the group's, no bundle may contain it.
pub const REPORT_TOKEN: &str = "report-token-for-bundle-tests";
pub const SECRETS: [&str; 2] = [GROUP_TOKEN, REPORT_TOKEN];

/// A config that holds the group's token where users put such things: a rebuild hook
/// that calls an API with it.
pub fn config_with_secret(scratch: &Scratch, name: &str, gpuvet: &str) -> PathBuf {
    scratch.config(
        name,
        &format!(
            r#"{{"gpuvet": {{{gpuvet}"rebuild_hook": ["curl", "-H",
                "Authorization: Bearer {GROUP_TOKEN}", "http://rebuild.invalid/"]}}}}"#
        ),
    )
}

/// `explain` on the store and on its bundle, which must agree; the bundle is checked
/// with the system's `tar` and `sha256sum` and searched for every secret. Returns the
/// explanation (JSON) and its text.
pub fn explain_everywhere(scratch: &Scratch, store: &Path, job: &str) -> (Value, String) {
    let explain = |args: &[&str]| {
        let output = scratch
            .gpuvet()
            .arg("explain")
            .args(args)
            .args(["--store"])
            .arg(store)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        output
    };
    let from_store = json(&explain(&["--job", job, "--json"]));
    let text = stdout(&explain(&["--job", job]));

    let bundle = scratch.path(&format!("{job}.tar.gz"));
    let output = scratch
        .gpuvet()
        .args(["bundle", "--job", job, "-o"])
        .arg(&bundle)
        .arg("--store")
        .arg(store)
        .env_remove("GPUVET_TOKEN")
        .env_remove("GPUVET_REPORT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let size = std::fs::metadata(&bundle).unwrap().len();
    assert!(size < 5_000_000, "{size} bytes");

    let from_bundle = scratch
        .gpuvet()
        .arg("explain")
        .arg(&bundle)
        .arg("--json")
        .env_remove("GPUVET_STORE")
        .output()
        .unwrap();
    assert_eq!(
        from_bundle.status.code(),
        Some(0),
        "{}",
        stderr(&from_bundle)
    );
    assert_eq!(
        json(&from_bundle),
        from_store,
        "the bundle and the store disagree"
    );
    let text_of_bundle = scratch
        .gpuvet()
        .arg("explain")
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(stdout(&text_of_bundle), text);

    let unpacked = scratch.path(&format!("{job}-unpacked"));
    std::fs::create_dir_all(&unpacked).unwrap();
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(&bundle)
        .arg("-C")
        .arg(&unpacked)
        .output()
        .unwrap();
    assert!(
        tar.status.success(),
        "{}",
        String::from_utf8_lossy(&tar.stderr)
    );
    let root = std::fs::read_dir(&unpacked)
        .unwrap()
        .next()
        .expect("one top-level directory")
        .unwrap()
        .path();
    let check = Command::new("sha256sum")
        .args(["-c", "--quiet", "MANIFEST"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    for file in files_under(&root) {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for secret in SECRETS {
            assert!(
                !text.contains(secret),
                "`{}` holds a secret",
                file.display()
            );
        }
    }
    for needed in ["README.md", "timeline.json", "events.json", "explain.txt"] {
        assert!(root.join(needed).exists(), "{needed} in the bundle");
    }
    (from_store, text)
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The text without what differs from run to run: times, offsets, measured figures,
/// and the evidence beyond its first line (which peers timed out, and when).
fn snapshot_text(text: &str) -> String {
    let mut out = Vec::new();
    let mut evidence = 0;
    let mut in_evidence = false;
    for line in text.lines() {
        if line == "evidence:" {
            in_evidence = true;
        } else if line == "hypotheses:" {
            in_evidence = false;
        } else if in_evidence {
            evidence += 1;
            if evidence > 1 {
                continue;
            }
        }
        out.push(line);
    }
    out.join("\n") + "\n"
}

/// `explain`'s text as its snapshot keeps it (the caller asserts it, so the snapshot
/// sits beside the test).
pub fn for_snapshot(text: &str) -> String {
    normalized(&snapshot_text(text))
}

/// Measured figures (any number with a decimal point, or one followed by a unit)
/// become `[n]`, and what a lost node was doing, `[phase]`: both differ from run to
/// run. Counts, ranks and names stay.
fn normalized(text: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0
                || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == '-'));
        if starts_number {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                j += 1;
            }
            let number: String = chars[i..j].iter().collect();
            let rest: String = chars[j..chars.len().min(j + 7)].iter().collect();
            let measured = number.contains('.')
                || ["%", " ms", " s ", " s,", " s;", " GB/s", " TFLOPS", " µs"]
                    .iter()
                    .any(|unit| rest.starts_with(unit));
            out.push_str(if measured { "[n]" } else { &number });
            i = j;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out.lines().map(phase_hidden).collect::<Vec<_>>().join("\n") + "\n"
}

/// `phase `X`` becomes `phase `[phase]``.
fn phase_hidden(line: &str) -> String {
    match line.split_once("phase `") {
        Some((before, after)) => match after.split_once('`') {
            Some((_, rest)) => format!("{before}phase `[phase]`{}", phase_hidden(rest)),
            None => line.to_owned(),
        },
        None => line.to_owned(),
    }
}

pub fn first_error(explanation: &Value) -> (&str, &str) {
    let first = &explanation["first_error"];
    (
        first["node"].as_str().unwrap_or_default(),
        explanation["lane"].as_str().unwrap_or_default(),
    )
}

pub fn hypothesis<'a>(explanation: &'a Value, name: &str) -> &'a str {
    explanation["hypotheses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hypothesis"] == name)
        .and_then(|h| h["conclusion"].as_str())
        .unwrap()
}
