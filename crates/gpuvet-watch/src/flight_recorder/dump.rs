//! Reading flight-recorder dumps: one file per rank, pickle or JSON.
//!
//! PyTorch writes the pickle with its own pickler (protocol 2, plain dicts, lists,
//! tuples, strings, ints, floats, `None` and bools; read by [`super::pickle`]) and the
//! JSON variant with nlohmann::json. The two differ in details that matter here: JSON writes
//! `time_discovered_*` as `0` instead of `None`, `pg_status` values as strings, omits
//! `entries` when empty and never carries `frames`. Both are converted to one JSON
//! value first and read with the same lenient accessors, so every field but the
//! process group and the sequence numbers may be missing or of an unexpected type.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use gpuvet_model::bounds::json_values_at_most;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::pickle::{PickleError, PickleLimits, pickle_to_json};
use super::{DumpLimit, FrError};

/// The largest dump file read: a default ring buffer (2,000 entries) with 32-frame
/// stacks is about 7.5 MiB as JSON, less as a pickle.
pub const MAX_DUMP_FILE_BYTES: u64 = 32 << 20;

/// The most values (and keys; an object counts as 8, see [`gpuvet_model::bounds`]) one
/// dump may decode to: a 2,000-entry dump with 32-frame stacks counts 1,020,000; the
/// bound keeps a decoded dump, pickle or JSON, well under 256 MB.
pub const MAX_DUMP_VALUES: usize = 2_000_000;

/// The most bytes of text one dump may decode to, counting every copy a pickle's shared
/// strings expand to: the 2,000-entry, 32-frame dump has about 8 MiB.
pub const MAX_DUMP_TEXT_BYTES: usize = 32 << 20;

/// The pickle decoder's share of the bounds above.
const PICKLE_LIMITS: PickleLimits = PickleLimits {
    values: MAX_DUMP_VALUES,
    text_bytes: MAX_DUMP_TEXT_BYTES,
};

/// How a dump was encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DumpFormat {
    Pickle,
    Json,
}

/// One rank's flight-recorder dump.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrDump {
    /// Global rank: from the file name's numeric suffix, else from the dump's `rank`.
    pub rank: u32,
    pub path: PathBuf,
    pub format: DumpFormat,
    /// The dump format version, e.g. `2.10`.
    pub version: Option<String>,
    /// Process groups this rank belongs to, keyed by group name.
    pub pg_config: BTreeMap<String, PgConfig>,
    /// Per process group (keyed by `pg_id`): the last sequence numbers it reached.
    pub pg_status: BTreeMap<String, PgStatus>,
    /// The ring buffer, oldest first.
    pub entries: Vec<FrEntry>,
    /// Entries without a process group or sequence number, left out.
    pub skipped_entries: usize,
}

impl FrDump {
    /// The oldest record id still in the ring buffer.
    pub fn first_record_id(&self) -> Option<u64> {
        self.entries.iter().map(|e| e.record_id).min()
    }

    /// The newest record id in the ring buffer.
    pub fn last_record_id(&self) -> Option<u64> {
        self.entries.iter().map(|e| e.record_id).max()
    }
}

/// A process group as one rank recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgConfig {
    pub name: String,
    pub desc: String,
    /// Global ranks of the members; `None` when the dump does not list them.
    pub ranks: Option<Vec<u32>>,
}

/// `pg_status`: the last collective sequence ids a process group enqueued, started and
/// completed on this rank.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStatus {
    pub last_enqueued_collective: Option<i64>,
    pub last_started_collective: Option<i64>,
    pub last_completed_collective: Option<i64>,
}

/// Where a work item stood when the dump was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    /// Enqueued; the kernel was not seen to start (without `TORCH_NCCL_ENABLE_TIMING`
    /// a work item goes straight from scheduled to completed).
    Scheduled,
    Started,
    Completed,
}

/// One stack frame of the Python call that issued the collective.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrFrame {
    pub name: String,
    pub filename: String,
    pub line: Option<i64>,
}

