//! From RAS status reports to findings: who is dead, who is behind, who stopped.
//!
//! One report shows ranks RAS cannot reach (dead or unresponsive), ranks missing for no
//! stated reason, NCCL errors, and ranks whose collective counts differ from their
//! peers. A count difference alone is normal while collectives are in flight (NCCL's
//! docs say so); only the comparison with the previous poll tells a hang: a rank whose
//! counts did not move while its peers advanced, or a communicator where nobody moved
//! and some ranks are still behind. A rank behind is the one that did not launch the
//! collective the others wait in: the first error, in C4D's terms.
//!
//! Lanes: a rank RAS cannot reach is a `network` finding, because what RAS observes is
//! lost connectivity over its TCP mesh (a crashed process looks the same, and the host
//! sources on that node tell the two apart). A rank that is reachable but does not
//! launch its collectives points at the workload (`app`): a data-loader stall, diverging
//! control flow, an exception on one rank. NCCL error codes map by their meaning: CUDA
//! errors to `host`, system and remote errors to `network`, usage errors to `app`.

use std::collections::{BTreeMap, BTreeSet};

use gpuvet_model::results::Lane;
use serde::{Deserialize, Serialize};

use super::status::{RasCommunicator, RasRank, RasStatus};

/// `ncclResult_t` values that matter here (`nccl.h`).
const NCCL_SUCCESS: i64 = 0;
const NCCL_UNHANDLED_CUDA_ERROR: i64 = 1;
const NCCL_SYSTEM_ERROR: i64 = 2;
const NCCL_REMOTE_ERROR: i64 = 6;
const NCCL_IN_PROGRESS: i64 = 7;

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommFindingKind {
    /// RAS declared the process dead: unreachable for 60 s or more.
    Dead,
    /// RAS timed out reaching the process while collecting this report.
    Timeout,
    /// The communicator has ranks that reported nothing, for no stated reason.
    Incomplete,
    /// Some legs of RAS's own data collection timed out (job-wide).
    CollectionTimeout,
    /// `ncclCommInit*` failed on the rank.
    InitError,
    /// The rank's communicator holds an asynchronous error.
    AsyncError,
    /// The application aborted the rank's communicator.
    Aborted,
    /// The process answered but does not count itself a member (init or teardown).
    NotMember,
    /// Ranks report different collective counts in this one report.
    Mismatch,
    /// The rank launched nothing between two polls while peers advanced.
    Stuck,
    /// Nobody launched anything between two polls and some ranks are still behind.
    Hang,
}

/// One problem in one communicator (or, for `collection_timeout`, in the whole job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommFinding {
    /// The communicator's hash (`0x...`); `None` for a job-wide finding.
    pub communicator: Option<String>,
    pub kind: CommFindingKind,
    /// The ranks the finding is about: for a hang, the ranks that did not arrive.
    pub ranks: Vec<u32>,
    /// Nodes of `ranks`, as RAS names them (IP addresses).
    pub hosts: Vec<String>,
    /// Processes of `ranks`, where RAS knows them.
    pub pids: Vec<i64>,
    /// Ranks that only wait on `ranks`; they are not at fault.
    pub waiting_ranks: Vec<u32>,
    pub lane: Lane,
    /// `ranks` are the likely origin, not a consequence of another rank's failure.
    pub first_error: bool,
    pub message: String,
}

/// Keeps the previous poll's collective counts so that the next poll can tell moving
/// ranks from stuck ones.
#[derive(Debug, Default)]
pub struct RasAnalyzer {
    previous: Option<BTreeMap<String, BTreeMap<u32, Counts>>>,
}

type Counts = BTreeMap<String, u64>;

