//! The `MANIFEST`: one line a file, `<64 hex>  <path>`, as `sha256sum` writes and
//! `sha256sum -c` checks it.

use std::collections::BTreeMap;

use gpuvet_model::hex::to_hex;
use sha2::{Digest, Sha256};

use crate::error::BundleError;
use crate::path::path_problem;

/// Lowercase hex of the sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// The manifest of `(path, sha256)` pairs, sorted by path.
pub(crate) fn format(entries: &[(&str, String)]) -> String {
    let mut text = String::new();
    for (path, sum) in entries {
        text.push_str(sum);
        text.push_str("  ");
        text.push_str(path);
        text.push('\n');
    }
    text
}

/// One line of a manifest.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub path: String,
    /// Lowercase hex.
    pub sha256: String,
}

/// The lines of a manifest, in order. Accepts what `sha256sum` writes (two spaces, or
/// ` *` for its binary mode, hex in either case) and nothing looser.
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Line>, BundleError> {
    let text = std::str::from_utf8(bytes).map_err(|err| {
        let line = bytes[..err.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        BundleError::ManifestLine {
            line,
            reason: "it is not UTF-8".to_owned(),
        }
    })?;
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let mut lines = Vec::new();
    let mut first_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, line) in body.split('\n').enumerate() {
        let number = index + 1;
        let invalid = |reason: String| BundleError::ManifestLine {
            line: number,
            reason,
        };
        let (sum, path) = split_line(line).map_err(|reason| invalid(reason.to_owned()))?;
        if let Some(problem) = path_problem(path) {
            return Err(invalid(format!("`{path}`: {problem}")));
        }
        if path == crate::MANIFEST {
            return Err(invalid("the manifest lists itself".to_owned()));
        }
        if let Some(first) = first_seen.insert(path, number) {
            return Err(invalid(format!(
                "`{path}` is listed twice (also on line {first})"
            )));
        }
        lines.push(Line {
            path: path.to_owned(),
            sha256: sum.to_ascii_lowercase(),
        });
    }
    Ok(lines)
}

fn split_line(line: &str) -> Result<(&str, &str), &'static str> {
    if line.ends_with('\r') {
        return Err("it ends with a carriage return (was the manifest edited on Windows?)");
    }
    let Some(sum) = line.get(..64) else {
        return Err("it is shorter than a sha256 sum");
    };
    if !sum.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("it does not start with 64 hex digits");
    }
    let rest = &line[64..];
    let path = rest
        .strip_prefix("  ")
        .or_else(|| rest.strip_prefix(" *"))
        .ok_or("the sum is not followed by two spaces and a path")?;
    Ok((sum, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn the_empty_file_has_sha256sums_sum_and_lines_round_trip() {
        assert_eq!(sha256_hex(b""), SUM);
        let text = format(&[("a", SUM.to_owned()), ("b/c d", SUM.to_owned())]);
        assert_eq!(text, format!("{SUM}  a\n{SUM}  b/c d\n"));
        let lines = parse(text.as_bytes()).unwrap();
        assert_eq!(lines[1].path, "b/c d");
        assert_eq!(lines[1].sha256, SUM);
        assert!(parse(b"").unwrap().is_empty());
        let binary_mode = format!("{}  x\n{} *y", SUM.to_uppercase(), SUM);
        let lines = parse(binary_mode.as_bytes()).unwrap();
        assert_eq!(
            (lines[0].sha256.as_str(), lines[1].path.as_str()),
            (SUM, "y")
        );
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let cases = [
            (format!("{SUM}  a\n\n"), 2, "shorter than a sha256 sum"),
            (
                format!("{SUM}  a\nxyz  b\n"),
                2,
                "shorter than a sha256 sum",
            ),
            (format!("{}  a\n", "g".repeat(64)), 1, "64 hex digits"),
            (format!("{SUM} a\n"), 1, "two spaces"),
            (format!("{SUM}  a\r\n"), 1, "carriage return"),
            (format!("{SUM}  ../a\n"), 1, "leaves the bundle's directory"),
            (format!("{SUM}  MANIFEST\n"), 1, "lists itself"),
            (
                format!("{SUM}  a\n{SUM}  b\n{SUM}  a\n"),
                3,
                "also on line 1",
            ),
        ];
        for (text, line, reason) in &cases {
            match parse(text.as_bytes()) {
                Err(BundleError::ManifestLine {
                    line: got,
                    reason: why,
                }) => {
                    assert_eq!(got, *line, "{text:?}");
                    assert!(why.contains(reason), "{why} for {text:?}");
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
        // Valid UTF-8 in a path is fine; invalid UTF-8 names its line.
        let unicode = parse(format!("{SUM}  a\n{SUM}  nœud/日本").as_bytes()).unwrap();
        assert_eq!(unicode[1].path, "nœud/日本");
        let mut bytes = format!("{SUM}  a\n{SUM}  b").into_bytes();
        bytes.push(0xff);
        assert!(matches!(
            parse(&bytes),
            Err(BundleError::ManifestLine { line: 2, .. })
        ));
    }
}
