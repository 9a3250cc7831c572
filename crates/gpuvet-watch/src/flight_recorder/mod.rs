//! PyTorch flight-recorder analysis: which rank stopped a collective.
//!
//! With `TORCH_NCCL_TRACE_BUFFER_SIZE` (or `TORCH_FR_BUFFER_SIZE`) set, every rank keeps
//! a ring buffer of its recent collectives and, on a timeout with
//! `TORCH_NCCL_DUMP_ON_TIMEOUT`, writes it to `<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`
//! (pickle; a JSON variant exists). [`load_dir`] reads one such dump per rank and
//! [`analyze`] lines them up per process group, the way torch's own analyzer
//! (`torch/distributed/flight_recorder/components/builder.py`) does:
//!
//! - ring buffers are aligned by dropping what not every rank still holds;
//! - collectives are matched across ranks by (process group, `collective_seq_id`);
//!   point-to-point entries are not matched;
//! - in each group, the first collective that some ranks never entered, that differs
//!   in operation, sizes or dtypes, or that some ranks did not complete, is that
//!   group's first error, and pairing stops there, since later pairs are suspect.
//!
//! The ranks that never entered are the culprits (the first error); the ranks that
//! entered and wait are named separately. A rank expected from `pg_config` without a
//! dump is a missing rank. Across groups, the first error is the one whose culprits do
//! not themselves wait in another group (a rank blocked in one group never enters the
//! next), then the oldest.
//!
//! Alignment deviates from torch in one way: torch drops entries below the largest
//! first `record_id` over all ranks, but `record_id` counts a process's entries over
//! all its groups, so ranks in different groups would be cut at unrelated points. This
//! module aligns each group by its own `collective_seq_id` instead: the same cut when
//! all ranks run the same groups, and a correct one when they do not.

mod analysis;
mod dump;
mod pickle;
pub mod record;
mod summary;

use std::io;
use std::path::{Path, PathBuf};

use gpuvet_model::results::Lane;
use serde::{Deserialize, Serialize};

pub use analysis::analyze;
pub use dump::{
    DumpFormat, EntryState, FrDump, FrEntry, FrFrame, MAX_DUMP_FILE_BYTES, MAX_DUMP_TEXT_BYTES,
    MAX_DUMP_VALUES, PgConfig, PgStatus, load_dir, load_dump, parse_dump, split_dump_name,
};
pub use pickle::{PickleError, PickleLimits, pickle_to_json};
pub use summary::summary;

/// Why dumps could not be read. Every message names the file or directory; an error
/// caused by another (I/O, a pickle or JSON that does not decode) keeps it as its
/// `source`, out of the message, so a chain prints it once.
#[derive(Debug, thiserror::Error)]
pub enum FrError {
    #[error("cannot read flight-recorder dump directory `{dir}`")]
    ReadDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read flight-recorder dump `{path}`")]
    ReadFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot decode pickle flight-recorder dump `{path}`")]
    Pickle {
        path: PathBuf,
        #[source]
        source: PickleError,
    },
    #[error("cannot decode json flight-recorder dump `{path}`")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("flight-recorder dump `{path}` is too large: {limit}")]
    TooLarge { path: PathBuf, limit: DumpLimit },
    #[error("`{path}` is not a flight-recorder dump: {reason}")]
    NotADump { path: PathBuf, reason: String },
    #[error("no flight-recorder dumps (files named `<prefix><rank>`) in `{dir}`")]
    NoDumps { dir: PathBuf },
    #[error("dump file names in `{dir}` have several prefixes ({prefixes}): name the prefix")]
    AmbiguousPrefix { dir: PathBuf, prefixes: String },
    #[error("two dumps for rank `{rank}`: `{first}` and `{second}`")]
    DuplicateRank {
        rank: u32,
        first: PathBuf,
        second: PathBuf,
    },
}

