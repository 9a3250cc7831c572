//! Fault bundles on disk: writing one whole or not at all, reading one back only when
//! its manifest matches, and the secrets this process knows, which no bundle may hold.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use gpuvet_bundle::BundleError;
use gpuvet_bundle::layout::{self, Packed};
use gpuvet_core::timeline::JobRecord;

use crate::failure::Failure;

/// Reads the bundle at `path` into the record it was made from.
pub fn open(path: &Path) -> Result<JobRecord, Failure> {
    let file = File::open(path).map_err(|err| {
        Failure::usage(format!(
            "cannot read the bundle `{}`: {err}",
            path.display()
        ))
        .with_hint("pass a file that `gpuvet bundle` wrote")
    })?;
    let (_, record) = layout::unpack(BufReader::new(file)).map_err(|err| refused(path, &err))?;
    Ok(record)
}

fn refused(path: &Path, err: &BundleError) -> Failure {
    let failure = Failure::usage(format!("the bundle `{}` is refused: {err}", path.display()));
    match err.hint() {
        Some(hint) => failure.with_hint(hint),
        None => failure,
    }
}

/// Writes the bundle of `record` to `path`: to a temporary file beside it, renamed
/// over `path` once complete, so no reader ever sees half a bundle.
pub fn write(record: &JobRecord, path: &Path, now_ms: u64) -> Result<Packed, Failure> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let cannot = |err: &dyn std::fmt::Display| {
        Failure::usage(format!(
            "cannot write the bundle `{}`: {err}",
            path.display()
        ))
        .with_hint("pass `-o` a path in a directory that exists and is writable")
    };
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(|err| cannot(&err))?;
    let secrets = crate::identity::known_secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let packed = layout::pack(
        record,
        now_ms,
        env!("CARGO_PKG_VERSION"),
        &secrets,
        std::io::BufWriter::new(temp.as_file_mut()),
    )
    .map_err(|err| Failure::bug(format!("cannot pack the bundle: {err}")))?;
    temp.as_file().sync_all().map_err(|err| cannot(&err))?;
    temp.persist(path).map_err(|err| cannot(&err.error))?;
    Ok(packed)
}
