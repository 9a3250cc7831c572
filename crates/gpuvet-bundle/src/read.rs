//! Reading a bundle that may be hostile: unpacked in memory within [`Limits`], then
//! accepted only if its files are exactly the manifest's and every sum matches.
//!
//! Every byte that leaves the gzip decoder is counted against an allowance that grows
//! only with what was accepted (each entry's size once checked against the limits,
//! plus a little for its headers), so a gzip bomb or a header of a huge claimed size
//! stops the read at the limit instead of filling memory.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path};
use std::rc::Rc;

use flate2::bufread::GzDecoder;
use tar::EntryType;

use crate::error::BundleError;
use crate::manifest::{self, sha256_hex};
use crate::path::{parents, path_problem};
use crate::{Bundle, BundleFile, Limits, MANIFEST};

/// Decompressed bytes allowed for one entry's headers: its tar header, and a GNU
/// long-name or PAX header with a path of up to a few KiB.
const HEADER_ALLOWANCE: u64 = 16 << 10;
/// Decompressed bytes allowed beyond the entries: the end-of-archive blocks and the
/// padding some tar writers add to a full record.
const SLACK: u64 = 64 << 10;
const BLOCK: u64 = 512;

/// Reads a bundle that [`write`](fn@crate::write) made (or one like it) from `input`.
///
/// Refuses, naming the file: input that is not a gzip'd tar or is cut short, data
/// after the archive's end (other than zero padding), entries other than regular
/// files and directories (links, devices), paths that are absolute or leave the
/// bundle's directory, more than one top-level directory, a file twice, a missing or
/// malformed `MANIFEST`, a file the manifest lists but the bundle lacks or the other
/// way round, a file whose sha256 is not the manifest's, and anything over `limits`.
pub fn read(input: impl Read, limits: &Limits) -> Result<Bundle, BundleError> {
    let budget = Rc::new(Budget::new(SLACK + HEADER_ALLOWANCE));
    let guarded = Guarded {
        inner: GzDecoder::new(BufReader::new(input)),
        budget: Rc::clone(&budget),
    };
    let mut archive = tar::Archive::new(guarded);
    let unpacked = unpack(&mut archive, limits, &budget)?;

    // Read to the end of the gzip stream, so its length and CRC are checked, and make
    // sure nothing hides after the tar's end: `tar --ignore-zeros` would unpack it.
    let mut guarded = archive.into_inner();
    let near = unpacked.last.clone();
    let mut chunk = [0u8; 8192];
    loop {
        let n = guarded
            .read(&mut chunk)
            .map_err(|source| stream_error(source, &budget, limits, near.as_deref()))?;
        if n == 0 {
            break;
        }
        if chunk[..n].iter().any(|&b| b != 0) {
            return Err(BundleError::TrailingData);
        }
    }
    let mut rest = guarded.inner.into_inner();
    let trailing = rest
        .fill_buf()
        .map_err(|source| stream_error(source, &budget, limits, near.as_deref()))?;
    if !trailing.is_empty() {
        return Err(BundleError::TrailingData);
    }
    verify(unpacked)
}

/// What the tar held, before it is checked against its manifest.
struct Unpacked {
    root: Option<String>,
    manifest: Option<Vec<u8>>,
    /// Regular files, by path relative to the root.
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
    /// The last entry read whole, as the tar names it.
    last: Option<String>,
}

