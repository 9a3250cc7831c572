//! The crate's one error type. Messages are lowercase and name the file of the bundle
//! they are about, relative to the bundle's directory; the caller names the bundle
//! itself (its path) as the context. An error caused by another (an I/O error, JSON
//! that does not parse) keeps it as its `source` and leaves its text out of the
//! message, so a chain prints each cause once.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot name a bundle's directory `{root}`: {reason}")]
    InvalidRoot { root: String, reason: String },

    #[error("cannot put `{path}` in a bundle: {reason}")]
    InvalidPath { path: String, reason: String },

    #[error("`{path}` is given twice; each file of a bundle needs its own path")]
    DuplicatePath { path: String },

    #[error("could not write the bundle")]
    Write {
        #[source]
        source: io::Error,
    },

    #[error("not a gzip'd tar")]
    NotGzipTar {
        #[source]
        source: io::Error,
    },

    #[error("the bundle is damaged near `{near}`")]
    Damaged {
        /// The entry being read, or the last one read whole.
        near: String,
        #[source]
        source: io::Error,
    },

    /// After the tar's end-of-archive blocks, or after the gzip stream.
    #[error("the bundle has data after the end of its archive")]
    TrailingData,

    #[error("the bundle holds more than `{limit}` files")]
    TooManyFiles { limit: usize },

    #[error("`{path}` is `{size}` bytes, over the limit of `{limit}` bytes for one file")]
    FileTooLarge { path: String, size: u64, limit: u64 },

    #[error("the bundle unpacks to more than its limit of `{limit}` bytes")]
    TooLarge { limit: u64 },

    #[error("`{path}` is {kind}; a bundle holds only regular files and directories")]
    NotRegular { path: String, kind: String },

    #[error("`{path}` {reason}")]
    UnsafePath { path: String, reason: String },

    #[error("the bundle has more than one top-level directory: `{first}` and `{second}`")]
    SeveralRoots { first: String, second: String },

    #[error("`{path}` is in the bundle twice")]
    DuplicateEntry { path: String },

    #[error("the bundle has no `{MANIFEST}`", MANIFEST = crate::MANIFEST)]
    NoManifest,

    #[error(
        "`{MANIFEST}` line {line} is not `<sha256>  <path>`: {reason}",
        MANIFEST = crate::MANIFEST
    )]
    ManifestLine { line: usize, reason: String },

    #[error("`{path}` is listed in the manifest but missing from the bundle")]
    Missing { path: String },

    #[error("`{path}` is in the bundle but not in the manifest")]
    Unlisted { path: String },

    #[error(
        "`{path}` does not match the manifest: its sha256 is `{actual}`, the manifest says \
         `{expected}`"
    )]
    Mismatch {
        path: String,
        actual: String,
        expected: String,
    },

    #[error("`{path}` is not in the bundle")]
    NotInBundle { path: String },

    #[error("`{path}` is not the JSON expected")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("cannot encode `{path}` as JSON")]
    Encode {
        path: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("the bundle's layout is version `{found}`; this gpuvet reads version `{expected}`")]
    Format { found: u32, expected: u32 },
}

const CHANGED: &str =
    "the bundle was changed or damaged after it was made; ask the sender for a new one";
const NOT_OURS: &str = "this is not a bundle as gpuvet writes one, or it was changed \
     since; ask the sender for a new one";
const TOO_BIG: &str = "a bundle this large is unusual (it may be a gzip bomb); if you \
     trust its sender, read it with higher limits";

impl BundleError {
    /// What to do about it, where there is something to do.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            BundleError::Mismatch { .. }
            | BundleError::Missing { .. }
            | BundleError::Unlisted { .. }
            | BundleError::DuplicateEntry { .. }
            | BundleError::TrailingData => Some(CHANGED),
            BundleError::Damaged { .. } => Some(
                "the file was cut short or corrupted on the way; copy it again, or ask the \
                 sender for a new one",
            ),
            BundleError::NotGzipTar { .. } => {
                Some("a fault bundle is the `.tar.gz` file gpuvet wrote; check the file given")
            }
            BundleError::NoManifest
            | BundleError::ManifestLine { .. }
            | BundleError::NotRegular { .. }
            | BundleError::UnsafePath { .. }
            | BundleError::SeveralRoots { .. } => Some(NOT_OURS),
            BundleError::TooManyFiles { .. }
            | BundleError::FileTooLarge { .. }
            | BundleError::TooLarge { .. } => Some(TOO_BIG),
            BundleError::InvalidRoot { .. }
            | BundleError::InvalidPath { .. }
            | BundleError::DuplicatePath { .. }
            | BundleError::Write { .. }
            | BundleError::NotInBundle { .. }
            | BundleError::Json { .. }
            | BundleError::Encode { .. } => None,
            BundleError::Format { .. } => {
                Some("read it with the gpuvet version that made it (`bundle.json` names it)")
            }
        }
    }
}
