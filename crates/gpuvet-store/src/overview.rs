//! Reads for lists and pages: the jobs the store knows, each job's instances with
//! their latest run, runs without their reports, and one run's report.
//!
//! Built from the columns, never by decoding every report: a list of 1,024 instances
//! reads 1,024 small rows.

use gpuvet_model::events::Attempt;
use gpuvet_model::overview::{InstanceSummary, JobSummary, RunSummary, StoredRun};
use gpuvet_model::results::{CheckStatus, Outcome, RunReport};
use serde::{Deserialize, Serialize};

use crate::db::{DbError, Row};
use crate::error::During;
use crate::value::params;
use crate::{Query, Store, StoreError, decode};

/// Which runs to read. Every field that is set must match; `limit` keeps the newest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunFilter {
    pub job_id: Option<String>,
    pub attempt: Option<u32>,
    pub node: Option<String>,
    pub outcome: Option<Outcome>,
    pub limit: Option<usize>,
}

/// The latest attempt of each node (of one job, or of every job), each with its latest
/// run's outcome. Its columns: attempt id, job, node, attempt, instance, start, outcome.
const LATEST_ATTEMPTS: &str = "
    SELECT a.id, a.job_id, a.node, a.attempt, a.instance, a.started_at_ms,
           (SELECT r.outcome FROM runs r WHERE r.attempt_id = a.id ORDER BY r.id DESC LIMIT 1)
               AS outcome
    FROM attempts a
    WHERE a.attempt = (SELECT MAX(b.attempt) FROM attempts b
                       WHERE b.job_id = a.job_id AND b.node = a.node)";

/// A run's summary columns, from `runs r`; the three counts come from its check rows.
/// (The sum is cast: PostgreSQL's `SUM` of a `BIGINT` is a `NUMERIC`.)
fn run_columns() -> String {
    let failing: Vec<String> = CheckStatus::ALL
        .into_iter()
        .filter(|s| s.is_failure())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!(
        "r.id, r.report_id, r.outcome, r.backend, r.started_at_ms, r.duration_secs,
         (SELECT COUNT(*) FROM check_results c WHERE c.run_id = r.id),
         (SELECT COUNT(*) FROM check_results c WHERE c.run_id = r.id AND c.status IN ({})),
         (SELECT CAST(COALESCE(SUM(c.findings), 0) AS BIGINT)
          FROM check_results c WHERE c.run_id = r.id),
         {}",
        failing.join(", "),
        node_failed("r")
    )
}

/// Whether the run `runs {alias}` failed because of its node: its `node_failed`, or,
/// in a run stored before that column, its outcome.
pub(crate) fn node_failed(alias: &str) -> String {
    format!(
        "COALESCE({alias}.node_failed, CASE WHEN {alias}.outcome = '{}' THEN 1 ELSE 0 END)",
        Outcome::Failed.as_str()
    )
}

/// Reads the columns of [`run_columns`] starting at `first`; `None` when the run's id is
/// NULL (an attempt without a run, from a left join).
fn run_summary(row: &mut Row, first: usize) -> Result<Option<RawRun>, DbError> {
    let Some(run_id) = row.get::<Option<i64>>(first)? else {
        return Ok(None);
    };
    Ok(Some(RawRun {
        run_id,
        report_id: row.get::<Option<String>>(first + 1)?.unwrap_or_default(),
        outcome: row.get(first + 2)?,
        backend: row.get(first + 3)?,
        started_at_ms: row.get(first + 4)?,
        duration_secs: row.get(first + 5)?,
        checks: row.get(first + 6)?,
        failed_checks: row.get(first + 7)?,
        findings: row.get(first + 8)?,
        node_failed: row.get::<i64>(first + 9)? != 0,
    }))
}

/// A run's summary before its outcome is parsed.
struct RawRun {
    run_id: i64,
    report_id: String,
    outcome: String,
    backend: String,
    started_at_ms: u64,
    duration_secs: Option<f64>,
    checks: u32,
    failed_checks: u32,
    findings: u32,
    node_failed: bool,
}

impl RawRun {
    fn decode(self) -> Result<RunSummary, StoreError> {
        let outcome = self.outcome.parse().map_err(|message| StoreError::Decode {
            table: "runs",
            id: self.run_id,
            message,
        })?;
        Ok(RunSummary {
            run_id: self.run_id,
            report_id: self.report_id,
            outcome,
            backend: self.backend,
            started_at_ms: self.started_at_ms,
            duration_secs: self.duration_secs,
            checks: self.checks,
            failed_checks: self.failed_checks,
            findings: self.findings,
            node_failed: self.node_failed,
        })
    }
}

fn attempt_columns(row: &mut Row, first: usize) -> Result<Attempt, DbError> {
    Ok(Attempt {
        job_id: row.get(first)?,
        attempt: row.get(first + 1)?,
        node: row.get(first + 2)?,
        instance: row.get(first + 3)?,
    })
}

impl Store {
    /// Every job, the most recently started first. Its counts cover each node's latest
    /// attempt.
    pub fn jobs(&self) -> Result<Vec<JobSummary>, StoreError> {
        self.job_summaries(None)
    }

    /// One job; `None` when the store has never seen it.
    pub fn job(&self, job_id: &str) -> Result<Option<JobSummary>, StoreError> {
        Ok(self.job_summaries(Some(job_id))?.into_iter().next())
    }

