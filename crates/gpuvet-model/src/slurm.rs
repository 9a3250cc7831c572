//! Slurm's names for where a run happens: the job, the step and the node, read from the
//! environment `srun` and `sbatch` set, for the attempt's identity (the job id, the
//! requeue count as the attempt) and for the reports and events that carry them.

use serde::{Deserialize, Serialize};

/// The variables read here.
pub mod env {
    pub const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
    pub const SLURM_STEP_ID: &str = "SLURM_STEP_ID";
    pub const SLURMD_NODENAME: &str = "SLURMD_NODENAME";
    pub const SLURM_RESTART_COUNT: &str = "SLURM_RESTART_COUNT";
}

/// A run's place in Slurm: set when `SLURM_JOB_ID` is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlurmNames {
    /// `SLURM_JOB_ID`.
    pub job_id: String,
    /// `SLURM_STEP_ID`: set under `srun`, not in the batch script itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// `SLURMD_NODENAME`: the node's name as Slurm knows it (its `NodeName`), which
    /// `scontrol` takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `SLURM_RESTART_COUNT`: how many times the job was requeued (0 when unset).
    #[serde(default)]
    pub restart_count: u32,
}

impl SlurmNames {
    /// Slurm's names from an environment (`lookup` returns a variable's value); `None`
    /// outside a Slurm job. Empty values count as unset; a restart count that is not a
    /// number counts as 0, since Slurm writes it and nothing of the run depends on more.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Option<SlurmNames> {
        let get = |name: &str| {
            lookup(name)
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        Some(SlurmNames {
            job_id: get(env::SLURM_JOB_ID)?,
            step_id: get(env::SLURM_STEP_ID),
            node: get(env::SLURMD_NODENAME),
            restart_count: get(env::SLURM_RESTART_COUNT)
                .and_then(|count| count.parse().ok())
                .unwrap_or(0),
        })
    }

    /// The names an event carries under `slurm` in its details; `None` when it carries
    /// none, or none that read as names.
    pub fn from_details(details: &serde_json::Value) -> Option<SlurmNames> {
        serde_json::from_value(details.get("slurm")?.clone()).ok()
    }

    /// The attempt this run is at least: the first run of the job is attempt 1, its
    /// first requeue attempt 2, whichever nodes it lands on.
    pub fn first_attempt(&self) -> u32 {
        self.restart_count.saturating_add(1)
    }

    /// `job 4242 step 0 on gpu-01`, for lines people read.
    pub fn describe(&self) -> String {
        let mut text = format!("slurm job {}", self.job_id);
        if let Some(step) = &self.step_id {
            text.push_str(&format!(" step {step}"));
        }
        if let Some(node) = &self.node {
            text.push_str(&format!(" on {node}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn names(pairs: &[(&str, &str)]) -> Option<SlurmNames> {
        let vars: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        SlurmNames::from_env(|name| vars.get(name).map(|v| (*v).to_owned()))
    }

    #[test]
    fn a_job_is_named_by_its_id_step_node_and_restarts() {
        let got = names(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
            ("SLURMD_NODENAME", "gpu-01"),
            ("SLURM_RESTART_COUNT", "2"),
        ])
        .unwrap();
        assert_eq!(got.job_id, "4242");
        assert_eq!(got.first_attempt(), 3);
        assert_eq!(got.describe(), "slurm job 4242 step 0 on gpu-01");
        let json = serde_json::to_value(&got).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"job_id": "4242", "step_id": "0", "node": "gpu-01", "restart_count": 2})
        );
        assert_eq!(
            serde_json::from_value::<SlurmNames>(json.clone()).unwrap(),
            got
        );
        let details = serde_json::json!({ "exit_code": 0, "slurm": json });
        assert_eq!(SlurmNames::from_details(&details), Some(got));
        assert_eq!(SlurmNames::from_details(&serde_json::json!({})), None);
        assert_eq!(
            SlurmNames::from_details(&serde_json::json!({"slurm": 7})),
            None
        );
    }

    #[test]
    fn outside_a_job_there_are_none_and_a_batch_script_has_no_step() {
        assert_eq!(names(&[("SLURM_STEP_ID", "0")]), None);
        assert_eq!(names(&[("SLURM_JOB_ID", " ")]), None);
        let batch = names(&[("SLURM_JOB_ID", "7"), ("SLURM_RESTART_COUNT", "x")]).unwrap();
        assert_eq!((&batch.step_id, &batch.node), (&None, &None));
        assert_eq!(batch.restart_count, 0);
        assert_eq!(batch.first_attempt(), 1);
    }
}