impl RasAnalyzer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Analyze one poll against the previous one and remember it for the next.
    pub fn observe(&mut self, status: &RasStatus) -> Vec<CommFinding> {
        let findings = analyze(self.previous.as_ref(), status);
        self.previous = Some(
            status
                .communicators
                .iter()
                .map(|comm| (comm.id(), active_counts(comm)))
                .collect(),
        );
        findings
    }

    /// Forget the previous poll (e.g. after the job restarted).
    pub fn reset(&mut self) {
        self.previous = None;
    }
}

/// Analyze one report on its own: everything except stuck counters.
pub fn analyze_status(status: &RasStatus) -> Vec<CommFinding> {
    analyze(None, status)
}

fn analyze(
    previous: Option<&BTreeMap<String, BTreeMap<u32, Counts>>>,
    status: &RasStatus,
) -> Vec<CommFinding> {
    let mut findings = Vec::new();
    for comm in &status.communicators {
        let before = previous.and_then(|previous| previous.get(&comm.id()));
        findings.extend(analyze_communicator(comm, before));
    }
    let timeouts = status.ras.as_ref().map_or(0, |ras| ras.timeouts_count);
    let any_unreachable = findings
        .iter()
        .any(|f| matches!(f.kind, CommFindingKind::Dead | CommFindingKind::Timeout));
    if timeouts > 0 && !any_unreachable {
        findings.push(CommFinding {
            communicator: None,
            kind: CommFindingKind::CollectionTimeout,
            ranks: Vec::new(),
            hosts: Vec::new(),
            pids: Vec::new(),
            waiting_ranks: Vec::new(),
            lane: Lane::Network,
            first_error: false,
            message: format!(
                "nccl ras hit {timeouts} communication timeout(s) while gathering data: \
                 the report may be incomplete"
            ),
        });
    }
    findings
}

/// Who a finding names: rank numbers with their nodes and processes.
#[derive(Default)]
struct Named {
    ranks: Vec<u32>,
    hosts: Vec<String>,
    pids: Vec<i64>,
}

impl Named {
    fn add(&mut self, rank: u32, host: Option<&str>, pid: Option<i64>) {
        self.ranks.push(rank);
        let host = host.filter(|h| !h.is_empty() && *h != "unknown");
        if let Some(host) = host.filter(|h| !self.hosts.iter().any(|known| known == h)) {
            self.hosts.push(host.to_string());
        }
        if let Some(pid) = pid.filter(|pid| *pid >= 0) {
            self.pids.push(pid);
        }
    }

    fn of_ranks<'a>(ranks: impl IntoIterator<Item = &'a RasRank>) -> Self {
        let mut named = Self::default();
        for rank in ranks {
            named.add(rank.rank, rank.host.as_deref(), rank.pid);
        }
        named
    }
}

struct FindingDraft {
    kind: CommFindingKind,
    named: Named,
    waiting_ranks: Vec<u32>,
    lane: Lane,
    first_error: bool,
    message: String,
}

