//! Lining the dumps up per process group and finding the first collective that does
//! not match, following torch's `builder.py`: match by (group, `collective_seq_id`),
//! skip point-to-point entries, stop pairing a group at its first mismatch.

use std::collections::{BTreeMap, BTreeSet};

use super::dump::{EntryState, FrDump, FrEntry};
use super::summary::ranks_text;
use super::{DumpInfo, FirstDivergence, FrFinding, FrFindingKind, FrReport, GroupReport};

/// A process group as torch identifies it: its name plus its members, because
/// `split_group` can reuse a name for different rank sets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    name: String,
    members: Option<Vec<u32>>,
}

/// One rank's entries of one group by sequence id; a coalesced launch has several
/// entries under one id.
type Trace<'a> = BTreeMap<u64, Vec<&'a FrEntry>>;

/// Tensor shapes, one list of dimensions per tensor.
type Shapes = Vec<Vec<i64>>;

/// Every process group any rank knows: its description, and each rank's collective
/// entries of it.
struct Groups<'a> {
    descs: BTreeMap<GroupKey, String>,
    traces: BTreeMap<GroupKey, BTreeMap<u32, Trace<'a>>>,
}

/// Analyze one dump per rank (a later dump of a rank already seen is ignored).
pub fn analyze(dumps: &[FrDump]) -> FrReport {
    let mut notes = Vec::new();
    let mut by_rank: BTreeMap<u32, &FrDump> = BTreeMap::new();
    for dump in dumps {
        if by_rank.contains_key(&dump.rank) {
            notes.push(format!(
                "rank {} has more than one dump; `{}` was ignored",
                dump.rank,
                dump.path.display()
            ));
            continue;
        }
        by_rank.insert(dump.rank, dump);
    }
    let versions: BTreeSet<&str> = by_rank
        .values()
        .filter_map(|dump| dump.version.as_deref())
        .collect();
    if versions.len() > 1 {
        let listed: Vec<String> = versions.iter().map(|v| format!("`{v}`")).collect();
        notes.push(format!(
            "the dumps have different format versions ({})",
            listed.join(", ")
        ));
    }
    for dump in by_rank.values().filter(|dump| dump.skipped_entries > 0) {
        notes.push(format!(
            "rank {}: {} entries without a process group or sequence id were skipped",
            dump.rank, dump.skipped_entries
        ));
    }

    let Groups {
        descs: groups,
        traces,
    } = collect_groups(&by_rank, &mut notes);
    let dumped: BTreeSet<u32> = by_rank.keys().copied().collect();
    // A buffer whose oldest record is not the process's first has overwritten entries;
    // its oldest collective may have lost its first parts (a coalesced launch).
    let wrapped: BTreeMap<u32, Option<&FrEntry>> = by_rank
        .values()
        .filter(|dump| dump.first_record_id().is_some_and(|id| id > 0))
        .map(|dump| (dump.rank, dump.entries.first().filter(|e| !e.is_p2p)))
        .collect();
    let expected: BTreeSet<u32> = groups
        .keys()
        .filter_map(|key| key.members.as_ref())
        .flatten()
        .copied()
        .collect();
    let missing: Vec<u32> = expected.difference(&dumped).copied().collect();

    let empty = BTreeMap::new();
    let group_reports: Vec<GroupReport> = groups
        .iter()
        .map(|(key, desc)| {
            let traces = traces.get(key).unwrap_or(&empty);
            let report = analyze_group(key, desc, traces, &dumped, &wrapped);
            if !report.unknown_ranks.is_empty() {
                notes.push(format!(
                    "process group `{}`: the ring buffers of {} wrapped past all of its entries; \
                     they were left out of its analysis",
                    key.name,
                    ranks_text(&report.unknown_ranks)
                ));
            }
            report
        })
        .collect();

    let (first_error, findings) = pick_first_error(&group_reports, &missing);
    FrReport {
        dumps: by_rank
            .values()
            .map(|dump| DumpInfo {
                rank: dump.rank,
                path: dump.path.display().to_string(),
                format: dump.format,
                version: dump.version.clone(),
                entries: dump.entries.len(),
                first_record_id: dump.first_record_id(),
                last_record_id: dump.last_record_id(),
            })
            .collect(),
        expected_ranks: expected.into_iter().collect(),
        missing_ranks: missing,
        groups: group_reports,
        first_error,
        findings,
        notes,
    }
}

