//! gpuvet's deployment events as events.k8s.io/v1 Events, built as pure values.
//!
//! An Event is named after what it is about, so a repeat finds the one already there:
//! the pod (or node) it regards, the reason, the lane and a key of the caller's (the
//! runtime finding's condition, say). The first time it is created; each repeat adds
//! to its `series` (count and last time seen) and carries the latest note, as the API
//! asks of isomorphic events, instead of a new object.

use std::collections::BTreeMap;

use gpuvet_model::event_fold::RepeatKey;
use gpuvet_model::events::EventKind;
use gpuvet_model::results::Lane;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::PodRef;
use crate::time::{micro_time, rfc3339};

/// `reportingController` of every Event gpuvet writes.
pub const REPORTING_CONTROLLER: &str = "gpuvet.io/gpuvet";
/// Annotation on an Event: its finding's lane (`host`, `network`, `platform`, `app`).
pub const LANE_ANNOTATION: &str = "gpuvet.io/lane";
/// Annotation on an Event (and on the pod): the report's page on `gpuvet serve`.
pub const REPORT_ANNOTATION: &str = "gpuvet.io/report";
/// The API refuses a longer note.
pub const MAX_NOTE_BYTES: usize = 1024;

/// The events that become Kubernetes Events.
pub const PUBLISHED: [EventKind; 4] = [
    EventKind::SanityCheckSucceeded,
    EventKind::SanityCheckFailed,
    EventKind::InstanceRebuildRequested,
    EventKind::RuntimeCheckFailed,
];

/// What an Event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regarding {
    /// The pod gpuvet runs in.
    Pod,
    /// The node it runs on: host-lane findings are the node's, not the pod's.
    Node,
}

/// One event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    pub kind: EventKind,
    pub lane: Option<Lane>,
    pub note: String,
    /// The report's page on a configured `gpuvet serve`.
    pub report_url: Option<String>,
    /// Tells apart events of one kind and lane that are not repeats of each other
    /// (e.g. a runtime finding's condition, `xid.79`); empty for none.
    pub key: String,
}

/// `Normal` for a success, `Warning` for the rest.
pub fn event_type(kind: EventKind) -> &'static str {
    match kind {
        EventKind::SanityCheckSucceeded | EventKind::InstanceStarted | EventKind::JobEnded => {
            "Normal"
        }
        _ => "Warning",
    }
}

/// The Event's `action`: what gpuvet was doing.
pub fn action(kind: EventKind) -> &'static str {
    match kind {
        EventKind::SanityCheckSucceeded | EventKind::SanityCheckFailed => "SanityCheck",
        EventKind::InstanceRebuildRequested => "Rebuild",
        EventKind::NodeUntainted => "Untaint",
        EventKind::RuntimeCheckFailed => "RuntimeCheck",
        EventKind::InstanceStarted
        | EventKind::InstanceStartupFailed
        | EventKind::InstanceExited
        | EventKind::JobEnded => "Supervise",
    }
}

/// The Event's object name: `<pod or node>.<reason>.<hash>`, lowercase, at most 253
/// characters, the same for every repeat of the same event.
pub fn event_name(pod: &PodRef, regarding: Regarding, spec: &EventSpec) -> String {
    let (object, kind) = match regarding {
        Regarding::Pod => (pod.name.as_str(), "pod"),
        Regarding::Node => (pod.node.as_str(), "node"),
    };
    // The rule the stores fold repeats by, too (`gpuvet_model::event_fold`).
    let key = RepeatKey {
        kind: spec.kind,
        lane: spec.lane,
        subject: spec.key.as_str().into(),
    };
    let hash = key.hash(&[kind, object], &pod.name);
    let reason = spec.kind.as_str().to_ascii_lowercase();
    let object: String = object.chars().take(200).collect();
    format!("{object}.{reason}.{hash:016x}")
}