fn analyze_communicator(
    comm: &RasCommunicator,
    before: Option<&BTreeMap<u32, Counts>>,
) -> Vec<CommFinding> {
    let mut drafts = Vec::new();
    let label = format!("communicator `{}`", comm.hash);

    // Missing ranks, by the reason RAS gives.
    let mut dead = Named::default();
    let mut unresponsive = Named::default();
    let mut not_member = Named::default();
    for missing in &comm.missing_ranks {
        let target = if missing.status.considered_dead {
            &mut dead
        } else if missing.status.unresponsive {
            &mut unresponsive
        } else {
            &mut not_member
        };
        target.add(missing.rank, missing.host.as_deref(), missing.pid);
    }
    let reporting: Vec<u32> = comm.ranks.iter().map(|r| r.rank).collect();
    let unreachable = !dead.ranks.is_empty() || !unresponsive.ranks.is_empty();
    if !dead.ranks.is_empty() {
        let message = format!(
            "{label}: {} considered dead by nccl ras (unreachable for 60 s or more){}",
            describe(&dead),
            waiting_note(&reporting)
        );
        drafts.push(FindingDraft {
            kind: CommFindingKind::Dead,
            named: dead,
            waiting_ranks: reporting.clone(),
            lane: Lane::Network,
            first_error: true,
            message,
        });
    }
    if !unresponsive.ranks.is_empty() {
        let message = format!(
            "{label}: nccl ras timed out reaching {}: hung, or its network is down{}",
            describe(&unresponsive),
            waiting_note(&reporting)
        );
        drafts.push(FindingDraft {
            kind: CommFindingKind::Timeout,
            named: unresponsive,
            waiting_ranks: reporting.clone(),
            lane: Lane::Network,
            first_error: true,
            message,
        });
    }
    if !not_member.ranks.is_empty() {
        let message = format!(
            "{label}: {} answered but no longer (or not yet) count themselves members; \
             normal during init or teardown",
            describe(&not_member)
        );
        drafts.push(FindingDraft {
            kind: CommFindingKind::NotMember,
            named: not_member,
            waiting_ranks: Vec::new(),
            lane: Lane::App,
            first_error: false,
            message,
        });
    }
    let unaccounted = unaccounted_ranks(comm);
    if !unaccounted.is_empty() {
        let named = Named {
            ranks: unaccounted,
            ..Named::default()
        };
        let message = format!(
            "{label}: no data at all from {} of its {} ranks",
            describe(&named),
            comm.size.unwrap_or_default()
        );
        drafts.push(FindingDraft {
            kind: CommFindingKind::Incomplete,
            named,
            waiting_ranks: Vec::new(),
            lane: Lane::Network,
            first_error: false,
            message,
        });
    }

    drafts.extend(error_drafts(&label, comm, unreachable));
    drafts.extend(progress_drafts(&label, comm, before));

    drafts
        .into_iter()
        .map(|draft| CommFinding {
            communicator: Some(comm.hash.clone()),
            kind: draft.kind,
            ranks: draft.named.ranks,
            hosts: draft.named.hosts,
            pids: draft.named.pids,
            waiting_ranks: draft.waiting_ranks,
            lane: draft.lane,
            first_error: draft.first_error,
            message: draft.message,
        })
        .collect()
}

/// Ranks below `size` that appear neither as reporting nor as missing.
fn unaccounted_ranks(comm: &RasCommunicator) -> Vec<u32> {
    let Some(size) = comm.size.and_then(|size| u32::try_from(size).ok()) else {
        return Vec::new();
    };
    let known: BTreeSet<u32> = comm
        .ranks
        .iter()
        .map(|r| r.rank)
        .chain(comm.missing_ranks.iter().map(|r| r.rank))
        .collect();
    (0..size).filter(|rank| !known.contains(rank)).collect()
}

/// Init failures, asynchronous errors and aborts, grouped by kind and code.
fn error_drafts(label: &str, comm: &RasCommunicator, unreachable: bool) -> Vec<FindingDraft> {
    let mut by_kind_and_code: BTreeMap<(CommFindingKind, i64), Vec<&RasRank>> = BTreeMap::new();
    for rank in &comm.ranks {
        let status = &rank.status;
        if is_error(status.init_state) {
            by_kind_and_code
                .entry((CommFindingKind::InitError, status.init_state))
                .or_default()
                .push(rank);
        }
        if is_error(status.async_error) {
            by_kind_and_code
                .entry((CommFindingKind::AsyncError, status.async_error))
                .or_default()
                .push(rank);
        }
        if status.abort_flag {
            by_kind_and_code
                .entry((CommFindingKind::Aborted, 0))
                .or_default()
                .push(rank);
        }
    }
    by_kind_and_code
        .into_iter()
        .map(|((kind, code), ranks)| {
            let named = Named::of_ranks(ranks);
            let (message, lane, first_error) = match kind {
                CommFindingKind::Aborted => (
                    format!("{label}: the application aborted {}", describe(&named)),
                    Lane::App,
                    false,
                ),
                _ => {
                    let what = if kind == CommFindingKind::InitError {
                        "failed to initialize"
                    } else {
                        "holds an asynchronous error"
                    };
                    // A remote error on a peer of an unreachable rank is the echo of it.
                    let echo = code == NCCL_REMOTE_ERROR && unreachable;
                    (
                        format!(
                            "{label}: {} {what}: {} (`ncclResult_t` {code}){}",
                            describe(&named),
                            nccl_error_name(code),
                            if echo {
                                "; a consequence of the unreachable rank"
                            } else {
                                ""
                            }
                        ),
                        nccl_error_lane(code),
                        !echo,
                    )
                }
            };
            FindingDraft {
                kind,
                named,
                waiting_ranks: Vec::new(),
                lane,
                first_error,
                message,
            }
        })
        .collect()
}