/// One work item in the ring buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrEntry {
    /// Per-process counter over all groups; grows as the ring buffer is written.
    pub record_id: u64,
    pub pg_id: Option<i64>,
    /// `process_group.0`: the group's name.
    pub pg_name: String,
    /// `process_group.1`: the group's description (`default_pg`, user-given names).
    pub pg_desc: String,
    /// Per group, counts collective launches (one per coalesced group).
    pub collective_seq_id: u64,
    /// Per group, counts point-to-point launches.
    pub p2p_seq_id: u64,
    pub op_id: Option<u64>,
    /// e.g. `nccl:all_reduce`.
    pub profiling_name: String,
    pub time_created_ns: Option<i64>,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<i64>>,
    pub output_dtypes: Vec<String>,
    pub state: EntryState,
    pub time_discovered_started_ns: Option<i64>,
    pub time_discovered_completed_ns: Option<i64>,
    pub retired: bool,
    pub timeout_ms: Option<i64>,
    pub duration_ms: Option<f64>,
    pub is_p2p: bool,
    pub frames: Vec<FrFrame>,
    pub thread_id: Option<String>,
    pub thread_name: Option<String>,
}

/// Extensions a dump file may carry; the rank is the number before it.
const DUMP_EXTENSIONS: [&str; 3] = [".json", ".pkl", ".pickle"];

/// Split a dump file name into its prefix and the rank: `nccl_trace_rank_3` gives
/// `("nccl_trace_rank_", 3)`; `nccl_trace_rank_3.json` gives the same.
pub fn split_dump_name(file_name: &str) -> Option<(String, u32)> {
    let stem = DUMP_EXTENSIONS
        .iter()
        .find_map(|ext| {
            let cut = file_name.len().checked_sub(ext.len())?;
            let tail = file_name.get(cut..)?;
            tail.eq_ignore_ascii_case(ext).then(|| &file_name[..cut])
        })
        .unwrap_or(file_name);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let (prefix, number) = stem.split_at(stem.len() - digits);
    Some((prefix.to_string(), number.parse().ok()?))
}

/// Read one dump; the rank comes from the file name, else from the dump itself.
pub fn load_dump(path: &Path) -> Result<FrDump, FrError> {
    let read_error = |source| FrError::ReadFile {
        path: path.to_path_buf(),
        source,
    };
    // One byte past the bound tells an over-long file without reading all of it.
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|file| file.take(MAX_DUMP_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read_error)?;
    let rank = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(split_dump_name)
        .map(|(_, rank)| rank);
    parse_dump(&bytes, path, rank)
}

