//! Fault bundles on disk: writing one whole or not at all, reading one back only when
//! its manifest matches, and the secrets this process knows, which no bundle may hold.

use std::fs::File;
use std::io::{BufReader, ErrorKind};
use std::path::Path;

use gpuvet_analysis::explain::{Explanation, explain};
use gpuvet_analysis::timeline::assemble;
use gpuvet_bundle::BundleError;
use gpuvet_bundle::layout::{self, BundleInfo, Packed};
use gpuvet_model::record::JobRecord;
use gpuvet_push::fetch::ServerReader;

use crate::failure::Failure;

/// Reads the bundle at `path` into the record it was made from.
pub fn open(path: &Path) -> Result<JobRecord, Failure> {
    let file = File::open(path).map_err(|err| cannot_read(path, err))?;
    let (_, record) = layout::unpack(BufReader::new(file)).map_err(|err| refused(path, err))?;
    Ok(record)
}

/// A bundle that cannot be opened: a path that is not there is the user's mistake
/// (exit 2); a file that is there but cannot be read is the environment's (exit 73).
fn cannot_read(path: &Path, err: std::io::Error) -> Failure {
    let message = format!("cannot read the bundle `{}`", path.display());
    match err.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory => {
            Failure::usage_from(message, err).with_hint("pass a file that `gpuvet bundle` wrote")
        }
        _ => Failure::io(message, err).with_hint("check that this user may read the file"),
    }
}

/// A bundle whose content is refused, with the reason as its cause and the bundle
/// library's hint.
fn refused(path: &Path, err: BundleError) -> Failure {
    Failure::usage_from(format!("the bundle `{}` is refused", path.display()), err)
}

/// Writes the bundle of `record` to `path`: to a temporary file beside it, renamed
/// over `path` once complete, so no reader ever sees half a bundle.
pub fn write(record: &JobRecord, path: &Path, now_ms: u64) -> Result<Packed, Failure> {
    let mut temp = temp_beside(path)?;
    let secrets = crate::identity::known_secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let packed = layout::pack(
        record,
        now_ms,
        env!("CARGO_PKG_VERSION"),
        &secrets,
        std::io::BufWriter::new(temp.as_file_mut()),
    )
    .map_err(|err| match err {
        // The disk's problem, not the record's.
        BundleError::Write { source } => cannot_write(path, source),
        other => Failure::bug_from("cannot pack the bundle", other),
    })?;
    persist(temp, path)?;
    Ok(packed)
}

/// A bundle a fleet server made, as downloaded.
#[derive(Debug)]
pub struct Downloaded {
    pub info: BundleInfo,
    pub explanation: Explanation,
    pub bytes: u64,
}

/// Downloads the bundle of a job's attempt from a fleet server to `path`, whole or not
/// at all: it is checked against its own manifest before it replaces `path`.
pub fn download(
    server: &ServerReader,
    job: &str,
    attempt: Option<u32>,
    path: &Path,
) -> Result<Downloaded, Failure> {
    let mut temp = temp_beside(path)?;
    let bytes = server
        .bundle(
            job,
            attempt,
            &mut std::io::BufWriter::new(temp.as_file_mut()),
        )
        .map_err(crate::record::fetch_failed)?;
    let file = temp.reopen().map_err(|err| cannot_write(path, err))?;
    let (info, record) = layout::unpack(BufReader::new(file)).map_err(|err| refused(path, err))?;
    persist(temp, path)?;
    Ok(Downloaded {
        explanation: explain(&record, &assemble(&record)),
        info,
        bytes,
    })
}

fn cannot_write(path: &Path, err: std::io::Error) -> Failure {
    Failure::io(format!("cannot write the bundle `{}`", path.display()), err)
        .with_hint("pass `-o` a path in a directory that exists and is writable")
}

/// A temporary file in `path`'s directory, so that renaming it over `path` is atomic.
fn temp_beside(path: &Path) -> Result<tempfile::NamedTempFile, Failure> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    tempfile::NamedTempFile::new_in(dir).map_err(|err| cannot_write(path, err))
}

/// Puts a complete file in place: synced, then renamed over `path`.
fn persist(temp: tempfile::NamedTempFile, path: &Path) -> Result<(), Failure> {
    temp.as_file()
        .sync_all()
        .map_err(|err| cannot_write(path, err))?;
    temp.persist(path)
        .map_err(|err| cannot_write(path, err.error))?;
    Ok(())
}