/// Count mismatches in this report, and stuck or hung ranks against the previous one.
fn progress_drafts(
    label: &str,
    comm: &RasCommunicator,
    before: Option<&BTreeMap<u32, Counts>>,
) -> Vec<FindingDraft> {
    let now = active_counts(comm);
    if now.len() < 2 {
        return Vec::new();
    }
    let most = highest_counts(&now);
    let behind: BTreeSet<u32> = now
        .iter()
        .filter(|(_, counts)| is_behind(counts, &most))
        .map(|(rank, _)| *rank)
        .collect();
    let ranks_of = |numbers: &BTreeSet<u32>| {
        Named::of_ranks(comm.ranks.iter().filter(|r| numbers.contains(&r.rank)))
    };
    let others = |numbers: &BTreeSet<u32>| -> Vec<u32> {
        now.keys()
            .filter(|rank| !numbers.contains(rank))
            .copied()
            .collect()
    };

    if let Some(before) = before {
        let compared: Vec<u32> = now
            .keys()
            .filter(|r| before.contains_key(r))
            .copied()
            .collect();
        let advanced: BTreeSet<u32> = compared
            .iter()
            .filter(|rank| advanced(&before[rank], &now[rank]))
            .copied()
            .collect();
        if !advanced.is_empty() {
            // Not moving is only a problem for a rank that is behind; one that is ahead
            // simply waits for the others to catch up.
            let stuck: BTreeSet<u32> = compared
                .iter()
                .filter(|rank| !advanced.contains(rank) && behind.contains(rank))
                .copied()
                .collect();
            if !stuck.is_empty() {
                let named = ranks_of(&stuck);
                let example = stuck.first().map(|rank| lag(&now[rank], &most));
                let message = format!(
                    "{label}: {} launched no collective since the last poll while {} advanced; \
                     stuck before the next collective{}",
                    describe(&named),
                    rank_list(&advanced.iter().copied().collect::<Vec<_>>()),
                    example.map(|lag| format!(" ({lag})")).unwrap_or_default()
                );
                return vec![FindingDraft {
                    kind: CommFindingKind::Stuck,
                    named,
                    waiting_ranks: advanced.into_iter().collect(),
                    lane: Lane::App,
                    first_error: true,
                    message,
                }];
            }
        } else if !behind.is_empty() && compared.len() == now.len() {
            let named = ranks_of(&behind);
            let waiting = others(&behind);
            let example = behind.first().map(|rank| lag(&now[rank], &most));
            let message = format!(
                "{label}: no rank launched a collective since the last poll and {} still behind{}: \
                 it did not enter the collective that {} wait in",
                describe(&named),
                example.map(|lag| format!(" ({lag})")).unwrap_or_default(),
                rank_list(&waiting)
            );
            return vec![FindingDraft {
                kind: CommFindingKind::Hang,
                named,
                waiting_ranks: waiting,
                lane: Lane::App,
                first_error: true,
                message,
            }];
        }
    }

    if behind.is_empty() {
        return Vec::new();
    }
    let named = ranks_of(&behind);
    let example = behind.first().map(|rank| lag(&now[rank], &most));
    let message = format!(
        "{label}: {} behind on collective counts{}; normal while collectives are in flight, \
         a hang if it persists across polls",
        describe(&named),
        example.map(|lag| format!(" ({lag})")).unwrap_or_default()
    );
    vec![FindingDraft {
        kind: CommFindingKind::Mismatch,
        named,
        waiting_ranks: others(&behind),
        lane: Lane::App,
        first_error: false,
        message,
    }]
}

