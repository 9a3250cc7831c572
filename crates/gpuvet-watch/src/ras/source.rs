//! NCCL RAS as a health source of the watcher: poll `STATUS` every few polls, analyze
//! it against the previous poll, and hand each communication finding to the policy,
//! which keeps one event per (condition, boot) however often RAS repeats it.

use super::{CommFinding, CommFindingKind, RasAnalyzer, RasClient, RasError};
use crate::finding::{CheckFamily, RuntimeCheck, RuntimeFinding, Severity};
use crate::health::{HealthError, HealthReading, HealthSource};
use crate::xid::ActionClass;

/// Polls NCCL RAS. Run it behind a [`crate::health::Watchdog`]: a query can take up to
/// the client's deadline.
#[derive(Debug)]
pub struct RasSource {
    client: RasClient,
    analyzer: RasAnalyzer,
    /// Query on every `every`-th poll (RAS collects from every process of the job).
    every: u64,
    polls: u64,
}

impl RasSource {
    pub fn new(client: RasClient, every: u64) -> Self {
        RasSource {
            client,
            analyzer: RasAnalyzer::new(),
            every: every.max(1),
            polls: 0,
        }
    }
}

impl HealthSource for RasSource {
    fn name(&self) -> &str {
        "nccl_ras"
    }

    fn poll(&mut self, now_ms: u64) -> Result<Vec<HealthReading>, HealthError> {
        self.polls += 1;
        if !(self.polls - 1).is_multiple_of(self.every) {
            return Ok(Vec::new());
        }
        match self.client.status() {
            Ok(status) => Ok(self
                .analyzer
                .observe(&status)
                .iter()
                .map(|finding| HealthReading::Finding(comm_to_runtime(finding, now_ms)))
                .collect()),
            // No NCCL process with RAS listens here (yet, or any more): nothing to watch,
            // and no reason to warn every poll. Counts restart with the next job.
            Err(RasError::Connect { .. }) => {
                self.analyzer.reset();
                Ok(Vec::new())
            }
            Err(err) => Err(HealthError::Probe {
                source_name: "nccl_ras".to_owned(),
                message: err.to_string(),
            }),
        }
    }
}

/// A communication finding as a runtime finding. The condition name carries the
/// communicator and ranks, so a new culprit is a new event and a repeat is not.
pub fn comm_to_runtime(finding: &CommFinding, now_ms: u64) -> RuntimeFinding {
    let kind = serde_json::to_value(finding.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", finding.kind));
    let ranks: Vec<String> = finding.ranks.iter().map(u32::to_string).collect();
    let check = RuntimeCheck::new(
        CheckFamily::Nccl,
        &format!(
            "{kind}.{}.ranks{}",
            finding.communicator.as_deref().unwrap_or("job"),
            ranks.join("_")
        ),
    );
    // A rank that is gone or stopped the job needs the job restarted; a mismatch seen
    // mid-collective is normal and only recorded.
    let (action, severity) = match (finding.kind, finding.first_error) {
        (CommFindingKind::Mismatch, _) | (_, false) => (ActionClass::RecordOnly, Severity::Warn),
        (_, true) => (ActionClass::RestartApp, Severity::Fail),
    };
    let message = if finding.hosts.is_empty() {
        finding.message.clone()
    } else {
        format!("{} (hosts: {})", finding.message, finding.hosts.join(", "))
    };
    RuntimeFinding::condition(
        "nccl_ras",
        check,
        None,
        finding.lane,
        action,
        now_ms,
        message,
    )
    .with_severity(severity)
}

#[cfg(test)]
mod tests {
    use gpuvet_model::results::Lane;

    use super::*;

    fn finding(kind: CommFindingKind, first_error: bool) -> CommFinding {
        CommFinding {
            communicator: Some("0xabc".into()),
            kind,
            ranks: vec![3],
            hosts: vec!["10.0.0.4".into()],
            pids: vec![42],
            waiting_ranks: vec![0, 1, 2],
            lane: Lane::Network,
            first_error,
            message: "rank 3 is dead".into(),
        }
    }

    #[test]
    fn a_dead_first_error_fails_and_names_its_condition() {
        let runtime = comm_to_runtime(&finding(CommFindingKind::Dead, true), 7);
        assert_eq!(runtime.check, "nccl.dead.0xabc.ranks3");
        assert_eq!(runtime.severity, Severity::Fail);
        assert_eq!(runtime.action, ActionClass::RestartApp);
        assert_eq!(runtime.lane, Lane::Network);
        assert_eq!(runtime.message, "rank 3 is dead (hosts: 10.0.0.4)");
        assert_eq!(runtime.first_ms, 7);
    }

    #[test]
    fn mismatches_and_consequences_are_only_recorded() {
        let mismatch = comm_to_runtime(&finding(CommFindingKind::Mismatch, true), 0);
        assert_eq!(
            (mismatch.action, mismatch.severity),
            (ActionClass::RecordOnly, Severity::Warn)
        );
        let secondary = comm_to_runtime(&finding(CommFindingKind::Timeout, false), 0);
        assert_eq!(secondary.severity, Severity::Warn);
    }

    #[test]
    fn nothing_listening_is_quiet_not_an_error() {
        // A port nothing listens on: bind one, learn its number, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = RasClient::new(format!("127.0.0.1:{port}"));
        let mut source = RasSource::new(client, 1);
        assert!(source.poll(0).unwrap().is_empty());
    }
}