fn unpack<R: Read>(
    archive: &mut tar::Archive<R>,
    limits: &Limits,
    budget: &Budget,
) -> Result<Unpacked, BundleError> {
    let mut unpacked = Unpacked {
        root: None,
        manifest: None,
        files: BTreeMap::new(),
        dirs: BTreeSet::new(),
        last: None,
    };
    let mut entries = archive
        .entries()
        .map_err(|source| stream_error(source, budget, limits, None))?;
    let (mut entry_count, mut total) = (0usize, 0u64);
    loop {
        let mut entry = match entries.next() {
            None => break,
            Some(Ok(entry)) => entry,
            Some(Err(source)) => {
                return Err(stream_error(
                    source,
                    budget,
                    limits,
                    unpacked.last.as_deref(),
                ));
            }
        };
        entry_count += 1;
        // Directories are entries too; a flood of them must stop as files would.
        if entry_count > limits.max_files.saturating_mul(2).saturating_add(2) {
            return Err(BundleError::TooManyFiles {
                limit: limits.max_files,
            });
        }
        budget.allow(HEADER_ALLOWANCE);

        let raw = String::from_utf8(entry.path_bytes().into_owned()).map_err(|err| {
            BundleError::UnsafePath {
                path: String::from_utf8_lossy(err.as_bytes()).into_owned(),
                reason: "is not a UTF-8 path".to_owned(),
            }
        })?;
        let (top, inside) = split_entry_path(&raw)?;
        let kind = entry.header().entry_type();
        // Before the check for one top-level directory, whose message would mislead.
        if inside.is_none() && kind != EntryType::Directory {
            return Err(not_inside(raw));
        }
        match &unpacked.root {
            None => unpacked.root = Some(top.clone()),
            Some(root) if *root != top => {
                return Err(BundleError::SeveralRoots {
                    first: root.clone(),
                    second: top,
                });
            }
            Some(_) => {}
        }

        let size = entry.size();
        let shown = inside.clone().unwrap_or_else(|| raw.clone());
        if size > limits.max_file_bytes {
            return Err(BundleError::FileTooLarge {
                path: shown,
                size,
                limit: limits.max_file_bytes,
            });
        }
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(BundleError::TooLarge {
                limit: limits.max_total_bytes,
            });
        }
        // The tar reader reads (or skips) the data and its padding to the next block.
        budget.allow(size.div_ceil(BLOCK) * BLOCK);

        match kind {
            EntryType::Directory => {
                if let Some(dir) = inside {
                    unpacked.dirs.insert(dir);
                }
            }
            EntryType::Regular => {
                let Some(path) = inside else {
                    return Err(not_inside(raw));
                };
                // Within the file limit, checked above.
                let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                entry
                    .read_to_end(&mut bytes)
                    .map_err(|source| stream_error(source, budget, limits, Some(&raw)))?;
                if bytes.len() as u64 != size {
                    return Err(BundleError::Damaged {
                        near: raw,
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("it ends after `{}` of its `{size}` bytes", bytes.len()),
                        ),
                    });
                }
                if path == MANIFEST {
                    if unpacked.manifest.replace(bytes).is_some() {
                        return Err(BundleError::DuplicateEntry { path });
                    }
                } else {
                    if unpacked.files.len() >= limits.max_files {
                        return Err(BundleError::TooManyFiles {
                            limit: limits.max_files,
                        });
                    }
                    if unpacked.files.insert(path.clone(), bytes).is_some() {
                        return Err(BundleError::DuplicateEntry { path });
                    }
                }
            }
            other => {
                return Err(BundleError::NotRegular {
                    path: raw,
                    kind: describe(other),
                });
            }
        }
        unpacked.last = Some(raw);
    }
    Ok(unpacked)
}

/// An entry's path split into the top-level directory and the path inside it (`None`
/// for the top-level directory itself).
fn split_entry_path(raw: &str) -> Result<(String, Option<String>), BundleError> {
    let unsafe_path = |reason: &str| BundleError::UnsafePath {
        path: raw.to_owned(),
        reason: reason.to_owned(),
    };
    let mut parts = Vec::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str().unwrap_or_default()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(unsafe_path("leaves the bundle's directory (`..`)"));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(unsafe_path("is an absolute path"));
            }
        }
    }
    let Some((top, inside)) = parts.split_first() else {
        return Err(unsafe_path("is an empty path"));
    };
    if inside.is_empty() {
        return Ok(((*top).to_owned(), None));
    }
    let inside = inside.join("/");
    if let Some(problem) = path_problem(&inside) {
        return Err(unsafe_path(problem));
    }
    Ok(((*top).to_owned(), Some(inside)))
}

