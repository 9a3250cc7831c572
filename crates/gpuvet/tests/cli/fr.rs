//! `gpuvet fr` on the flight-recorder fixtures of `gpuvet-watch`: the culprit rank is
//! named, a healthy set passes, and a directory without dumps is a usage error.

use std::path::PathBuf;

use crate::common::{Scratch, json, stderr, stdout};

fn fixture(format: &str, case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../gpuvet-watch/tests/fixtures/fr")
        .join(format)
        .join(case)
}

#[test]
fn a_hang_names_the_rank_that_never_entered() {
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .arg("fr")
        .arg(fixture("pickle", "r4_hang"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("rank 2"), "{text}");

    let output = scratch
        .gpuvet()
        .args(["fr", "--json"])
        .arg(fixture("json", "r4_hang"))
        .output()
        .unwrap();
    let report = json(&output);
    assert_eq!(
        report["first_error"]["ranks"],
        serde_json::json!([2]),
        "{report}"
    );
}

#[test]
fn a_healthy_set_passes() {
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .arg("fr")
        .arg(fixture("pickle", "r4_healthy"))
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
}

#[test]
fn an_empty_directory_is_a_usage_error() {
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .arg("fr")
        .arg(scratch.dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("hint:"), "{}", stderr(&output));
}
