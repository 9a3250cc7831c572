//! Each GPU's record (`gpuvet.history`): the rows of `gpu_results`, one per GPU, check
//! and attempt, written with its report and read back as the last results of a GPU
//! that were `ok` (`gpuvet_model::history::GpuRecord`).
//!
//! Written in the report's transaction, so a record never holds a result whose report
//! was not kept; a result that another report of the same attempt already gave (the
//! node's own and its group coordinator's) is kept once.

use std::collections::BTreeMap;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::Attempt;
use gpuvet_model::fleet::FleetBaseline;
use gpuvet_model::history::{GpuRecord, RecordKey, device_of, gpu_key, has_records, work_of};
use gpuvet_model::results::{RunReport, Verdict};

use crate::db::{Db, Value};
use crate::error::During;
use crate::value::params;
use crate::{Store, StoreError};

/// The values of one row of `gpu_results`.
const GPU_RESULT_COLUMNS: usize = 10;
/// Rows one `INSERT` adds: within SQLite's oldest limit of 999 parameters.
const GPU_RESULTS_PER_INSERT: usize = 64;

/// Stores a report's GPU results inside the caller's write.
pub(crate) fn store_gpu_results(
    db: &Db,
    run_id: i64,
    attempt: &Attempt,
    report: &RunReport,
    action: &'static str,
) -> Result<(), StoreError> {
    let values: Vec<Value> = report
        .checks
        .iter()
        .filter(|check| has_records(check.name))
        .flat_map(|check| {
            let work = work_of(check);
            check.entities.iter().filter_map(move |result| {
                let key = gpu_key(report, &result.entity)?;
                let model = device_name(report, &result.entity);
                Some(params![
                    run_id,
                    key,
                    check.name.as_str(),
                    work.as_str(),
                    &attempt.job_id,
                    attempt.attempt,
                    result.verdict.as_str(),
                    result.measurement.value.filter(|v| v.is_finite()),
                    model,
                    report.started_at_ms,
                ])
            })
        })
        .flatten()
        .collect();
    for rows in values.chunks(GPU_RESULT_COLUMNS * GPU_RESULTS_PER_INSERT) {
        let placeholders = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; rows.len() / GPU_RESULT_COLUMNS];
        db.execute(
            &format!(
                "INSERT INTO gpu_results (run_id, gpu, check_name, work, job_id, attempt,
                                          verdict, value, model, measured_at_ms)
                 VALUES {}
                 ON CONFLICT DO NOTHING",
                placeholders.join(", ")
            ),
            rows,
        )
        .during(action)?;
    }
    Ok(())
}

/// The model name of a GPU the report's device list has.
fn device_name(report: &RunReport, entity: &gpuvet_model::results::Entity) -> Option<String> {
    match entity {
        gpuvet_model::results::Entity::Device { node, index } => {
            device_of(report, node, *index).map(|d| d.name.clone())
        }
        _ => None,
    }
}