/// Groups from every rank's `pg_config`, and every collective entry resolved to its
/// group; point-to-point entries are left out.
fn collect_groups<'a>(by_rank: &BTreeMap<u32, &'a FrDump>, notes: &mut Vec<String>) -> Groups<'a> {
    let mut groups: BTreeMap<GroupKey, String> = BTreeMap::new();
    let mut resolve: BTreeMap<(u32, String), GroupKey> = BTreeMap::new();
    for (&rank, dump) in by_rank {
        for (config_key, config) in &dump.pg_config {
            let members = config.ranks.as_ref().map(|ranks| {
                let set: BTreeSet<u32> = ranks.iter().copied().collect();
                set.into_iter().collect()
            });
            let key = GroupKey {
                name: config.name.clone(),
                members,
            };
            match groups.get(&key) {
                Some(desc) if *desc != config.desc => notes.push(format!(
                    "process group `{}`: rank {rank} calls it `{}`, others `{desc}`",
                    key.name, config.desc
                )),
                Some(_) => {}
                None => {
                    groups.insert(key.clone(), config.desc.clone());
                }
            }
            resolve.insert((rank, config_key.clone()), key.clone());
            resolve.insert((rank, config.name.clone()), key);
        }
    }

    let mut traces: BTreeMap<GroupKey, BTreeMap<u32, Trace<'a>>> = BTreeMap::new();
    for (&rank, dump) in by_rank {
        for entry in dump.entries.iter().filter(|entry| !entry.is_p2p) {
            let key = resolve
                .get(&(rank, entry.pg_name.clone()))
                .cloned()
                .or_else(|| unique_group_named(&groups, &entry.pg_name))
                .unwrap_or_else(|| GroupKey {
                    name: entry.pg_name.clone(),
                    members: None,
                });
            groups
                .entry(key.clone())
                .or_insert_with(|| entry.pg_desc.clone());
            traces
                .entry(key)
                .or_default()
                .entry(rank)
                .or_default()
                .entry(entry.collective_seq_id)
                .or_default()
                .push(entry);
        }
    }
    Groups {
        descs: groups,
        traces,
    }
}

/// A rank whose `pg_config` lacks a group can still be matched to the only group of
/// that name another rank recorded.
fn unique_group_named(groups: &BTreeMap<GroupKey, String>, name: &str) -> Option<GroupKey> {
    let mut named = groups.keys().filter(|key| key.name == name);
    let first = named.next()?;
    named.next().is_none().then(|| first.clone())
}

fn analyze_group(
    key: &GroupKey,
    desc: &str,
    traces: &BTreeMap<u32, Trace<'_>>,
    dumped: &BTreeSet<u32>,
    wrapped: &BTreeMap<u32, Option<&FrEntry>>,
) -> GroupReport {
    let view = GroupView::new(key, traces, dumped, wrapped);
    let mut report = GroupReport {
        name: key.name.clone(),
        desc: desc.to_string(),
        ranks: view.members.iter().copied().collect(),
        membership_known: key.members.is_some(),
        dumped_ranks: view.dumped_ranks.iter().copied().collect(),
        missing_ranks: view.missing.clone(),
        unknown_ranks: view.unknown.clone(),
        aligned_from_seq: view.aligned_from,
        last_seq: view.last_seq,
        last_completed_seq: None,
        collectives_checked: 0,
        first_error: None,
    };
    let Some(start) = view.aligned_from else {
        return report;
    };
    let place = GroupPlace {
        name: &key.name,
        desc,
    };
    for seq in view.seqs_from(start) {
        if let Some(divergence) = view.divergence_at(&place, seq) {
            report.first_error = Some(divergence);
            break;
        }
        report.last_completed_seq = Some(seq);
        report.collectives_checked += 1;
    }
    report
}

/// One process group across the dumps: who is in it, whose dump can speak for it, and
/// where the ranks' traces line up.
struct GroupView<'t, 'e> {
    traces: &'t BTreeMap<u32, Trace<'e>>,
    empty: Trace<'e>,
    members: BTreeSet<u32>,
    dumped_ranks: BTreeSet<u32>,
    /// Members without a dump.
    missing: Vec<u32>,
    /// Members whose wrapped buffer holds nothing of this group: nothing can be said.
    unknown: Vec<u32>,
    /// Members whose dumps are compared.
    participants: Vec<u32>,
    aligned_from: Option<u64>,
    last_seq: Option<u64>,
    /// The highest completed sequence id of each participant.
    completed_up_to: BTreeMap<u32, u64>,
}

