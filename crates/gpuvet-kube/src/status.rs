//! The sanity verdict on the pod: the condition `GpuvetSanity` (list it in the pod's
//! `readinessGates` and the pod is Ready only once gpuvet says so) and annotations
//! holding the latest verdict, both as pure patch bodies.

use gpuvet_model::events::EventKind;
use gpuvet_model::results::Lane;
use serde_json::json;

use crate::event::REPORT_ANNOTATION;
use crate::time::rfc3339;

/// The pod condition's type, for `readinessGates: [{conditionType: GpuvetSanity}]`.
pub const CONDITION_TYPE: &str = "GpuvetSanity";
/// `passed`, `incomplete` or `failed`.
pub const VERDICT_ANNOTATION: &str = "gpuvet.io/verdict";
/// The one-line summary of the run.
pub const SUMMARY_ANNOTATION: &str = "gpuvet.io/summary";
/// The lane of the first problem; absent when there was none.
pub const LANE_ANNOTATION: &str = "gpuvet.io/verdict-lane";
/// `JOB#ATTEMPT`.
pub const ATTEMPT_ANNOTATION: &str = "gpuvet.io/attempt";
/// When the verdict was reached (RFC 3339).
pub const CHECKED_AT_ANNOTATION: &str = "gpuvet.io/checked-at";

/// One sanity verdict, as the pod shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the pod may serve: the checks passed, or failed under `retain`.
    pub ready: bool,
    /// `SanityCheckSucceeded` or `SanityCheckFailed`: the condition's reason.
    pub kind: EventKind,
    /// `passed`, `incomplete` or `failed`.
    pub outcome: String,
    pub summary: String,
    pub lane: Option<Lane>,
    pub job_id: String,
    pub attempt: u32,
    pub report_url: Option<String>,
}

/// The strategic-merge patch of `pods/status` that sets the condition (conditions merge
/// by `type`, so the pod's other conditions stay).
pub fn condition_patch(verdict: &Verdict, now_ms: u64) -> serde_json::Value {
    json!({
        "status": {
            "conditions": [{
                "type": CONDITION_TYPE,
                "status": if verdict.ready { "True" } else { "False" },
                "reason": verdict.kind.as_str(),
                "message": verdict.summary,
                "lastTransitionTime": rfc3339(now_ms),
            }]
        }
    })
}

/// The merge patch of the pod's annotations; a lane or report link the last verdict
/// had and this one has not is removed (`null`).
pub fn annotations_patch(verdict: &Verdict, now_ms: u64) -> serde_json::Value {
    json!({
        "metadata": {
            "annotations": {
                VERDICT_ANNOTATION: verdict.outcome,
                SUMMARY_ANNOTATION: verdict.summary,
                LANE_ANNOTATION: verdict.lane.map(Lane::as_str),
                ATTEMPT_ANNOTATION: format!("{}#{}", verdict.job_id, verdict.attempt),
                CHECKED_AT_ANNOTATION: rfc3339(now_ms),
                REPORT_ANNOTATION: verdict.report_url,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(ready: bool) -> Verdict {
        Verdict {
            ready,
            kind: EventKind::SanityCheckFailed,
            outcome: "failed".into(),
            summary: "1 passed, 1 failed".into(),
            lane: Some(Lane::Network),
            job_id: "job".into(),
            attempt: 3,
            report_url: None,
        }
    }

    #[test]
    fn the_condition_says_whether_the_pod_may_serve() {
        let patch = condition_patch(&verdict(false), 0);
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(condition["type"], "GpuvetSanity");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "SanityCheckFailed");
        assert_eq!(condition["lastTransitionTime"], "1970-01-01T00:00:00Z");
        // Failed under `retain`: the pod serves anyway, and the reason says why.
        let patch = condition_patch(&verdict(true), 0);
        assert_eq!(patch["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn annotations_clear_what_the_verdict_lacks() {
        let patch = annotations_patch(&verdict(false), 0);
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations["gpuvet.io/verdict"], "failed");
        assert_eq!(annotations["gpuvet.io/verdict-lane"], "network");
        assert_eq!(annotations["gpuvet.io/attempt"], "job#3");
        assert!(annotations["gpuvet.io/report"].is_null());
        let passed = Verdict {
            lane: None,
            ..verdict(true)
        };
        assert!(
            annotations_patch(&passed, 0)["metadata"]["annotations"]["gpuvet.io/verdict-lane"]
                .is_null()
        );
    }
}