/// The bound a dump passed (see [`MAX_DUMP_FILE_BYTES`] and its neighbours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpLimit {
    FileBytes(u64),
    Values(usize),
    TextBytes(usize),
}

impl std::fmt::Display for DumpLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpLimit::FileBytes(limit) => write!(f, "the file has more than `{limit}` bytes"),
            DumpLimit::Values(limit) => write!(f, "it decodes to more than `{limit}` values"),
            DumpLimit::TextBytes(limit) => {
                write!(f, "it decodes to more than `{limit}` bytes of text")
            }
        }
    }
}

/// Read every dump in `dir` (prefix inferred) and analyze them: what `gpuvet fr
/// DUMP_DIR` does.
pub fn analyze_dir(dir: &Path) -> Result<FrReport, FrError> {
    Ok(analyze(&load_dir(dir, None)?))
}

pub use gpuvet_model::runtime::FrFindingKind;

/// One problem found in the dumps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrFinding {
    pub kind: FrFindingKind,
    /// The process group's name; `None` for a finding about a whole rank.
    pub group: Option<String>,
    pub group_desc: Option<String>,
    /// The collective sequence id the problem is at.
    pub seq: Option<u64>,
    /// The collective's profiling name, e.g. `nccl:all_reduce`.
    pub op: Option<String>,
    /// The ranks at fault.
    pub ranks: Vec<u32>,
    /// Ranks that entered the collective and only wait on `ranks`.
    pub waiting_ranks: Vec<u32>,
    pub lane: Lane,
    /// This is the report's first error.
    pub first_error: bool,
    pub message: String,
}

/// What the dumps say about one process group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupReport {
    pub name: String,
    pub desc: String,
    /// Members, from `pg_config`; the ranks seen using the group when not recorded.
    pub ranks: Vec<u32>,
    pub membership_known: bool,
    /// Members with a dump.
    pub dumped_ranks: Vec<u32>,
    /// Members without a dump.
    pub missing_ranks: Vec<u32>,
    /// Members left out because their ring buffer wrapped past every entry of this
    /// group: nothing can be said about them here.
    pub unknown_ranks: Vec<u32>,
    /// The first sequence id every member still holds (after alignment).
    pub aligned_from_seq: Option<u64>,
    /// The highest sequence id any member recorded.
    pub last_seq: Option<u64>,
    /// The highest sequence id every member completed, up to the first error.
    pub last_completed_seq: Option<u64>,
    /// Collectives matched on every member before the first error.
    pub collectives_checked: usize,
    pub first_error: Option<FirstDivergence>,
}

/// The first collective in a group that did not line up: a finding of the analysis
/// (a rank that never issued it, or issued a different one), not an error of gpuvet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstDivergence {
    pub kind: FrFindingKind,
    pub seq: Option<u64>,
    pub op: Option<String>,
    pub culprit_ranks: Vec<u32>,
    pub waiting_ranks: Vec<u32>,
    /// Where a waiting rank issued the collective (its innermost recorded frame).
    pub waiting_at: Option<String>,
    /// When the earliest rank created the collective (its own clock).
    pub pending_since_ns: Option<i64>,
    pub message: String,
}

/// One dump as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpInfo {
    pub rank: u32,
    pub path: String,
    pub format: DumpFormat,
    pub version: Option<String>,
    pub entries: usize,
    pub first_record_id: Option<u64>,
    pub last_record_id: Option<u64>,
}

/// The analysis of one set of dumps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrReport {
    pub dumps: Vec<DumpInfo>,
    /// Every rank some `pg_config` names.
    pub expected_ranks: Vec<u32>,
    /// Expected ranks without a dump.
    pub missing_ranks: Vec<u32>,
    pub groups: Vec<GroupReport>,
    /// The rank(s) that started it, if the dumps show a problem.
    pub first_error: Option<FrFinding>,
    /// Every finding, the first error first.
    pub findings: Vec<FrFinding>,
    /// What the analysis had to skip or assume.
    pub notes: Vec<String>,
}