impl Store {
    /// The record of each wanted GPU, check and workload: the values of its last
    /// `runs` results that were `ok`, newest first, and when its present run of
    /// `degraded` results began. One with no `ok` result is left out.
    pub fn gpu_records(
        &self,
        wanted: &[RecordKey],
        runs: usize,
    ) -> Result<BTreeMap<RecordKey, GpuRecord>, StoreError> {
        const ACTION: &str = "read the GPUs' records from the store";
        let mut records = BTreeMap::new();
        for key in wanted {
            if records.contains_key(key) {
                continue;
            }
            let RecordKey { gpu, check, work } = key;
            let rows = self
                .db
                .query(
                    "SELECT value, measured_at_ms FROM gpu_results
                     WHERE gpu = ? AND check_name = ? AND work = ? AND verdict = ?
                       AND value IS NOT NULL
                     ORDER BY measured_at_ms DESC, id DESC
                     LIMIT ?",
                    &params![gpu, check.as_str(), work, Verdict::Ok.as_str(), runs],
                )
                .during(ACTION)?;
            let mut values = Vec::with_capacity(rows.len());
            let mut first_at_ms = 0u64;
            for mut row in rows {
                values.push(row.get::<f64>(0).during(ACTION)?);
                first_at_ms = row.get::<u64>(1).during(ACTION)?;
            }
            if values.is_empty() {
                continue;
            }
            // The degraded results after the last result that was not degraded.
            let degraded_since_ms: Option<u64> = self
                .db
                .query_one(
                    "SELECT MIN(measured_at_ms) FROM gpu_results
                     WHERE gpu = ?1 AND check_name = ?2 AND work = ?4 AND verdict = ?3
                       AND measured_at_ms > (SELECT COALESCE(MAX(measured_at_ms), -1)
                                             FROM gpu_results
                                             WHERE gpu = ?1 AND check_name = ?2
                                               AND work = ?4 AND verdict <> ?3)",
                    &params![gpu, check.as_str(), Verdict::Degraded.as_str(), work],
                )
                .and_then(|mut row| row.get(0))
                .during(ACTION)?;
            records.insert(
                key.clone(),
                GpuRecord {
                    values,
                    first_at_ms,
                    degraded_since_ms,
                },
            );
        }
        Ok(records)
    }

    /// The records of these GPUs for every check and workload the store has results
    /// of, as [`Store::gpu_records`] reads them: a node's own GPUs, read before its
    /// checks run and so before it knows which workloads they will run.
    pub fn gpu_records_of(
        &self,
        gpus: &[String],
        runs: usize,
    ) -> Result<BTreeMap<RecordKey, GpuRecord>, StoreError> {
        const ACTION: &str = "read the GPUs' records from the store";
        let mut wanted = Vec::new();
        for gpu in gpus {
            let rows = self
                .db
                .query(
                    "SELECT DISTINCT check_name, work FROM gpu_results WHERE gpu = ?
                     ORDER BY check_name, work",
                    &params![gpu],
                )
                .during(ACTION)?;
            for mut row in rows {
                let check: String = row.get(0).during(ACTION)?;
                let work: String = row.get(1).during(ACTION)?;
                // A check this gpuvet does not know (a newer node's) has no record here.
                if let Ok(check) = check.parse::<CheckName>() {
                    wanted.push(RecordKey {
                        gpu: gpu.clone(),
                        check,
                        work,
                    });
                }
            }
        }
        self.gpu_records(&wanted, runs)
    }

    /// The fleet's baseline of every GPU model, check and workload with enough `ok`
    /// results (`gpuvet_model::fleet`), each learned from its newest `newest` results,
    /// by model, then check and workload. Only results whose node named its GPUs'
    /// model count.
    pub fn fleet_baselines(&self, newest: usize) -> Result<Vec<FleetBaseline>, StoreError> {
        const ACTION: &str = "read the fleet's results from the store";
        let rows = self
            .db
            .query(
                "SELECT model, check_name, work, value FROM (
                     SELECT model, check_name, work, value,
                            ROW_NUMBER() OVER (PARTITION BY model, check_name, work
                                               ORDER BY measured_at_ms DESC, id DESC) AS newness
                     FROM gpu_results
                     WHERE verdict = ? AND model IS NOT NULL AND value IS NOT NULL
                 ) newest
                 WHERE newness <= ?
                 ORDER BY model, check_name, work",
                &params![Verdict::Ok.as_str(), newest],
            )
            .during(ACTION)?;
        let mut values: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
        for mut row in rows {
            let model: String = row.get(0).during(ACTION)?;
            let check: String = row.get(1).during(ACTION)?;
            let work: String = row.get(2).during(ACTION)?;
            values
                .entry((model, check, work))
                .or_default()
                .push(row.get::<f64>(3).during(ACTION)?);
        }
        Ok(values
            .into_iter()
            // A check this gpuvet does not know (a newer node's) has no baseline here.
            .filter_map(|((model, check, work), values)| {
                let learned = FleetBaseline::learn(&model, check.parse().ok()?, &values)?;
                Some(FleetBaseline { work, ..learned })
            })
            .collect())
    }
}