impl<'t, 'e> GroupView<'t, 'e> {
    fn new(
        key: &GroupKey,
        traces: &'t BTreeMap<u32, Trace<'e>>,
        dumped: &BTreeSet<u32>,
        wrapped: &BTreeMap<u32, Option<&FrEntry>>,
    ) -> Self {
        let members: BTreeSet<u32> = match &key.members {
            Some(members) => members.iter().copied().collect(),
            None => traces.keys().copied().collect(),
        };
        let mut view = GroupView {
            traces,
            empty: Trace::new(),
            dumped_ranks: members.intersection(dumped).copied().collect(),
            missing: members.difference(dumped).copied().collect(),
            members,
            unknown: Vec::new(),
            participants: Vec::new(),
            aligned_from: None,
            last_seq: None,
            completed_up_to: BTreeMap::new(),
        };
        let group_used = view
            .dumped_ranks
            .iter()
            .any(|rank| !view.trace_of(*rank).is_empty());
        // No entry of a used group in a wrapped buffer says nothing: they may have been
        // overwritten by other groups' entries. In a buffer that never wrapped it means the
        // rank never entered any collective of this group.
        view.unknown = view
            .dumped_ranks
            .iter()
            .filter(|rank| {
                group_used && view.trace_of(**rank).is_empty() && wrapped.contains_key(rank)
            })
            .copied()
            .collect();
        view.participants = view
            .dumped_ranks
            .iter()
            .filter(|rank| !view.unknown.contains(rank))
            .copied()
            .collect();
        view.align(key, wrapped);
        // Work on one group runs on one stream in order, so a later completed collective
        // means every earlier one completed, even if the watchdog had not noticed yet.
        view.completed_up_to = view
            .participants
            .iter()
            .filter_map(|rank| {
                let highest = view
                    .trace_of(*rank)
                    .iter()
                    .filter(|(_, entries)| last_state(entries) == EntryState::Completed)
                    .map(|(seq, _)| *seq)
                    .max()?;
                Some((*rank, highest))
            })
            .collect();
        view
    }