    fn job_summaries(&self, job_id: Option<&str>) -> Result<Vec<JobSummary>, StoreError> {
        let count = |outcome: &str| {
            format!("CAST(SUM(CASE WHEN outcome = '{outcome}' THEN 1 ELSE 0 END) AS BIGINT)")
        };
        let mut query = Query::new(&format!(
            "SELECT job_id, MAX(attempt), COUNT(*), {}, {}, {},
                    CAST(SUM(CASE WHEN outcome IS NULL THEN 1 ELSE 0 END) AS BIGINT),
                    MIN(started_at_ms), MAX(started_at_ms)
             FROM ({LATEST_ATTEMPTS}) latest",
            count(Outcome::Passed.as_str()),
            count(Outcome::Failed.as_str()),
            count(Outcome::Incomplete.as_str()),
        ));
        query.filter("job_id", job_id);
        query
            .sql
            .push_str(" GROUP BY job_id ORDER BY MAX(started_at_ms) DESC, job_id");
        query
            .rows(&self.db, |row| {
                Ok(JobSummary {
                    job_id: row.get(0)?,
                    latest_attempt: row.get(1)?,
                    nodes: row.get(2)?,
                    passed: row.get(3)?,
                    failed: row.get(4)?,
                    incomplete: row.get(5)?,
                    running: row.get(6)?,
                    started_at_ms: row.get(7)?,
                })
            })
            .during("read jobs from the store")
    }

    /// The instances of `job_id`, by node name: each node's latest attempt, or attempt
    /// `attempt` of every node that made it, with the attempt's latest run.
    pub fn instances(
        &self,
        job_id: &str,
        attempt: Option<u32>,
    ) -> Result<Vec<InstanceSummary>, StoreError> {
        self.instance_summaries(job_id, None, attempt)
    }

    /// One node's instance of `job_id` (its latest attempt, or `attempt`); `None` when
    /// the store has no such attempt.
    pub fn instance(
        &self,
        job_id: &str,
        node: &str,
        attempt: Option<u32>,
    ) -> Result<Option<InstanceSummary>, StoreError> {
        Ok(self
            .instance_summaries(job_id, Some(node), attempt)?
            .into_iter()
            .next())
    }

    fn instance_summaries(
        &self,
        job_id: &str,
        node: Option<&str>,
        attempt: Option<u32>,
    ) -> Result<Vec<InstanceSummary>, StoreError> {
        let mut query = Query::new(&format!(
            "SELECT a.job_id, a.attempt, a.node, a.instance, a.started_at_ms, {}
             FROM attempts a
             LEFT JOIN runs r ON r.id = (SELECT MAX(id) FROM runs WHERE attempt_id = a.id)",
            run_columns()
        ));
        query.filter("a.job_id", Some(job_id));
        query.filter("a.node", node);
        match attempt {
            Some(attempt) => query.filter("a.attempt", Some(attempt)),
            None => query.sql.push_str(
                " AND a.attempt = (SELECT MAX(b.attempt) FROM attempts b
                                   WHERE b.job_id = a.job_id AND b.node = a.node)",
            ),
        }
        query.sql.push_str(" ORDER BY a.node");
        let rows = query
            .rows(&self.db, |row| {
                Ok((
                    attempt_columns(row, 0)?,
                    row.get::<u64>(4)?,
                    run_summary(row, 5)?,
                ))
            })
            .during("read instances from the store")?;
        rows.into_iter()
            .map(|(attempt, attempt_started_at_ms, run)| {
                Ok(InstanceSummary {
                    attempt,
                    attempt_started_at_ms,
                    latest_run: run.map(RawRun::decode).transpose()?,
                })
            })
            .collect()
    }

    /// The runs that match `filter`, the newest first.
    pub fn runs(&self, filter: &RunFilter) -> Result<Vec<StoredRun>, StoreError> {
        let mut query = Query::new(&format!(
            "SELECT a.job_id, a.attempt, a.node, a.instance, {}
             FROM runs r JOIN attempts a ON a.id = r.attempt_id",
            run_columns()
        ));
        query.filter("a.job_id", filter.job_id.as_deref());
        query.filter("a.attempt", filter.attempt);
        query.filter("a.node", filter.node.as_deref());
        query.filter("r.outcome", filter.outcome.map(|o| o.as_str()));
        query
            .sql
            .push_str(" ORDER BY r.started_at_ms DESC, r.id DESC LIMIT ?");
        query.args.push(self.db.limit(filter.limit));
        let rows = query
            .rows(&self.db, |row| {
                Ok((attempt_columns(row, 0)?, run_summary(row, 4)?))
            })
            .during("read runs from the store")?;
        rows.into_iter()
            .filter_map(|(attempt, run)| run.map(|run| (attempt, run)))
            .map(|(attempt, run)| {
                Ok(StoredRun {
                    attempt,
                    run: run.decode()?,
                })
            })
            .collect()
    }

    /// One run's attempt and full report; `None` when there is no run `run_id`.
    pub fn run(&self, run_id: i64) -> Result<Option<(Attempt, RunReport)>, StoreError> {
        let row = self
            .db
            .query_opt(
                "SELECT a.job_id, a.attempt, a.node, a.instance, r.report_json
                 FROM runs r JOIN attempts a ON a.id = r.attempt_id WHERE r.id = ?1",
                &params![run_id],
            )
            .and_then(|row| {
                row.map(|mut row| Ok((attempt_columns(&mut row, 0)?, row.get::<String>(4)?)))
                    .transpose()
            })
            .during("read a run from the store")?;
        row.map(|(attempt, json)| Ok((attempt, decode("runs", run_id, &json)?)))
            .transpose()
    }
}