/// Read every dump in `dir`: files named `<prefix><rank>` (optionally `.json`,
/// `.pkl`). Without a prefix, the one prefix all such files share is used.
pub fn load_dir(dir: &Path, prefix: Option<&str>) -> Result<Vec<FrDump>, FrError> {
    let read_dir_error = |source| FrError::ReadDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut candidates: BTreeMap<String, Vec<(u32, PathBuf)>> = BTreeMap::new();
    for item in fs::read_dir(dir).map_err(read_dir_error)? {
        let item = item.map_err(read_dir_error)?;
        let Ok(name) = item.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || !item.path().is_file() {
            continue;
        }
        if let Some((file_prefix, rank)) = split_dump_name(&name) {
            candidates
                .entry(file_prefix)
                .or_default()
                .push((rank, item.path()));
        }
    }
    let files = match prefix {
        Some(prefix) => candidates.remove(prefix).unwrap_or_default(),
        None if candidates.len() > 1 => {
            return Err(FrError::AmbiguousPrefix {
                dir: dir.to_path_buf(),
                prefixes: candidates
                    .keys()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        None => candidates.into_values().next().unwrap_or_default(),
    };
    if files.is_empty() {
        return Err(FrError::NoDumps {
            dir: dir.to_path_buf(),
        });
    }

    let mut by_rank: BTreeMap<u32, FrDump> = BTreeMap::new();
    for (_, path) in files {
        let dump = load_dump(&path)?;
        if let Some(first) = by_rank.get(&dump.rank) {
            return Err(FrError::DuplicateRank {
                rank: dump.rank,
                first: first.path.clone(),
                second: path,
            });
        }
        by_rank.insert(dump.rank, dump);
    }
    Ok(by_rank.into_values().collect())
}

/// Decode one dump from its bytes. `rank` overrides the dump's own `rank` field.
/// Refused when over [`MAX_DUMP_FILE_BYTES`], [`MAX_DUMP_VALUES`] or
/// [`MAX_DUMP_TEXT_BYTES`], before the values are built.
pub fn parse_dump(bytes: &[u8], path: &Path, rank: Option<u32>) -> Result<FrDump, FrError> {
    let too_large = |limit| FrError::TooLarge {
        path: path.to_path_buf(),
        limit,
    };
    if bytes.len() as u64 > MAX_DUMP_FILE_BYTES {
        return Err(too_large(DumpLimit::FileBytes(MAX_DUMP_FILE_BYTES)));
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let (value, format) = if matches!(first, Some(b'{' | b'[')) {
        // Text is at most the file; values are counted before serde_json builds them.
        if json_values_at_most(bytes, MAX_DUMP_VALUES).is_err() {
            return Err(too_large(DumpLimit::Values(MAX_DUMP_VALUES)));
        }
        let value = serde_json::from_slice(bytes).map_err(|source| FrError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        (value, DumpFormat::Json)
    } else {
        let value = pickle_to_json(bytes, PICKLE_LIMITS).map_err(|source| match source {
            PickleError::TooLarge {
                what: "values",
                limit,
            } => too_large(DumpLimit::Values(limit)),
            PickleError::TooLarge { limit, .. } => too_large(DumpLimit::TextBytes(limit)),
            source @ PickleError::Invalid { .. } => FrError::Pickle {
                path: path.to_path_buf(),
                source,
            },
        })?;
        (value, DumpFormat::Pickle)
    };
    dump_from_value(value, path, format, rank)
}

fn dump_from_value(
    value: Value,
    path: &Path,
    format: DumpFormat,
    rank: Option<u32>,
) -> Result<FrDump, FrError> {
    let not_a_dump = |reason: &str| FrError::NotADump {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let Value::Object(mut top) = value else {
        return Err(not_a_dump("the top level is not a dictionary"));
    };
    if !top.contains_key("entries") && !top.contains_key("pg_config") {
        return Err(not_a_dump("it has neither `entries` nor `pg_config`"));
    }
    let rank = rank
        .or_else(|| {
            top.get("rank")
                .and_then(integer)
                .and_then(|r| u32::try_from(r).ok())
        })
        .ok_or_else(|| not_a_dump("no rank in the file name or the dump"))?;

    let pg_config = match top.remove("pg_config") {
        Some(Value::Object(groups)) => groups
            .into_iter()
            .filter_map(|(key, config)| Some((key.clone(), pg_config(&key, config.as_object()?))))
            .collect(),
        _ => BTreeMap::new(),
    };
    let pg_status = match top.remove("pg_status") {
        Some(Value::Object(groups)) => groups
            .into_iter()
            .filter_map(|(key, status)| {
                let status = status.as_object()?;
                let field = |name: &str| status.get(name).and_then(integer);
                Some((
                    key,
                    PgStatus {
                        last_enqueued_collective: field("last_enqueued_collective"),
                        last_started_collective: field("last_started_collective"),
                        last_completed_collective: field("last_completed_collective"),
                    },
                ))
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let mut entries = Vec::new();
    let mut skipped_entries = 0;
    if let Some(Value::Array(raw)) = top.remove("entries") {
        for (position, raw) in raw.into_iter().enumerate() {
            match raw.as_object().and_then(|object| entry(object, position)) {
                Some(entry) => entries.push(entry),
                None => skipped_entries += 1,
            }
        }
    }
    // The buffer is dumped oldest first; keep that order even if a writer did not.
    entries.sort_by_key(|e| e.record_id);

    Ok(FrDump {
        rank,
        path: path.to_path_buf(),
        format,
        version: top.get("version").and_then(text),
        pg_config,
        pg_status,
        entries,
        skipped_entries,
    })
}

fn pg_config(key: &str, config: &Map<String, Value>) -> PgConfig {
    PgConfig {
        name: config
            .get("name")
            .and_then(text)
            .unwrap_or_else(|| key.to_string()),
        desc: config.get("desc").and_then(text).unwrap_or_default(),
        ranks: config.get("ranks").and_then(rank_list),
    }
}

/// `ranks` is a string like `"[0, 1, 2, 3]"` in torch's dumps; accept a list as well.
fn rank_list(value: &Value) -> Option<Vec<u32>> {
    let ranks: Option<Vec<u32>> = match value {
        Value::Array(items) => items
            .iter()
            .map(|item| integer(item).and_then(|r| u32::try_from(r).ok()))
            .collect(),
        Value::String(listed) => {
            let inner = listed
                .trim()
                .trim_start_matches(['[', '('])
                .trim_end_matches([']', ')']);
            inner
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| item.parse().ok())
                .collect()
        }
        _ => None,
    };
    // An empty list means "not recorded", not "no members".
    ranks.filter(|ranks| !ranks.is_empty())
}

fn entry(object: &Map<String, Value>, position: usize) -> Option<FrEntry> {
    let field = |name: &str| object.get(name);
    let int = |name: &str| field(name).and_then(integer);
    let (pg_name, pg_desc) = match field("process_group")? {
        Value::Array(parts) => (
            parts.first().and_then(text)?,
            parts.get(1).and_then(text).unwrap_or_default(),
        ),
        other => (text(other)?, String::new()),
    };
    let is_p2p = field("is_p2p").is_some_and(flag);
    let collective_seq_id = int("collective_seq_id").and_then(|n| u64::try_from(n).ok());
    let p2p_seq_id = int("p2p_seq_id").and_then(|n| u64::try_from(n).ok());
    // A collective needs its sequence number to be matched across ranks.
    if !is_p2p && collective_seq_id.is_none() {
        return None;
    }
    // JSON dumps write 0 for "not yet".
    let time = |name: &str| int(name).filter(|t| *t > 0);
    let time_discovered_completed_ns = time("time_discovered_completed_ns");
    let time_discovered_started_ns = time("time_discovered_started_ns");
    let state = match field("state").and_then(text).as_deref() {
        Some("completed") => EntryState::Completed,
        Some("started") => EntryState::Started,
        Some("scheduled") => EntryState::Scheduled,
        _ if time_discovered_completed_ns.is_some() => EntryState::Completed,
        _ if time_discovered_started_ns.is_some() => EntryState::Started,
        _ => EntryState::Scheduled,
    };
    Some(FrEntry {
        record_id: int("record_id")
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(position as u64),
        pg_id: int("pg_id"),
        pg_name,
        pg_desc,
        collective_seq_id: collective_seq_id.unwrap_or(0),
        p2p_seq_id: p2p_seq_id.unwrap_or(0),
        op_id: int("op_id").and_then(|n| u64::try_from(n).ok()),
        profiling_name: field("profiling_name").and_then(text).unwrap_or_default(),
        time_created_ns: int("time_created_ns"),
        input_sizes: field("input_sizes").map(sizes).unwrap_or_default(),
        input_dtypes: field("input_dtypes").map(strings).unwrap_or_default(),
        output_sizes: field("output_sizes").map(sizes).unwrap_or_default(),
        output_dtypes: field("output_dtypes").map(strings).unwrap_or_default(),
        state,
        time_discovered_started_ns,
        time_discovered_completed_ns,
        retired: field("retired").is_some_and(flag),
        timeout_ms: int("timeout_ms"),
        duration_ms: field("duration_ms").and_then(Value::as_f64),
        is_p2p,
        frames: field("frames").map(frames).unwrap_or_default(),
        thread_id: field("thread_id").and_then(text),
        thread_name: field("thread_name").and_then(text),
    })
}

fn frames(value: &Value) -> Vec<FrFrame> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|frame| FrFrame {
            name: frame.get("name").and_then(text).unwrap_or_default(),
            filename: frame.get("filename").and_then(text).unwrap_or_default(),
            line: frame.get("line").and_then(integer),
        })
        .collect()
}

fn sizes(value: &Value) -> Vec<Vec<i64>> {
    let Value::Array(tensors) = value else {
        return Vec::new();
    };
    tensors
        .iter()
        .map(|dims| match dims {
            Value::Array(dims) => dims.iter().filter_map(integer).collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().filter_map(text).collect(),
        _ => Vec::new(),
    }
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number
            .as_i64()
            .or_else(|| {
                number
                    .as_u64()
                    .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
            })
            .or_else(|| number.as_f64().filter(|f| f.is_finite()).map(|f| f as i64)),
        Value::String(listed) => listed.trim().parse().ok(),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn flag(value: &Value) -> bool {
    match value {
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64().is_some_and(|n| n != 0.0),
        Value::String(text) => matches!(text.trim(), "true" | "True" | "1"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_prefix_and_rank() {
        assert_eq!(
            split_dump_name("nccl_trace_rank_12"),
            Some(("nccl_trace_rank_".to_string(), 12))
        );
        assert_eq!(
            split_dump_name("nccl_trace_rank_3.JSON"),
            Some(("nccl_trace_rank_".to_string(), 3))
        );
        assert_eq!(split_dump_name("7"), Some((String::new(), 7)));
        assert_eq!(split_dump_name("make_fixtures.py"), None);
        assert_eq!(split_dump_name("trace_rank_"), None);
    }

    #[test]
    fn ranks_string_and_list_both_parse() {
        assert_eq!(
            rank_list(&Value::from("[0, 1, 2, 3]")),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(rank_list(&serde_json::json!([4, 5])), Some(vec![4, 5]));
        assert_eq!(rank_list(&Value::from("[]")), None);
        assert_eq!(rank_list(&Value::from("[0, x]")), None);
    }

    #[test]
    fn json_zero_times_mean_not_yet_and_state_is_derived_when_missing() {
        let raw = serde_json::json!({
            "process_group": ["0", "default_pg"],
            "collective_seq_id": "4",
            "time_discovered_started_ns": 0,
            "time_discovered_completed_ns": 17,
        });
        let entry = entry(raw.as_object().unwrap(), 9).unwrap();
        assert_eq!(entry.collective_seq_id, 4);
        assert_eq!(entry.record_id, 9);
        assert_eq!(entry.time_discovered_started_ns, None);
        assert_eq!(entry.state, EntryState::Completed);
    }

    #[test]
    fn entry_without_group_or_sequence_is_skipped() {
        let no_group = serde_json::json!({"collective_seq_id": 1});
        assert!(entry(no_group.as_object().unwrap(), 0).is_none());
        let no_seq = serde_json::json!({"process_group": ["0", ""]});
        assert!(entry(no_seq.as_object().unwrap(), 0).is_none());
    }

    #[test]
    fn dump_without_rank_anywhere_is_refused() {
        let error = parse_dump(br#"{"entries": []}"#, Path::new("/tmp/trace"), None).unwrap_err();
        assert!(error.to_string().contains("`/tmp/trace`"), "{error}");
        let dump = parse_dump(br#"{"rank": 5, "entries": []}"#, Path::new("x"), None).unwrap();
        assert_eq!(dump.rank, 5);
    }

    /// A dump the size PyTorch writes by default (2,000 entries), every entry with a
    /// 32-frame stack, as `make_fixtures.py` shapes its entries.
    fn realistic_dump() -> Value {
        let frame = |i: usize| {
            serde_json::json!({
                "name": format!("forward_{i}"),
                "filename": format!("/opt/conda/lib/python3.12/site-packages/model/layer_{i}.py"),
                "line": 100 + i,
            })
        };
        let entries: Vec<Value> = (0..2000)
            .map(|i| {
                serde_json::json!({
                    "record_id": i, "pg_id": 0, "process_group": ["0", "default_pg"],
                    "collective_seq_id": i + 1, "p2p_seq_id": 0, "op_id": i + 1,
                    "profiling_name": "nccl:all_reduce", "time_created_ns": 1_760_000_000_000_000_000_i64,
                    "input_sizes": [[2048, 4096]], "input_dtypes": ["BFloat16"],
                    "output_sizes": [[2048, 4096]], "output_dtypes": ["BFloat16"],
                    "state": "completed", "time_discovered_started_ns": 1_760_000_000_000_050_000_i64,
                    "time_discovered_completed_ns": 1_760_000_000_000_400_000_i64,
                    "retired": true, "timeout_ms": 600_000, "is_p2p": false,
                    "frames": (0..32).map(frame).collect::<Vec<_>>(),
                    "thread_id": "140233", "thread_name": "pt_main_thread", "duration_ms": 0.35,
                })
            })
            .collect();
        serde_json::json!({
            "version": "2.10", "comm_lib_version": "2.27.3",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "pg_status": {"0": {"last_enqueued_collective": 2000, "last_started_collective": 2000,
                                "last_completed_collective": 2000}},
            "entries": entries,
        })
    }

    #[test]
    fn a_default_sized_dump_with_deep_stacks_fits_the_bounds() {
        let value = realistic_dump();
        let json = serde_json::to_vec(&value).unwrap();
        let values = json_values_at_most(&json, usize::MAX - 1).unwrap();
        // Inside every bound with room, so deeper stacks still fit.
        assert!(values * 3 / 2 < MAX_DUMP_VALUES, "{values} values");
        assert!(
            json.len() as u64 * 3 < MAX_DUMP_FILE_BYTES,
            "{} bytes",
            json.len()
        );
        let dump = parse_dump(&json, Path::new("rank_0.json"), Some(0)).unwrap();
        assert_eq!(dump.entries.len(), 2000);
        assert_eq!(dump.entries[1999].frames.len(), 32);

        let pickle = serde_pickle::to_vec(&value, serde_pickle::SerOptions::new()).unwrap();
        assert!((pickle.len() as u64) < MAX_DUMP_FILE_BYTES);
        let dump = parse_dump(&pickle, Path::new("rank_0"), Some(0)).unwrap();
        assert_eq!(dump.format, DumpFormat::Pickle);
        assert_eq!(dump.entries.len(), 2000);
    }

    #[test]
    fn the_file_and_value_bounds_are_exact() {
        let path = Path::new("rank_0.json");
        // `[0,0,...]` padded with spaces to the byte bound: not a dump, but read.
        let zeros = |count: usize| format!("[{}]", vec!["0"; count].join(","));
        let mut at_limit = zeros(MAX_DUMP_VALUES - 1).into_bytes();
        assert_eq!(
            json_values_at_most(&at_limit, MAX_DUMP_VALUES),
            Ok(MAX_DUMP_VALUES)
        );
        assert!(matches!(
            parse_dump(&at_limit, path, Some(0)),
            Err(FrError::NotADump { .. })
        ));
        let over = zeros(MAX_DUMP_VALUES).into_bytes();
        let error = parse_dump(&over, path, Some(0)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "flight-recorder dump `rank_0.json` is too large: it decodes to more than `2000000` values"
        );

        at_limit.resize(MAX_DUMP_FILE_BYTES as usize, b' ');
        assert!(matches!(
            parse_dump(&at_limit, path, Some(0)),
            Err(FrError::NotADump { .. })
        ));
        at_limit.push(b' ');
        let error = parse_dump(&at_limit, path, Some(0)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "flight-recorder dump `rank_0.json` is too large: the file has more than `33554432` bytes"
        );
    }

    #[test]
    fn a_file_over_the_bound_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nccl_trace_rank_0.json");
        let file = File::create(&path).unwrap();
        // Sparse: a gigabyte on paper, nothing on disk.
        file.set_len(1 << 30).unwrap();
        let error = load_dump(&path).unwrap_err();
        assert!(matches!(
            error,
            FrError::TooLarge {
                limit: DumpLimit::FileBytes(MAX_DUMP_FILE_BYTES),
                ..
            }
        ));
    }
}
