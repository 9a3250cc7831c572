//! The archive format of a fault bundle: a gzip'd tar that another team can open and
//! trust. [`write`](fn@write) packs files under one directory with a `MANIFEST` of
//! sha256 sums (so `cd ROOT && sha256sum -c MANIFEST` checks an unpacked copy);
//! [`read`](fn@read) unpacks one in memory and refuses it unless every file matches the
//! manifest and the archive stays within [`Limits`].
//!
//! [`layout`] says which files a bundle of one attempt holds and what they mean.

mod error;
pub mod layout;
mod manifest;
mod path;
mod read;
mod write;

use serde::de::DeserializeOwned;

pub use error::BundleError;
pub use read::read;
pub use write::write;

/// The manifest's name, at the top of the bundle's directory.
pub const MANIFEST: &str = "MANIFEST";

/// One file of a bundle: its path relative to the bundle's directory (`/`-separated,
/// e.g. `reports/node-3.json`) and its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    pub path: String,
    pub bytes: Vec<u8>,
}

impl BundleFile {
    pub fn new(path: impl Into<String>, bytes: impl Into<Vec<u8>>) -> BundleFile {
        BundleFile {
            path: path.into(),
            bytes: bytes.into(),
        }
    }
}

/// How much [`read`] accepts before it stops, so that a hostile or broken archive (a
/// gzip bomb, a flood of entries) costs bounded time and memory. The `MANIFEST` counts
/// toward the bytes but not the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_files: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

impl Default for Limits {
    /// 10,000 files, 64 MiB a file, 256 MiB in all.
    fn default() -> Limits {
        Limits {
            max_files: 10_000,
            max_file_bytes: 64 << 20,
            max_total_bytes: 256 << 20,
        }
    }
}

/// A bundle that [`read`] checked: its directory's name and its files (without the
/// `MANIFEST`), in the manifest's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub root: String,
    pub files: Vec<BundleFile>,
}

impl Bundle {
    /// The file at `path` (relative to the bundle's directory).
    pub fn get(&self, path: &str) -> Option<&BundleFile> {
        self.files.iter().find(|file| file.path == path)
    }

    /// The file at `path`, parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self, path: &str) -> Result<T, BundleError> {
        let file = self.get(path).ok_or_else(|| BundleError::NotInBundle {
            path: path.to_owned(),
        })?;
        serde_json::from_slice(&file.bytes).map_err(|source| BundleError::Json {
            path: path.to_owned(),
            source,
        })
    }
}

/// Bytes a [`safe_file_name`] keeps at most.
pub const MAX_FILE_NAME_BYTES: usize = 100;

/// `name` (a node's name, a hostname) as one path component that every file system and
/// shell takes: letters, digits, `.`, `_` and `-` are kept, every other character
/// becomes `_`; never empty, `.` or `..`; at most [`MAX_FILE_NAME_BYTES`] bytes.
///
/// Distinct names can give the same file name (`a/b` and `a_b`, or two long names that
/// share their first 100 bytes). Telling them apart, e.g. by a short hash of the
/// original name as a suffix, is the caller's job, since only it sees all the names.
pub fn safe_file_name(name: &str) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_FILE_NAME_BYTES)
        .collect();
    if safe.is_empty() || safe.chars().all(|c| c == '.') {
        // `.`, `..` and other all-dot names would be special or hidden.
        safe = "_".repeat(safe.len().max(1));
    }
    safe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_file_names_are_one_plain_component() {
        let cases = [
            ("node-3.cluster_a", "node-3.cluster_a"),
            ("a/b", "a_b"),
            ("../etc/passwd", ".._etc_passwd"),
            ("", "_"),
            (".", "_"),
            ("..", "__"),
            ("...", "___"),
            ("nœud 1", "n_ud_1"),
            ("日本", "__"),
            ("a\0b\nc", "a_b_c"),
            ("/", "_"),
        ];
        for (name, want) in cases {
            assert_eq!(safe_file_name(name), want, "{name:?}");
        }
        let long = "x".repeat(300);
        assert_eq!(safe_file_name(&long).len(), MAX_FILE_NAME_BYTES);
        let long_unicode = "é".repeat(300);
        assert_eq!(safe_file_name(&long_unicode), "_".repeat(100));
    }

    #[test]
    fn json_names_the_missing_or_unparsable_file() {
        let bundle = Bundle {
            root: "r".to_owned(),
            files: vec![
                BundleFile::new("a.json", r#"{"n": 3}"#),
                BundleFile::new("b.json", "not json"),
            ],
        };
        let value: serde_json::Value = bundle.json("a.json").unwrap();
        assert_eq!(value["n"], 3);
        let err = bundle.json::<serde_json::Value>("b.json").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`b.json` is not the JSON expected"),
            "{err}"
        );
        let err = bundle.json::<serde_json::Value>("c.json").unwrap_err();
        assert_eq!(err.to_string(), "`c.json` is not in the bundle");
        assert!(bundle.get("c.json").is_none());
    }
}