    fn trace_of(&self, rank: u32) -> &Trace<'e> {
        self.traces.get(&rank).unwrap_or(&self.empty)
    }

    /// Align: start at the first sequence id every rank still holds.
    fn align(&mut self, key: &GroupKey, wrapped: &BTreeMap<u32, Option<&FrEntry>>) {
        let participants = &self.participants;
        let mut aligned_from = participants
            .iter()
            .filter_map(|rank| self.trace_of(*rank).keys().next())
            .max()
            .copied();
        let last_seq = participants
            .iter()
            .filter_map(|rank| self.trace_of(*rank).keys().next_back())
            .max()
            .copied();
        // A wrapped buffer that starts inside that collective may hold only its tail.
        if let (Some(start), Some(last)) = (aligned_from, last_seq) {
            let truncated = participants.iter().any(|rank| {
                wrapped.get(rank).copied().flatten().is_some_and(|oldest| {
                    oldest.pg_name == key.name && oldest.collective_seq_id == start
                })
            });
            if truncated && start < last {
                aligned_from = trace_of_any_after(participants, self.traces, start);
            }
        }
        self.aligned_from = aligned_from;
        self.last_seq = last_seq;
    }

    /// Every sequence id from `start` that any participant holds.
    fn seqs_from(&self, start: u64) -> BTreeSet<u64> {
        self.participants
            .iter()
            .flat_map(|rank| self.trace_of(*rank).range(start..).map(|(seq, _)| *seq))
            .collect()
    }

    /// Where the group stops lining up at `seq`, if it does: a rank that never entered
    /// the collective, ranks that passed different arguments, or ranks that wait in it.
    fn divergence_at(&self, place: &GroupPlace<'_>, seq: u64) -> Option<FirstDivergence> {
        let at_seq: BTreeMap<u32, &[&FrEntry]> = self
            .participants
            .iter()
            .filter_map(|rank| Some((*rank, self.trace_of(*rank).get(&seq)?.as_slice())))
            .collect();
        let joined: Vec<u32> = at_seq.keys().copied().collect();
        let absent: Vec<u32> = self
            .participants
            .iter()
            .filter(|rank| !at_seq.contains_key(rank))
            .copied()
            .collect();
        let pending: Vec<u32> = joined
            .iter()
            .filter(|rank| {
                self.completed_up_to
                    .get(rank)
                    .is_none_or(|done| *done < seq)
            })
            .copied()
            .collect();
        let op = majority_op(&at_seq);
        let collective = Collective {
            place,
            seq,
            op: op.clone(),
        };
        let error =
            |kind, culprits: Vec<u32>, waiting: Vec<u32>, message: String| FirstDivergence {
                kind,
                seq: Some(seq),
                op: op.clone(),
                waiting_at: waiting_frame(&at_seq, &waiting),
                pending_since_ns: at_seq
                    .values()
                    .flat_map(|entries| entries.iter().filter_map(|e| e.time_created_ns))
                    .min(),
                culprit_ranks: culprits,
                waiting_ranks: waiting,
                message,
            };
        let missing = &self.missing;

        if !absent.is_empty() {
            let mut message = if pending.is_empty() {
                format!(
                    "{} never entered {collective}; {} completed it, so the dumps may have been \
                     taken at different times",
                    ranks_text(&absent),
                    ranks_text(&joined)
                )
            } else {
                format!(
                    "{} never entered {collective}; {} entered it and wait",
                    ranks_text(&absent),
                    ranks_text(&pending)
                )
            };
            if !missing.is_empty() {
                message.push_str(&format!("; no dump from {}", ranks_text(missing)));
            }
            return Some(error(FrFindingKind::NeverEntered, absent, pending, message));
        }
        if let Some(odd) = find_mismatch(&at_seq) {
            let message = format!(
                "{} passed {} to {collective} where {} passed {}{}",
                ranks_text(&odd.ranks),
                odd.theirs,
                ranks_text(&odd.majority_ranks),
                odd.majority,
                if odd.tie {
                    " (as many ranks on each side: the culprit may be the other side)"
                } else {
                    ""
                }
            );
            let waiting: Vec<u32> = pending
                .iter()
                .filter(|rank| !odd.ranks.contains(rank))
                .copied()
                .collect();
            return Some(error(odd.kind, odd.ranks, waiting, message));
        }
        if pending.is_empty() {
            return None;
        }
        let done: Vec<u32> = joined
            .iter()
            .filter(|rank| !pending.contains(rank))
            .copied()
            .collect();
        Some(if !missing.is_empty() {
            let message = format!(
                "{} wrote no dump while {} wait in {collective}: the process or its node \
                 is gone, or it could not write its dump",
                ranks_text(missing),
                ranks_text(&pending)
            );
            error(
                FrFindingKind::MissingDump,
                missing.clone(),
                pending,
                message,
            )
        } else if !done.is_empty() {
            let message = format!(
                "{} entered {collective} and did not complete it while {} did: the kernel \
                 did not finish on their GPUs",
                ranks_text(&pending),
                ranks_text(&done)
            );
            error(FrFindingKind::NotCompleted, pending, Vec::new(), message)
        } else {
            let message = format!(
                "every rank entered {collective} and none completed it: no rank is behind, \
                 so the collective itself is stuck (network or GPU), or the dumps were \
                 taken while it ran"
            );
            error(FrFindingKind::Stalled, Vec::new(), pending, message)
        })
    }
}

/// The smallest sequence id after `start` that any participant holds.
fn trace_of_any_after(
    participants: &[u32],
    traces: &BTreeMap<u32, Trace<'_>>,
    start: u64,
) -> Option<u64> {
    participants
        .iter()
        .filter_map(|rank| {
            traces
                .get(rank)?
                .range(start + 1..)
                .next()
                .map(|(seq, _)| *seq)
        })
        .min()
}

/// Names a group in messages: "process group `0` (default_pg)".
struct GroupPlace<'a> {
    name: &'a str,
    desc: &'a str,
}

impl std::fmt::Display for GroupPlace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process group `{}`", self.name)?;
        if !self.desc.is_empty() && self.desc != self.name {
            write!(f, " ({})", self.desc)?;
        }
        Ok(())
    }
}

/// Names a collective in messages: "nccl:all_reduce (seq 6) in process group `0`".
struct Collective<'a> {
    place: &'a GroupPlace<'a>,
    seq: u64,
    op: Option<String>,
}

impl std::fmt::Display for Collective<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.op {
            Some(op) => write!(f, "{op} (seq {}) in {}", self.seq, self.place),
            None => write!(f, "collective seq {} in {}", self.seq, self.place),
        }
    }
}

/// The state of a sequence id on one rank: its newest entry's (the coalesced end).
fn last_state(entries: &[&FrEntry]) -> EntryState {
    entries
        .iter()
        .max_by_key(|entry| entry.record_id)
        .map_or(EntryState::Scheduled, |entry| entry.state)
}