/// Counts of the ranks that are expected to make progress: initialized, and neither
/// finalizing nor aborted.
fn active_counts(comm: &RasCommunicator) -> BTreeMap<u32, Counts> {
    comm.ranks
        .iter()
        .filter(|rank| {
            let status = &rank.status;
            status.init_state == NCCL_SUCCESS
                && !status.finalize_called
                && !status.destroy_flag
                && !status.abort_flag
        })
        .map(|rank| (rank.rank, rank.collective_counts.clone()))
        .collect()
}

fn highest_counts(all: &BTreeMap<u32, Counts>) -> Counts {
    let mut most = Counts::new();
    for counts in all.values() {
        for (op, &count) in counts {
            let entry = most.entry(op.clone()).or_default();
            *entry = (*entry).max(count);
        }
    }
    most
}

fn is_behind(counts: &Counts, most: &Counts) -> bool {
    most.iter()
        .any(|(op, &highest)| counts.get(op).copied().unwrap_or(0) < highest)
}

fn advanced(before: &Counts, now: &Counts) -> bool {
    now.iter()
        .any(|(op, &count)| count > before.get(op).copied().unwrap_or(0))
}

/// "AllReduce 6649 vs 6650": the first operation where `counts` lags.
fn lag(counts: &Counts, most: &Counts) -> String {
    most.iter()
        .find_map(|(op, &highest)| {
            let count = counts.get(op).copied().unwrap_or(0);
            (count < highest).then(|| format!("{op} {count} vs {highest}"))
        })
        .unwrap_or_default()
}

fn is_error(code: i64) -> bool {
    code != NCCL_SUCCESS && code != NCCL_IN_PROGRESS
}

fn nccl_error_name(code: i64) -> &'static str {
    match code {
        1 => "unhandled cuda error",
        2 => "system error",
        3 => "internal error",
        4 => "invalid argument",
        5 => "invalid usage",
        6 => "remote process error",
        _ => "unexpected error",
    }
}

fn nccl_error_lane(code: i64) -> Lane {
    match code {
        NCCL_UNHANDLED_CUDA_ERROR => Lane::Host,
        NCCL_SYSTEM_ERROR | NCCL_REMOTE_ERROR => Lane::Network,
        _ => Lane::App,
    }
}

/// "rank 3 (pid 42 on 10.0.0.2)" or "ranks 3, 5 (on 10.0.0.2, 10.0.0.3)".
fn describe(named: &Named) -> String {
    let mut text = rank_list(&named.ranks);
    let mut details = Vec::new();
    if let (1, Some(pid)) = (named.ranks.len(), named.pids.first()) {
        details.push(format!("pid {pid}"));
    }
    if !named.hosts.is_empty() {
        details.push(format!("on {}", named.hosts.join(", ")));
    }
    if !details.is_empty() {
        text.push_str(&format!(" ({})", details.join(" ")));
    }
    text.push_str(if named.ranks.len() == 1 {
        " is"
    } else {
        " are"
    });
    text
}

fn rank_list(ranks: &[u32]) -> String {
    let numbers: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", numbers[0]),
        _ => format!("ranks {}", numbers.join(", ")),
    }
}