/// The Event to create the first time.
pub fn event_body(pod: &PodRef, regarding: Regarding, spec: &EventSpec, now_ms: u64) -> Event {
    let name = event_name(pod, regarding, spec);
    let mut annotations = BTreeMap::new();
    if let Some(lane) = spec.lane {
        annotations.insert(LANE_ANNOTATION.to_owned(), lane.as_str().to_owned());
    }
    if let Some(url) = &spec.report_url {
        annotations.insert(REPORT_ANNOTATION.to_owned(), url.clone());
    }
    let regarding = match regarding {
        Regarding::Pod => ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: pod.uid.clone(),
            ..ObjectReference::default()
        },
        Regarding::Node => ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(pod.node.clone()),
            ..ObjectReference::default()
        },
    };
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(pod.namespace.clone()),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        event_time: Some(micro_time(now_ms)),
        action: Some(action(spec.kind).to_owned()),
        reason: Some(spec.kind.as_str().to_owned()),
        note: Some(note(spec)),
        regarding: Some(regarding),
        reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(pod.name.chars().take(128).collect()),
        type_: Some(event_type(spec.kind).to_owned()),
        ..Event::default()
    }
}

/// The merge patch that folds a repeat into `existing`: the series' count goes up by
/// one (a series starts at 2, the first repeat), its last time is now, and the note and
/// report link are the latest.
pub fn series_patch(existing: &Event, spec: &EventSpec, now_ms: u64) -> serde_json::Value {
    let count = existing
        .series
        .as_ref()
        .map_or(2, |series| series.count.saturating_add(1));
    let mut patch = json!({
        "series": { "count": count, "lastObservedTime": micro_rfc3339(now_ms) },
        "note": note(spec),
    });
    if let Some(url) = &spec.report_url {
        patch["metadata"] = json!({ "annotations": { REPORT_ANNOTATION: url } });
    }
    patch
}

/// MicroTime as the API writes it: RFC 3339 with microseconds.
fn micro_rfc3339(now_ms: u64) -> String {
    serde_json::to_value(micro_time(now_ms))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| rfc3339(now_ms))
}