fn op_name(entries: &[&FrEntry]) -> String {
    let names: Vec<&str> = entries.iter().map(|e| e.profiling_name.as_str()).collect();
    names.join(" + ")
}

fn majority_op(at_seq: &BTreeMap<u32, &[&FrEntry]>) -> Option<String> {
    let names: BTreeMap<u32, String> = at_seq
        .iter()
        .map(|(rank, entries)| (*rank, op_name(entries)))
        .collect();
    let op = match split_by_value(&names) {
        Some(split) => split.majority,
        None => names.into_values().next()?,
    };
    (!op.is_empty()).then_some(op)
}

/// The innermost recorded frame of the first waiting rank's entry, "fn at file:line".
fn waiting_frame(at_seq: &BTreeMap<u32, &[&FrEntry]>, waiting: &[u32]) -> Option<String> {
    waiting.iter().find_map(|rank| {
        let frame = at_seq.get(rank)?.first()?.frames.first()?;
        Some(match frame.line {
            Some(line) => format!("{} at {}:{line}", frame.name, frame.filename),
            None => format!("{} at {}", frame.name, frame.filename),
        })
    })
}

/// Ranks that passed something else than the majority.
struct Odd {
    kind: FrFindingKind,
    ranks: Vec<u32>,
    theirs: String,
    majority_ranks: Vec<u32>,
    majority: String,
    tie: bool,
}

/// Collective name, then sizes, then dtypes, as torch's matcher checks them.
fn find_mismatch(at_seq: &BTreeMap<u32, &[&FrEntry]>) -> Option<Odd> {
    let names: BTreeMap<u32, String> = at_seq
        .iter()
        .map(|(rank, entries)| (*rank, op_name(entries)))
        .collect();
    if let Some(split) = split_by_value(&names) {
        return Some(split.into_odd(FrFindingKind::OpMismatch, |name| format!("`{name}`")));
    }
    // All-to-all, gather and scatter legitimately differ in sizes between ranks.
    let uneven = at_seq
        .values()
        .flat_map(|entries| entries.iter())
        .any(|entry| has_uneven_sizes(&entry.profiling_name));
    if !uneven {
        let sizes: BTreeMap<u32, (Shapes, Shapes)> = at_seq
            .iter()
            .map(|(rank, entries)| {
                let sized = entries
                    .iter()
                    .filter(|e| !is_coalesced_end(&e.profiling_name));
                let inputs = sized.clone().flat_map(|e| e.input_sizes.clone()).collect();
                let outputs = sized.flat_map(|e| e.output_sizes.clone()).collect();
                (*rank, (inputs, outputs))
            })
            .collect();
        if let Some(split) = split_by_value(&sizes) {
            return Some(
                split.into_odd(FrFindingKind::SizeMismatch, |(inputs, outputs)| {
                    format!("input sizes {inputs:?} (output sizes {outputs:?})")
                }),
            );
        }
    }
    let dtypes: BTreeMap<u32, (Vec<String>, Vec<String>)> = at_seq
        .iter()
        .map(|(rank, entries)| {
            let inputs = entries
                .iter()
                .flat_map(|e| e.input_dtypes.clone())
                .collect();
            let outputs = if uneven {
                Vec::new()
            } else {
                entries
                    .iter()
                    .flat_map(|e| e.output_dtypes.clone())
                    .collect()
            };
            (*rank, (inputs, outputs))
        })
        .collect();
    split_by_value(&dtypes).map(|split| {
        split.into_odd(FrFindingKind::DtypeMismatch, |(inputs, outputs)| {
            format!(
                "input dtypes [{}] (output dtypes [{}])",
                inputs.join(", "),
                outputs.join(", ")
            )
        })
    })
}

fn has_uneven_sizes(profiling_name: &str) -> bool {
    let op = profiling_name.rsplit(':').next().unwrap_or(profiling_name);
    op.contains("all_to_all")
        || op.contains("alltoall")
        || op.starts_with("gather")
        || op.starts_with("scatter")
        || op.starts_with("_gather")
        || op.starts_with("_scatter")
}

/// The end marker of a coalesced launch carries no tensors of its own.
fn is_coalesced_end(profiling_name: &str) -> bool {
    profiling_name.ends_with("coalesced")
}

/// Ranks grouped by what they passed, when not all passed the same.
struct Split<T> {
    majority: T,
    majority_ranks: Vec<u32>,
    others: Vec<(T, Vec<u32>)>,
    tie: bool,
}

