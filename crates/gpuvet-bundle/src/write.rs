//! Writing a bundle: the same files always give the same bytes, so two bundles of one
//! fault can be compared by their sums.

use std::collections::BTreeSet;
use std::io::{self, Write};

use flate2::Compression;
use flate2::GzBuilder;
use tar::{EntryType, Header};

use crate::error::BundleError;
use crate::manifest::{self, sha256_hex};
use crate::path::{file_under_file, parents, path_problem, root_problem};
use crate::{BundleFile, MANIFEST};

/// Every entry's modification time: the epoch, so that the bytes do not depend on when
/// the bundle was made.
const MTIME: u64 = 0;
/// The gzip header's operating system: Unix.
const GZIP_OS_UNIX: u8 = 3;

/// Writes `files` as a gzip'd tar to `out`, each under the directory `root/`, preceded
/// by `root/MANIFEST` (sha256 sums, sorted by path). Entries are sorted, with mode 0644
/// (directories 0755), owner 0:0 without names, and modification time 0. Returns the
/// compressed bytes written.
///
/// Refuses an invalid `root` (it must be one path component), and any path that is
/// empty, absolute, has a `.` or `..` component, holds `\`, a line break or NUL, is
/// `MANIFEST`, is given twice, or sits inside another file's path.
pub fn write(files: &[BundleFile], root: &str, out: impl Write) -> Result<u64, BundleError> {
    if let Some(reason) = root_problem(root) {
        return Err(BundleError::InvalidRoot {
            root: root.to_owned(),
            reason: reason.to_owned(),
        });
    }
    let mut sorted: Vec<&BundleFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    for (index, file) in sorted.iter().enumerate() {
        let invalid = |reason: &str| BundleError::InvalidPath {
            path: file.path.clone(),
            reason: reason.to_owned(),
        };
        if let Some(reason) = path_problem(&file.path) {
            return Err(invalid(reason));
        }
        if file.path == MANIFEST {
            return Err(invalid("`MANIFEST` is the bundle's own manifest"));
        }
        if index > 0 && sorted[index - 1].path == file.path {
            return Err(BundleError::DuplicatePath {
                path: file.path.clone(),
            });
        }
    }
    if let Some((path, reason)) = file_under_file(sorted.iter().map(|file| file.path.as_str())) {
        return Err(BundleError::InvalidPath { path, reason });
    }

    let sums: Vec<(&str, String)> = sorted
        .iter()
        .map(|file| (file.path.as_str(), sha256_hex(&file.bytes)))
        .collect();
    let manifest = manifest::format(&sums);

    let counted = Counting {
        inner: out,
        bytes: 0,
    };
    let gzip = GzBuilder::new()
        .mtime(0)
        .operating_system(GZIP_OS_UNIX)
        .write(counted, Compression::default());
    let mut tar = tar::Builder::new(gzip);
    let written = (|| -> io::Result<u64> {
        append(&mut tar, EntryType::Directory, root, &[])?;
        append(
            &mut tar,
            EntryType::Regular,
            &format!("{root}/{MANIFEST}"),
            manifest.as_bytes(),
        )?;
        let mut dirs = BTreeSet::new();
        for file in &sorted {
            for dir in parents(&file.path) {
                if dirs.insert(dir) {
                    append(
                        &mut tar,
                        EntryType::Directory,
                        &format!("{root}/{dir}"),
                        &[],
                    )?;
                }
            }
            append(
                &mut tar,
                EntryType::Regular,
                &format!("{root}/{}", file.path),
                &file.bytes,
            )?;
        }
        let mut counted = tar.into_inner()?.finish()?;
        counted.flush()?;
        Ok(counted.bytes)
    })();
    written.map_err(|source| BundleError::Write { source })
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    kind: EntryType,
    path: &str,
    bytes: &[u8],
) -> io::Result<()> {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(if kind == EntryType::Directory {
        0o755
    } else {
        0o644
    });
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(MTIME);
    header.set_size(bytes.len() as u64);
    // Paths over 100 bytes go in a GNU long-name entry, which the crate adds.
    tar.append_data(&mut header, path, bytes)
}

/// Counts the bytes that reach the caller's writer.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