fn not_inside(path: String) -> BundleError {
    BundleError::UnsafePath {
        path,
        reason: "is not inside the bundle's directory".to_owned(),
    }
}

fn describe(kind: EntryType) -> String {
    match kind {
        EntryType::Symlink => "a symbolic link".to_owned(),
        EntryType::Link => "a hard link".to_owned(),
        EntryType::Char => "a character device".to_owned(),
        EntryType::Block => "a block device".to_owned(),
        EntryType::Fifo => "a named pipe".to_owned(),
        EntryType::GNUSparse => "a sparse file".to_owned(),
        other => format!("a tar entry of type `{}`", char::from(other.as_byte())),
    }
}

/// The files, if they are exactly the manifest's and each matches its sum.
fn verify(unpacked: Unpacked) -> Result<Bundle, BundleError> {
    let (Some(root), Some(manifest)) = (unpacked.root, unpacked.manifest) else {
        return Err(BundleError::NoManifest);
    };
    let mut present = unpacked.files;
    // A file at `a` and anything at `a/b` cannot both be unpacked.
    for path in present.keys().chain(&unpacked.dirs) {
        if let Some(file) = parents(path).find(|dir| present.contains_key(*dir)) {
            return Err(BundleError::UnsafePath {
                path: path.clone(),
                reason: format!("is inside `{file}`, which is a file"),
            });
        }
    }
    if let Some(path) = present.keys().find(|path| unpacked.dirs.contains(*path)) {
        return Err(BundleError::UnsafePath {
            path: path.clone(),
            reason: "is both a file and a directory".to_owned(),
        });
    }
    let mut files = Vec::new();
    for line in manifest::parse(&manifest)? {
        let Some(bytes) = present.remove(&line.path) else {
            return Err(BundleError::Missing { path: line.path });
        };
        let actual = sha256_hex(&bytes);
        if actual != line.sha256 {
            return Err(BundleError::Mismatch {
                path: line.path,
                actual,
                expected: line.sha256,
            });
        }
        files.push(BundleFile {
            path: line.path,
            bytes,
        });
    }
    if let Some(path) = present.into_keys().next() {
        return Err(BundleError::Unlisted { path });
    }
    Ok(Bundle { root, files })
}

/// A read error as the caller should see it: over the limit, damaged midway, or not a
/// gzip'd tar at all (nothing read yet).
fn stream_error(
    source: io::Error,
    budget: &Budget,
    limits: &Limits,
    near: Option<&str>,
) -> BundleError {
    if budget.tripped.get() {
        return BundleError::TooLarge {
            limit: limits.max_total_bytes,
        };
    }
    match near {
        None => BundleError::NotGzipTar { source },
        Some(near) => BundleError::Damaged {
            near: near.to_owned(),
            source,
        },
    }
}

/// How many decompressed bytes may still be read.
struct Budget {
    used: Cell<u64>,
    allowed: Cell<u64>,
    tripped: Cell<bool>,
}

impl Budget {
    fn new(allowed: u64) -> Budget {
        Budget {
            used: Cell::new(0),
            allowed: Cell::new(allowed),
            tripped: Cell::new(false),
        }
    }

    fn allow(&self, more: u64) {
        self.allowed.set(self.allowed.get().saturating_add(more));
    }
}

/// The decompressed stream, cut off where the budget ends.
struct Guarded<R> {
    inner: R,
    budget: Rc<Budget>,
}

impl<R: Read> Read for Guarded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let budget = &self.budget;
        let left = budget.allowed.get().saturating_sub(budget.used.get());
        if buf.is_empty() {
            return Ok(0);
        }
        if left == 0 {
            // At the allowance: fine if the stream ends here, over the limit if not.
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            budget.tripped.set(true);
            return Err(io::Error::other(
                "the bundle unpacks to more than its limit",
            ));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        budget.used.set(budget.used.get() + n as u64);
        Ok(n)
    }
}