impl<T> Split<T> {
    fn into_odd(self, kind: FrFindingKind, show: impl Fn(&T) -> String) -> Odd {
        let theirs: Vec<String> = self.others.iter().map(|(value, _)| show(value)).collect();
        Odd {
            kind,
            ranks: {
                let mut ranks: Vec<u32> = self.others.iter().flat_map(|(_, r)| r.clone()).collect();
                ranks.sort_unstable();
                ranks
            },
            theirs: theirs.join(" / "),
            majority_ranks: self.majority_ranks,
            majority: show(&self.majority),
            tie: self.tie,
        }
    }
}

/// The value most ranks share is taken as right; ties go to the value of the lowest
/// rank, and are flagged.
fn split_by_value<T: Ord + Clone>(by_rank: &BTreeMap<u32, T>) -> Option<Split<T>> {
    let mut ranks_by_value: BTreeMap<&T, Vec<u32>> = BTreeMap::new();
    for (rank, value) in by_rank {
        ranks_by_value.entry(value).or_default().push(*rank);
    }
    if ranks_by_value.len() < 2 {
        return None;
    }
    let mut sides: Vec<(T, Vec<u32>)> = ranks_by_value
        .into_iter()
        .map(|(value, ranks)| (value.clone(), ranks))
        .collect();
    // Largest side first; among equals, the side holding the lowest rank.
    sides.sort_by(|(_, a), (_, b)| b.len().cmp(&a.len()).then(a[0].cmp(&b[0])));
    let (majority, majority_ranks) = sides.remove(0);
    let tie = sides[0].1.len() == majority_ranks.len();
    Some(Split {
        majority,
        majority_ranks,
        others: sides,
        tie,
    })
}

/// Order for choosing the first error among equally old candidates.
fn kind_rank(kind: FrFindingKind) -> u8 {
    match kind {
        FrFindingKind::NeverEntered => 0,
        FrFindingKind::OpMismatch => 1,
        FrFindingKind::SizeMismatch => 2,
        FrFindingKind::DtypeMismatch => 3,
        FrFindingKind::MissingDump => 4,
        FrFindingKind::NotCompleted => 5,
        FrFindingKind::Stalled => 6,
    }
}