/// The note: `[lane] message (report: URL)`, cut to the API's 1 KiB.
pub fn note(spec: &EventSpec) -> String {
    let mut text = match spec.lane {
        Some(lane) => format!("[{lane} lane] {}", spec.note),
        None => spec.note.clone(),
    };
    if let Some(url) = &spec.report_url {
        text.push_str(&format!(" (report: {url})"));
    }
    truncate(text, MAX_NOTE_BYTES)
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::events::v1::EventSeries;

    fn pod() -> PodRef {
        PodRef {
            name: "vllm-0".into(),
            namespace: "inference".into(),
            node: "gpu-7".into(),
            uid: Some("uid-1".into()),
        }
    }

    fn spec(kind: EventKind) -> EventSpec {
        EventSpec {
            kind,
            lane: Some(Lane::Host),
            note: "gemm_flops on gpu-7/dev3: 20% below its peers".into(),
            report_url: Some("http://gpuvet:9470/instances/job/gpu-7".into()),
            key: String::new(),
        }
    }

    #[test]
    fn names_are_stable_and_tell_events_apart() {
        let failed = spec(EventKind::SanityCheckFailed);
        let name = event_name(&pod(), Regarding::Pod, &failed);
        assert!(name.starts_with("vllm-0.sanitycheckfailed."), "{name}");
        assert_eq!(name, event_name(&pod(), Regarding::Pod, &failed));
        assert_ne!(name, event_name(&pod(), Regarding::Node, &failed));
        let other_key = EventSpec {
            key: "xid.79".into(),
            ..failed.clone()
        };
        assert_ne!(name, event_name(&pod(), Regarding::Pod, &other_key));
        let other_lane = EventSpec {
            lane: Some(Lane::Network),
            ..failed.clone()
        };
        assert_ne!(name, event_name(&pod(), Regarding::Pod, &other_lane));
        // A different note is a repeat, not a new event.
        let other_note = EventSpec {
            note: "again".into(),
            ..failed
        };
        assert_eq!(name, event_name(&pod(), Regarding::Pod, &other_note));
        let long = PodRef {
            name: "p".repeat(300),
            ..pod()
        };
        let name = event_name(&long, Regarding::Pod, &spec(EventKind::RuntimeCheckFailed));
        assert!(name.len() <= 253, "{}", name.len());
    }

    #[test]
    fn the_types_and_actions() {
        assert_eq!(event_type(EventKind::SanityCheckSucceeded), "Normal");
        for kind in [
            EventKind::SanityCheckFailed,
            EventKind::InstanceRebuildRequested,
            EventKind::RuntimeCheckFailed,
        ] {
            assert_eq!(event_type(kind), "Warning");
        }
        assert_eq!(action(EventKind::SanityCheckFailed), "SanityCheck");
        assert_eq!(action(EventKind::InstanceRebuildRequested), "Rebuild");
        assert_eq!(action(EventKind::RuntimeCheckFailed), "RuntimeCheck");
    }

    #[test]
    fn the_body_regards_the_node_for_node_events() {
        let body = event_body(
            &pod(),
            Regarding::Node,
            &spec(EventKind::RuntimeCheckFailed),
            0,
        );
        let regarding = body.regarding.unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("Node"));
        assert_eq!(regarding.name.as_deref(), Some("gpu-7"));
        assert_eq!(regarding.namespace, None);
        // The Event itself lives in the pod's namespace, which a Role covers.
        assert_eq!(body.metadata.namespace.as_deref(), Some("inference"));
    }

    #[test]
    fn notes_carry_the_lane_and_link_and_stay_under_the_limit() {
        assert_eq!(
            note(&spec(EventKind::SanityCheckFailed)),
            "[host lane] gemm_flops on gpu-7/dev3: 20% below its peers \
             (report: http://gpuvet:9470/instances/job/gpu-7)"
        );
        let plain = EventSpec {
            lane: None,
            report_url: None,
            note: "all passed".into(),
            ..spec(EventKind::SanityCheckSucceeded)
        };
        assert_eq!(note(&plain), "all passed");
        let long = EventSpec {
            note: "é".repeat(2000),
            ..plain
        };
        let text = note(&long);
        assert!(
            text.len() <= MAX_NOTE_BYTES && text.ends_with('…'),
            "{}",
            text.len()
        );
    }

    #[test]
    fn a_series_starts_at_two_and_counts_up() {
        let spec = spec(EventKind::SanityCheckFailed);
        let mut existing = event_body(&pod(), Regarding::Pod, &spec, 0);
        let patch = series_patch(&existing, &spec, 1_764_673_200_000);
        assert_eq!(patch["series"]["count"], 2);
        assert_eq!(
            patch["series"]["lastObservedTime"],
            "2025-12-02T11:00:00.000000Z"
        );
        existing.series = Some(EventSeries {
            count: 7,
            last_observed_time: micro_time(0),
        });
        assert_eq!(series_patch(&existing, &spec, 0)["series"]["count"], 8);
    }

    /// A failed run's Event says what its verdict block and `explain` say: the binary
    /// publishes the `SanityCheckFailed` event's message, which is the diagnosis's
    /// message, and the note keeps it whole with the lane in front. (The CLI test
    /// `the_verdict_block_explain_and_the_pushed_event_agree` holds that the message,
    /// the verdict block and `explain` come from one diagnosis.)
    #[test]
    fn a_failed_runs_note_is_its_diagnosis() {
        use gpuvet_model::diagnosis::{Diagnosis, team};

        let diagnosis = Diagnosis {
            headline: "gpu-7 is slow".into(),
            why: "slow in 10 of 13 checks, all 8 GPUs and every link".into(),
            lane: Some(Lane::Host),
            team: team(Lane::Host).into(),
            next_step: "check `gpu-7` as a whole: power and thermal limits, clocks \
                        (`nvidia-smi -q -d PERFORMANCE,POWER`), CPU governor, PCIe links; if it \
                        stays slow, drain it"
                .into(),
            others: (0..16).map(|i| format!("gemm_flops: gpu-{i}/dev3 slow: 420 TFLOPS, 40 % below the peer median 700 TFLOPS (threshold 5 %)")).collect(),
        };
        let spec = EventSpec {
            note: diagnosis.message(),
            lane: diagnosis.lane,
            ..spec(EventKind::SanityCheckFailed)
        };
        let note = note(&spec);
        assert!(
            note.starts_with(
                "[host lane] gpu-7 is slow; hand it to the host team: slow in 10 of 13 checks"
            ),
            "{note}"
        );
        assert!(note.contains(&diagnosis.next_step), "{note}");
        // The API's 1 KiB: the conclusion comes first, so a cut takes only other culprits.
        assert!(note.len() <= MAX_NOTE_BYTES);
        assert!(note.ends_with('…'), "{note}");
    }
}
