//! Reads of one node across jobs: the nodes ranked by their failed runs in a window,
//! and one node's history (every run, each check's figures over time, findings,
//! quarantines and their lifting), with its repeat-offender flag.
//!
//! A node fails every few days and the store holds every attempt; these reads put the
//! attempts side by side. Figures come from the check rows' columns (the median, the
//! status); only a check that named something is decoded, for its findings.

use std::collections::BTreeMap;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Event, EventKind};
use gpuvet_model::node_history::{CheckPoint, CheckSeries, NodeFailures, NodeFinding, NodeHistory};
use gpuvet_model::offenders::{RepeatOffender, RepeatOffenderPolicy, repeat_offender};
use gpuvet_model::results::{CheckResult, CheckStatus, Entity, Outcome};

use crate::error::During;
use crate::value::params;
use crate::{EventFilter, Query, RunFilter, Store, StoreError, decode};

/// The most rebuild events read to find a node's quarantines: they are few, and each
/// names the nodes it tainted in its details.
const REBUILDS_READ: usize = 1_000;

impl Store {
    /// The nodes with a run that started at or after `since_ms`, the most failed runs
    /// first (then the latest failure, then the name), at most `limit`, each with its
    /// repeat-offender flag under `policy`.
    pub fn nodes_by_failures(
        &self,
        since_ms: u64,
        policy: &RepeatOffenderPolicy,
        limit: usize,
    ) -> Result<Vec<NodeFailures>, StoreError> {
        const ACTION: &str = "rank the nodes by failures";
        let count = |outcome: Outcome| {
            format!(
                "CAST(SUM(CASE WHEN r.outcome = '{}' THEN 1 ELSE 0 END) AS BIGINT)",
                outcome.as_str()
            )
        };
        // Its failures are the runs that failed because of it; a group's other
        // failed runs are counted apart.
        let own = crate::overview::node_failed("r");
        let failed = format!("CAST(SUM({own}) AS BIGINT)");
        let by_others = format!(
            "CAST(SUM(CASE WHEN r.outcome = '{}' AND {own} = 0 THEN 1 ELSE 0 END) AS BIGINT)",
            Outcome::Failed.as_str()
        );
        let (passed, incomplete) = (count(Outcome::Passed), count(Outcome::Incomplete));
        let sql = format!(
            "SELECT a.node, COUNT(*), {failed}, {passed}, {incomplete}, {by_others},
                    MAX(r.started_at_ms),
                    MAX(CASE WHEN {own} = 1 THEN r.started_at_ms END)
             FROM runs r JOIN attempts a ON a.id = r.attempt_id
             WHERE r.started_at_ms >= ?1
             GROUP BY a.node
             ORDER BY {failed} DESC, MAX(CASE WHEN {own} = 1 THEN r.started_at_ms END) DESC,
                      a.node
             LIMIT ?2"
        );
        let since = i64::try_from(since_ms).unwrap_or(i64::MAX);
        let mut nodes = self
            .db
            .query(&sql, &params![since, self.db.limit(Some(limit))])
            .and_then(|rows| {
                rows.into_iter()
                    .map(|mut row| {
                        Ok(NodeFailures {
                            node: row.get(0)?,
                            runs: row.get(1)?,
                            failed: row.get(2)?,
                            passed: row.get(3)?,
                            incomplete: row.get(4)?,
                            failed_by_others: row.get(5)?,
                            last_run_at_ms: row.get(6)?,
                            last_failed_at_ms: row.get(7)?,
                            repeat_offender: None,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .during(ACTION)?;
        for node in &mut nodes {
            node.repeat_offender = self.repeat_offender(&node.node, policy)?;
        }
        Ok(nodes)
    }

    /// Whether `node`'s latest runs make it a repeat offender under `policy`.
    pub fn repeat_offender(
        &self,
        node: &str,
        policy: &RepeatOffenderPolicy,
    ) -> Result<Option<RepeatOffender>, StoreError> {
        let runs = self.runs(&RunFilter {
            node: Some(node.to_owned()),
            limit: Some(policy.of_last as usize),
            ..RunFilter::default()
        })?;
        Ok(repeat_offender(
            runs.iter().map(|r| r.run.node_failed),
            policy,
        ))
    }

    /// `node`'s latest `limit` runs across jobs with their figures, findings and
    /// quarantines; `None` when the store has no run and no quarantine of it.
    pub fn node_history(
        &self,
        node: &str,
        limit: usize,
        policy: &RepeatOffenderPolicy,
    ) -> Result<Option<NodeHistory>, StoreError> {
        const ACTION: &str = "read a node's history from the store";
        let runs = self.runs(&RunFilter {
            node: Some(node.to_owned()),
            limit: Some(limit),
            ..RunFilter::default()
        })?;
        let quarantines = self.quarantines(node)?;
        if runs.is_empty() && quarantines.is_empty() {
            return Ok(None);
        }
        let oldest = runs.last().map_or(0, |r| r.run.started_at_ms);
        let mut query = Query::new(
            "SELECT c.id, r.id, r.started_at_ms, a.job_id, a.attempt, c.check_name, c.status,
                    c.median_value, c.unit, c.findings, c.result_json
             FROM check_results c
             JOIN runs r ON r.id = c.run_id
             JOIN attempts a ON a.id = r.attempt_id",
        );
        query.filter("a.node", Some(node));
        query.condition(
            "r.started_at_ms >= ?",
            Some(crate::db::Value::Int(
                i64::try_from(oldest).unwrap_or(i64::MAX),
            )),
        );
        query
            .sql
            .push_str(" ORDER BY r.started_at_ms, r.id, c.position");
        let rows = query
            .rows(&self.db, |row| {
                let findings: u32 = row.get(9)?;
                Ok(RawCheck {
                    id: row.get(0)?,
                    run_id: row.get(1)?,
                    started_at_ms: row.get(2)?,
                    job_id: row.get(3)?,
                    attempt: row.get(4)?,
                    check: row.get(5)?,
                    status: row.get(6)?,
                    median: row.get(7)?,
                    unit: row.get(8)?,
                    // Decoded only where it named something.
                    json: if findings > 0 {
                        Some(row.get(10)?)
                    } else {
                        None
                    },
                })
            })
            .during(ACTION)?;
        let kept: std::collections::BTreeSet<i64> = runs.iter().map(|r| r.run.run_id).collect();
        let mut series: BTreeMap<CheckName, CheckSeries> = BTreeMap::new();
        let mut findings = Vec::new();
        for raw in rows.into_iter().filter(|raw| kept.contains(&raw.run_id)) {
            let bad = |message: String| StoreError::Decode {
                table: "check_results",
                id: raw.id,
                message,
            };
            let check: CheckName =
                raw.check
                    .parse()
                    .map_err(|e: gpuvet_model::catalog::UnknownCheck| {
                        bad(format!("unknown check `{}`", e.name))
                    })?;
            let status: CheckStatus =
                serde_json::from_value(serde_json::Value::String(raw.status.clone()))
                    .map_err(|e| bad(format!("unknown status `{}`: {e}", raw.status)))?;
            series
                .entry(check)
                .or_insert_with(|| CheckSeries {
                    check,
                    unit: raw.unit.clone(),
                    points: Vec::new(),
                })
                .points
                .push(CheckPoint {
                    run_id: raw.run_id,
                    started_at_ms: raw.started_at_ms,
                    status,
                    median: raw.median.filter(|v| v.is_finite()),
                });
            if let Some(json) = &raw.json {
                let result: CheckResult = decode("check_results", raw.id, json)?;
                // A group's report names its other members too; only this node's.
                for finding in result.findings().filter(|f| names(&f.entity, node)) {
                    findings.push(NodeFinding {
                        run_id: raw.run_id,
                        job_id: raw.job_id.clone(),
                        attempt: raw.attempt,
                        started_at_ms: raw.started_at_ms,
                        check,
                        entity: finding.entity.to_string(),
                        verdict: finding.verdict,
                        reason: finding.reason.clone(),
                    });
                }
            }
        }
        findings.reverse();
        // From its latest `of_last` runs, however many the history holds.
        let repeat_offender = self.repeat_offender(node, policy)?;
        Ok(Some(NodeHistory {
            node: node.to_owned(),
            runs,
            checks: series.into_values().collect(),
            findings,
            quarantines,
            repeat_offender,
        }))
    }

    /// The rebuilds that tainted `node` (from any node's event: the pod that tainted it
    /// may run elsewhere) and the lifting of its quarantines, the newest first.
    fn quarantines(&self, node: &str) -> Result<Vec<Event>, StoreError> {
        let newest = |kind: EventKind, node: Option<&str>| EventFilter {
            kind: Some(kind),
            node: node.map(str::to_owned),
            limit: Some(REBUILDS_READ),
            newest_first: true,
            ..EventFilter::default()
        };
        let mut events: Vec<Event> = self
            .events(&newest(EventKind::InstanceRebuildRequested, None))?
            .into_iter()
            .filter(|event| tainted(event, node))
            .collect();
        events.extend(self.events(&newest(EventKind::NodeUntainted, Some(node)))?);
        events.sort_by_key(|event| std::cmp::Reverse((event.event.time_ms, event.id)));
        Ok(events)
    }
}

/// Whether `entity` is `node`, one of its GPUs, or a link of it.
fn names(entity: &Entity, node: &str) -> bool {
    match entity {
        Entity::Device { node: on, .. } | Entity::Node { node: on } => on == node,
        Entity::NodePair { a, b } => a == node || b == node,
    }
}

/// Whether a rebuild event says it tainted `node` (its Kubernetes details).
fn tainted(event: &Event, node: &str) -> bool {
    event.event.details["kubernetes"]["quarantine"]["tainted"]
        .as_array()
        .is_some_and(|nodes| nodes.iter().any(|n| n.as_str() == Some(node)))
}

/// A check row before its name and status are parsed.
struct RawCheck {
    id: i64,
    run_id: i64,
    started_at_ms: u64,
    job_id: String,
    attempt: u32,
    check: String,
    status: String,
    median: Option<f64>,
    unit: String,
    json: Option<String>,
}