/// Turn group errors into findings and choose the first error: a group error whose
/// culprits do not wait in another group (a rank blocked in one group never enters the
/// next), then the oldest, then by kind.
fn pick_first_error(
    groups: &[GroupReport],
    missing: &[u32],
) -> (Option<FrFinding>, Vec<FrFinding>) {
    let mut candidates: Vec<(FrFinding, Option<i64>)> = groups
        .iter()
        .filter_map(|group| {
            let error = group.first_error.as_ref()?;
            Some((
                FrFinding {
                    kind: error.kind,
                    group: Some(group.name.clone()),
                    group_desc: Some(group.desc.clone()),
                    seq: error.seq,
                    op: error.op.clone(),
                    ranks: error.culprit_ranks.clone(),
                    waiting_ranks: error.waiting_ranks.clone(),
                    lane: error.kind.lane(),
                    first_error: false,
                    message: error.message.clone(),
                },
                error.pending_since_ns,
            ))
        })
        .collect();

    // Culprits that themselves wait elsewhere are a consequence, not the origin.
    let waits_elsewhere = |index: usize, rank: u32| -> Option<String> {
        candidates
            .iter()
            .enumerate()
            .find_map(|(other, (finding, _))| {
                (other != index && finding.waiting_ranks.contains(&rank))
                    .then(|| finding.group.clone().unwrap_or_default())
            })
    };
    let mut downstream = vec![false; candidates.len()];
    let mut explanations = Vec::new();
    for (index, (finding, _)) in candidates.iter().enumerate() {
        let blocked: Vec<(u32, String)> = finding
            .ranks
            .iter()
            .filter_map(|rank| Some((*rank, waits_elsewhere(index, *rank)?)))
            .collect();
        if let Some((_, group)) = blocked.first() {
            downstream[index] = true;
            let ranks: Vec<u32> = blocked.iter().map(|(rank, _)| *rank).collect();
            explanations.push((
                index,
                format!(
                    "; {} wait in process group `{group}` themselves",
                    ranks_text(&ranks)
                ),
            ));
        }
    }
    for (index, explanation) in explanations {
        candidates[index].0.message.push_str(&explanation);
    }
    // Where the waiting ranks are in their code goes last.
    let errors = groups.iter().filter_map(|group| group.first_error.as_ref());
    for ((finding, _), error) in candidates.iter_mut().zip(errors) {
        if let Some(at) = &error.waiting_at {
            finding.message.push_str(&format!(" (waiting at {at})"));
        }
    }

    let order = |index: &usize| {
        let (finding, since) = &candidates[*index];
        (
            since.unwrap_or(i64::MAX),
            kind_rank(finding.kind),
            finding.group.clone(),
        )
    };
    let with_culprits: Vec<usize> = (0..candidates.len())
        .filter(|index| !candidates[*index].0.ranks.is_empty())
        .collect();
    let roots: Vec<usize> = with_culprits
        .iter()
        .copied()
        .filter(|index| !downstream[*index])
        .collect();
    let pool = if !roots.is_empty() {
        roots
    } else if !with_culprits.is_empty() {
        with_culprits
    } else {
        (0..candidates.len()).collect()
    };
    let chosen = pool.iter().min_by_key(|index| order(index)).copied();

    let mut findings: Vec<FrFinding> = candidates.into_iter().map(|(finding, _)| finding).collect();
    // Ranks without a dump that no group error already names.
    let named_missing: BTreeSet<u32> = findings
        .iter()
        .filter(|f| f.kind == FrFindingKind::MissingDump)
        .flat_map(|f| f.ranks.iter().copied())
        .collect();
    let unnamed: Vec<u32> = missing
        .iter()
        .filter(|rank| !named_missing.contains(rank))
        .copied()
        .collect();
    if !unnamed.is_empty() {
        findings.push(FrFinding {
            kind: FrFindingKind::MissingDump,
            group: None,
            group_desc: None,
            seq: None,
            op: None,
            ranks: unnamed.clone(),
            waiting_ranks: Vec::new(),
            lane: FrFindingKind::MissingDump.lane(),
            first_error: false,
            message: format!(
                "{} of the process groups wrote no dump: the process or its node is gone, or it \
                 could not write its dump",
                ranks_text(&unnamed)
            ),
        });
    }
    let chosen = chosen.or_else(|| (!unnamed.is_empty()).then(|| findings.len() - 1));
    let Some(chosen) = chosen else {
        return (None, findings);
    };
    let mut first = findings.remove(chosen);
    first.first_error = true;
    findings.insert(0, first.clone());
    (Some(first), findings)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::flight_recorder::dump::{FrDump, PgConfig};
    use crate::flight_recorder::{DumpFormat, EntryState};

    /// A collective entry of group `0`.
    fn entry(record_id: u64, seq: u64, name: &str, state: EntryState) -> FrEntry {
        FrEntry {
            record_id,
            pg_id: Some(0),
            pg_name: "0".into(),
            pg_desc: "default_pg".into(),
            collective_seq_id: seq,
            p2p_seq_id: 0,
            op_id: None,
            profiling_name: format!("nccl:{name}"),
            time_created_ns: Some(1_000 + record_id as i64),
            input_sizes: vec![vec![8]],
            input_dtypes: vec!["Float".into()],
            output_sizes: vec![vec![8]],
            output_dtypes: vec!["Float".into()],
            state,
            time_discovered_started_ns: None,
            time_discovered_completed_ns: None,
            retired: false,
            timeout_ms: None,
            duration_ms: None,
            is_p2p: false,
            frames: Vec::new(),
            thread_id: None,
            thread_name: None,
        }
    }

    /// A dump of `rank` in group `0` of ranks `0..world`.
    fn dump(rank: u32, world: u32, entries: Vec<FrEntry>) -> FrDump {
        let config = PgConfig {
            name: "0".into(),
            desc: "default_pg".into(),
            ranks: Some((0..world).collect()),
        };
        FrDump {
            rank,
            path: PathBuf::from(format!("trace_{rank}")),
            format: DumpFormat::Json,
            version: Some("2.10".into()),
            pg_config: [("0".to_string(), config)].into(),
            pg_status: BTreeMap::new(),
            entries,
            skipped_entries: 0,
        }
    }

    fn completed(seqs: std::ops::RangeInclusive<u64>) -> Vec<FrEntry> {
        seqs.map(|seq| entry(seq, seq, "all_reduce", EntryState::Completed))
            .collect()
    }

    #[test]
    fn a_buffer_cut_inside_a_coalesced_launch_is_not_a_mismatch() {
        use EntryState::Completed;
        let whole = vec![
            entry(0, 1, "all_reduce", Completed),
            entry(1, 1, "all_reduce", Completed),
            entry(2, 1, "coalesced", Completed),
            entry(3, 2, "all_reduce", Completed),
        ];
        // Rank 1's ring buffer kept only the end marker of the coalesced launch.
        let cut = vec![
            entry(2, 1, "coalesced", Completed),
            entry(3, 2, "all_reduce", Completed),
        ];
        let report = analyze(&[dump(0, 2, whole), dump(1, 2, cut)]);
        assert_eq!(report.first_error, None, "{report:#?}");
        assert_eq!(report.groups[0].aligned_from_seq, Some(2));
    }

    #[test]
    fn everybody_in_and_nobody_done_is_stalled_without_a_culprit() {
        let mut entries: Vec<Vec<FrEntry>> = (0..3).map(|_| completed(1..=2)).collect();
        for trace in &mut entries {
            trace.push(entry(3, 3, "all_reduce", EntryState::Started));
        }
        let dumps: Vec<FrDump> = entries
            .into_iter()
            .enumerate()
            .map(|(rank, trace)| dump(rank as u32, 3, trace))
            .collect();
        let first = analyze(&dumps).first_error.unwrap();
        assert_eq!(first.kind, FrFindingKind::Stalled);
        assert!(first.ranks.is_empty());
        assert_eq!(first.waiting_ranks, vec![0, 1, 2]);
        assert_eq!(first.lane, gpuvet_model::results::Lane::Network);
    }

    #[test]
    fn a_rank_that_did_not_finish_what_others_finished_is_the_host_culprit() {
        let mut slow = completed(1..=2);
        slow.push(entry(3, 3, "all_reduce", EntryState::Started));
        let dumps = [dump(0, 2, completed(1..=3)), dump(1, 2, slow)];
        let first = analyze(&dumps).first_error.unwrap();
        assert_eq!(first.kind, FrFindingKind::NotCompleted);
        assert_eq!(first.ranks, vec![1]);
        assert_eq!(first.lane, gpuvet_model::results::Lane::Host);
    }

    #[test]
    fn a_later_completion_means_the_earlier_collectives_completed() {
        // The watchdog had not yet marked seq 2 on rank 1, but seq 3 completed after it.
        let mut late = completed(1..=3);
        late[1].state = EntryState::Scheduled;
        let report = analyze(&[dump(0, 2, completed(1..=3)), dump(1, 2, late)]);
        assert_eq!(report.first_error, None, "{report:#?}");
    }

    #[test]
    fn a_wrapped_rank_without_entries_of_a_group_is_left_out() {
        let mut other = entry(40, 1, "all_reduce", EntryState::Completed);
        other.pg_name = "9".into();
        let report = analyze(&[dump(0, 2, completed(1..=3)), dump(1, 2, vec![other])]);
        let group = report.groups.iter().find(|g| g.name == "0").unwrap();
        assert_eq!(group.unknown_ranks, vec![1]);
        assert_eq!(group.first_error, None);
        assert_eq!(report.notes.len(), 1, "{:#?}", report.notes);
    }

    #[test]
    fn majority_wins_and_ties_are_flagged() {
        let values: BTreeMap<u32, i32> = [(0, 1), (1, 2), (2, 1), (3, 1)].into();
        let split = split_by_value(&values).unwrap();
        assert_eq!(split.majority, 1);
        assert_eq!(split.others, vec![(2, vec![1])]);
        assert!(!split.tie);

        let tied: BTreeMap<u32, i32> = [(0, 5), (1, 7), (2, 7), (3, 5)].into();
        let split = split_by_value(&tied).unwrap();
        assert_eq!(split.majority, 5);
        assert_eq!(split.majority_ranks, vec![0, 3]);
        assert!(split.tie);

        let same: BTreeMap<u32, i32> = [(0, 1), (1, 1)].into();
        assert!(split_by_value(&same).is_none());
    }

    #[test]
    fn uneven_ops_are_recognized() {
        assert!(has_uneven_sizes("nccl:all_to_all"));
        assert!(has_uneven_sizes("nccl:alltoall_base"));
        assert!(has_uneven_sizes("nccl:gather"));
        assert!(has_uneven_sizes("nccl:scatter"));
        assert!(!has_uneven_sizes("nccl:all_gather"));
        assert!(!has_uneven_sizes("nccl:_allgather_base"));
        assert!(!has_uneven_sizes("nccl:reduce_scatter"));
    }
}