fn waiting_note(reporting: &[u32]) -> String {
    if reporting.is_empty() {
        String::new()
    } else {
        format!("; {} wait on it", rank_list(reporting))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ras::status::{RasMissingRank, RasMissingStatus, RasRankStatus};

    fn rank(number: u32, all_reduce: u64) -> RasRank {
        RasRank {
            rank: number,
            host: Some(format!("10.0.0.{number}")),
            pid: Some(1000 + i64::from(number)),
            cuda_dev: Some(0),
            nvml_dev: Some(0),
            status: RasRankStatus::default(),
            collective_counts: [("AllReduce".to_string(), all_reduce)].into(),
        }
    }

    fn status(ranks: Vec<RasRank>, missing: Vec<RasMissingRank>) -> RasStatus {
        RasStatus {
            communicators: vec![RasCommunicator {
                hash: "0xabc".into(),
                size: Some((ranks.len() + missing.len()) as u64),
                ranks,
                missing_ranks: missing,
                ..RasCommunicator::default()
            }],
            ..RasStatus::default()
        }
    }

    fn kinds(findings: &[CommFinding]) -> Vec<CommFindingKind> {
        findings.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn healthy_report_has_no_findings() {
        let report = status(vec![rank(0, 10), rank(1, 10)], vec![]);
        assert!(analyze_status(&report).is_empty());
    }

    #[test]
    fn rank_ahead_that_waits_is_not_stuck() {
        let mut analyzer = RasAnalyzer::new();
        analyzer.observe(&status(vec![rank(0, 12), rank(1, 10), rank(2, 10)], vec![]));
        let findings =
            analyzer.observe(&status(vec![rank(0, 12), rank(1, 11), rank(2, 11)], vec![]));
        // Rank 0 did not move but is ahead: the others are still catching up.
        assert_eq!(kinds(&findings), vec![CommFindingKind::Mismatch]);
        assert_eq!(findings[0].ranks, vec![1, 2]);
        assert!(!findings[0].first_error);
    }

    #[test]
    fn remote_error_next_to_an_unreachable_rank_is_secondary() {
        let mut peer = rank(0, 10);
        peer.status.async_error = NCCL_REMOTE_ERROR;
        let missing = RasMissingRank {
            rank: 1,
            host: Some("10.0.0.1".into()),
            pid: Some(7),
            cuda_dev: None,
            nvml_dev: None,
            status: RasMissingStatus {
                unresponsive: true,
                considered_dead: false,
            },
        };
        let findings = analyze_status(&status(vec![peer], vec![missing]));
        assert_eq!(
            kinds(&findings),
            vec![CommFindingKind::Timeout, CommFindingKind::AsyncError]
        );
        assert!(findings[0].first_error);
        assert_eq!(findings[0].lane, Lane::Network);
        assert!(!findings[1].first_error);
    }

    #[test]
    fn cuda_error_goes_to_the_host_lane() {
        let mut broken = rank(1, 10);
        broken.status.async_error = NCCL_UNHANDLED_CUDA_ERROR;
        let findings = analyze_status(&status(vec![rank(0, 10), broken], vec![]));
        assert_eq!(kinds(&findings), vec![CommFindingKind::AsyncError]);
        assert_eq!(findings[0].lane, Lane::Host);
        assert_eq!(findings[0].ranks, vec![1]);
        assert!(findings[0].first_error);
    }

    #[test]
    fn unlisted_ranks_make_the_communicator_incomplete() {
        let mut report = status(vec![rank(0, 1), rank(1, 1)], vec![]);
        report.communicators[0].size = Some(4);
        let findings = analyze_status(&report);
        assert_eq!(kinds(&findings), vec![CommFindingKind::Incomplete]);
        assert_eq!(findings[0].ranks, vec![2, 3]);
    }

    #[test]
    fn collection_timeouts_without_a_culprit_are_reported_job_wide() {
        let mut report = status(vec![rank(0, 1), rank(1, 1)], vec![]);
        report.ras = Some(crate::ras::RasCollection {
            collection_time_sec: Some(5.0),
            timeouts_count: 2,
        });
        let findings = analyze_status(&report);
        assert_eq!(kinds(&findings), vec![CommFindingKind::CollectionTimeout]);
        assert_eq!(findings[0].communicator, None);
    }
}
