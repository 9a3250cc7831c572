//! The client against kube-rs's mock API service (`tower_test`): each test scripts the
//! API server's answers and checks the exact requests gpuvet sends (method, path and
//! query, JSON body), and that each is an entry of the API table RBAC is held to.

use std::pin::pin;

use gpuvet_kube::api::{self, User};
use gpuvet_kube::client::{Published, Quarantine, UntaintGate, Untainted, untaint};
use gpuvet_kube::event::{EventSpec, Regarding};
use gpuvet_kube::quarantine::Culprit;
use gpuvet_kube::status::Verdict;
use gpuvet_kube::{Kube, KubeError, PodRef};
use gpuvet_model::config::QuarantinePolicy;
use gpuvet_model::events::EventKind;
use gpuvet_model::offenders::{RepeatOffenderPolicy, Unproven};
use gpuvet_model::overview::RunSummary;
use gpuvet_model::results::{Lane, Outcome};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// 2025-12-02T11:00:00Z
const NOW: u64 = 1_764_673_200_000;

/// One request the test expects, and the API server's answer.
struct Exchange {
    method: &'static str,
    uri: String,
    body: Option<Value>,
    status: u16,
    answer: Value,
}

fn exchange(
    method: &'static str,
    uri: &str,
    body: Option<Value>,
    status: u16,
    answer: Value,
) -> Exchange {
    Exchange {
        method,
        uri: uri.to_owned(),
        body,
        status,
        answer,
    }
}

fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{reason} (mock)"), "reason": reason, "code": code,
    })
}

/// A client whose API server answers `script` in order and checks every request.
fn mock(user: User, script: Vec<Exchange>) -> (kube::Client, tokio::task::JoinHandle<()>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut handle = pin!(handle);
        for expected in script {
            let (request, send) = handle.next_request().await.unwrap_or_else(|| {
                panic!(
                    "no request came; expected {} {}",
                    expected.method, expected.uri
                )
            });
            let method = request.method().to_string();
            let uri = request.uri().to_string();
            assert_eq!(
                (method.as_str(), uri.as_str()),
                (expected.method, expected.uri.as_str())
            );
            let call = api::call_of(&method, &uri)
                .unwrap_or_else(|| panic!("{method} {uri} is in no entry of the API table"));
            assert!(
                call.users.contains(&user),
                "{method} {uri} is not granted to {user:?}"
            );
            let bytes = request.into_body().collect_bytes().await.unwrap();
            match &expected.body {
                Some(body) => {
                    let sent: Value = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                        panic!("{method} {uri}: the body is not JSON ({err}): {bytes:?}")
                    });
                    assert_eq!(&sent, body, "{method} {uri}");
                }
                None => assert!(bytes.is_empty(), "{method} {uri} sent a body: {bytes:?}"),
            }
            let answer = Response::builder()
                .status(StatusCode::from_u16(expected.status).unwrap())
                .body(Body::from(serde_json::to_vec(&expected.answer).unwrap()))
                .unwrap();
            send.send_response(answer);
        }
    });
    (kube::Client::new(service, "default"), server)
}

fn pod() -> PodRef {
    PodRef {
        name: "vllm-0".into(),
        namespace: "inference".into(),
        node: "gpu-7".into(),
        uid: Some("1f2e".into()),
    }
}

fn failed() -> EventSpec {
    EventSpec {
        kind: EventKind::SanityCheckFailed,
        lane: Some(Lane::Host),
        note: "sanity checks failed on `gpu-7`: gemm_flops on gpu-7/dev3 is 20% below its peers"
            .into(),
        report_url: Some("http://gpuvet-serve:9470/instances/job/gpu-7".into()),
        key: String::new(),
    }
}

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/inference/events";

#[tokio::test]
async fn the_first_event_is_created_with_its_reason_note_lane_and_link() {
    let name = gpuvet_kube::event::event_name(&pod(), Regarding::Pod, &failed());
    let body = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": "inference",
            "annotations": {
                "gpuvet.io/lane": "host",
                "gpuvet.io/report": "http://gpuvet-serve:9470/instances/job/gpu-7",
            },
        },
        "eventTime": "2025-12-02T11:00:00.000000Z",
        "action": "SanityCheck",
        "reason": "SanityCheckFailed",
        "note": "[host lane] sanity checks failed on `gpu-7`: gemm_flops on gpu-7/dev3 is 20% \
                 below its peers (report: http://gpuvet-serve:9470/instances/job/gpu-7)",
        "regarding": {
            "apiVersion": "v1", "kind": "Pod", "name": "vllm-0", "namespace": "inference",
            "uid": "1f2e",
        },
        "reportingController": "gpuvet.io/gpuvet",
        "reportingInstance": "vllm-0",
        "type": "Warning",
    });
    let (client, server) = mock(
        User::Run,
        vec![
            exchange(
                "GET",
                &format!("{EVENTS}/{name}"),
                None,
                404,
                status(404, "NotFound"),
            ),
            exchange("POST", &format!("{EVENTS}?"), Some(body.clone()), 201, body),
        ],
    );
    let kube = Kube::new(client, pod());
    let published = kube.publish(Regarding::Pod, &failed(), NOW).await.unwrap();
    assert_eq!(published, Published::Created);
    server.await.unwrap();
}

#[tokio::test]
async fn a_host_lane_event_on_the_node_regards_the_node() {
    let spec = EventSpec {
        kind: EventKind::RuntimeCheckFailed,
        report_url: None,
        note: "XID 79 on GPU 3: fallen off the bus".into(),
        key: "xid.79".into(),
        ..failed()
    };
    let name = gpuvet_kube::event::event_name(&pod(), Regarding::Node, &spec);
    assert!(name.starts_with("gpu-7.runtimecheckfailed."), "{name}");
    let body = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": "inference",
            "annotations": { "gpuvet.io/lane": "host" },
        },
        "eventTime": "2025-12-02T11:00:00.000000Z",
        "action": "RuntimeCheck",
        "reason": "RuntimeCheckFailed",
        "note": "[host lane] XID 79 on GPU 3: fallen off the bus",
        "regarding": { "apiVersion": "v1", "kind": "Node", "name": "gpu-7" },
        "reportingController": "gpuvet.io/gpuvet",
        "reportingInstance": "vllm-0",
        "type": "Warning",
    });
    let (client, server) = mock(
        User::Watch,
        vec![
            exchange(
                "GET",
                &format!("{EVENTS}/{name}"),
                None,
                404,
                status(404, "NotFound"),
            ),
            exchange("POST", &format!("{EVENTS}?"), Some(body.clone()), 201, body),
        ],
    );
    let kube = Kube::new(client, pod());
    assert_eq!(
        kube.publish(Regarding::Node, &spec, NOW).await.unwrap(),
        Published::Created
    );
    server.await.unwrap();
}

#[tokio::test]
async fn a_repeat_updates_the_series_instead_of_creating_an_event() {
    let name = gpuvet_kube::event::event_name(&pod(), Regarding::Pod, &failed());
    let mut existing = serde_json::to_value(gpuvet_kube::event::event_body(
        &pod(),
        Regarding::Pod,
        &failed(),
        NOW - 60_000,
    ))
    .unwrap();
    existing["apiVersion"] = json!("events.k8s.io/v1");
    existing["kind"] = json!("Event");
    existing["series"] = json!({ "count": 2, "lastObservedTime": "2025-12-02T10:59:30.000000Z" });
    let patch = json!({
        "series": { "count": 3, "lastObservedTime": "2025-12-02T11:00:00.000000Z" },
        "note": "[host lane] sanity checks failed on `gpu-7`: gemm_flops on gpu-7/dev3 is 20% \
                 below its peers (report: http://gpuvet-serve:9470/instances/job/gpu-7)",
        "metadata": { "annotations": {
            "gpuvet.io/report": "http://gpuvet-serve:9470/instances/job/gpu-7",
        }},
    });
    let (client, server) = mock(
        User::Run,
        vec![
            exchange(
                "GET",
                &format!("{EVENTS}/{name}"),
                None,
                200,
                existing.clone(),
            ),
            exchange(
                "PATCH",
                &format!("{EVENTS}/{name}?"),
                Some(patch),
                200,
                existing,
            ),
        ],
    );
    let kube = Kube::new(client, pod());
    let published = kube.publish(Regarding::Pod, &failed(), NOW).await.unwrap();
    assert_eq!(published, Published::Repeated(3));
    server.await.unwrap();
}

fn pod_object() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "vllm-0", "namespace": "inference" },
        "spec": { "containers": [{ "name": "vllm", "image": "vllm" }] },
    })
}

#[tokio::test]
async fn the_verdict_sets_the_condition_and_the_annotations() {
    let verdict = Verdict {
        ready: false,
        kind: EventKind::SanityCheckFailed,
        outcome: "failed".into(),
        summary: "2 passed, 1 failed".into(),
        lane: Some(Lane::Host),
        job_id: "vllm-0".into(),
        attempt: 2,
        report_url: None,
    };
    let condition = json!({ "status": { "conditions": [{
        "type": "GpuvetSanity",
        "status": "False",
        "reason": "SanityCheckFailed",
        "message": "2 passed, 1 failed",
        "lastTransitionTime": "2025-12-02T11:00:00Z",
    }]}});
    let annotations = json!({ "metadata": { "annotations": {
        "gpuvet.io/verdict": "failed",
        "gpuvet.io/summary": "2 passed, 1 failed",
        "gpuvet.io/verdict-lane": "host",
        "gpuvet.io/attempt": "vllm-0#2",
        "gpuvet.io/checked-at": "2025-12-02T11:00:00Z",
        "gpuvet.io/report": null,
    }}});
    let pods = "/api/v1/namespaces/inference/pods/vllm-0";
    let (client, server) = mock(
        User::Run,
        vec![
            exchange(
                "PATCH",
                &format!("{pods}/status?"),
                Some(condition),
                200,
                pod_object(),
            ),
            exchange(
                "PATCH",
                &format!("{pods}?"),
                Some(annotations),
                200,
                pod_object(),
            ),
        ],
    );
    Kube::new(client, pod())
        .set_verdict(&verdict, NOW)
        .await
        .unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn the_pod_is_deleted() {
    let (client, server) = mock(
        User::Run,
        vec![exchange(
            "DELETE",
            "/api/v1/namespaces/inference/pods/vllm-0?",
            Some(json!({})),
            200,
            pod_object(),
        )],
    );
    Kube::new(client, pod()).delete_pod().await.unwrap();
    server.await.unwrap();
}

fn node(name: &str, quarantined_at: Option<&str>) -> Value {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "resourceVersion": "41" },
        "spec": { "taints": [{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }] },
    });
    if let Some(at) = quarantined_at {
        node["spec"]["taints"].as_array_mut().unwrap().push(json!({
            "key": "gpuvet.io/unhealthy", "value": "host", "effect": "NoSchedule",
        }));
        node["metadata"]["annotations"] = json!({ "gpuvet.io/quarantined-at": at });
    }
    node
}

fn node_list(nodes: Vec<Value>) -> Value {
    json!({ "apiVersion": "v1", "kind": "NodeList", "metadata": { "resourceVersion": "50" }, "items": nodes })
}

fn culprit(node: &str) -> Culprit {
    Culprit {
        node: node.into(),
        lane: Lane::Host,
        finding: json!({ "check": "gemm_flops", "entity": format!("{node}/dev3") }),
        repeat_offender: None,
    }
}

fn taint_body(node: &str) -> Value {
    json!({
        "metadata": {
            "resourceVersion": "41",
            "annotations": {
                "gpuvet.io/quarantine": format!(r#"{{"check":"gemm_flops","entity":"{node}/dev3"}}"#),
                "gpuvet.io/quarantined-at": "2025-12-02T11:00:00Z",
                "gpuvet.io/repeat-offender": null,
            },
        },
        "spec": { "taints": [
            { "key": "nvidia.com/gpu", "effect": "NoSchedule" },
            { "key": "gpuvet.io/unhealthy", "value": "host", "effect": "NoSchedule" },
        ]},
    })
}

#[tokio::test]
async fn only_the_culprit_is_tainted() {
    let nodes = vec![
        node("gpu-1", None),
        node("gpu-7", None),
        node("gpu-8", None),
        node("gpu-9", None),
    ];
    let (client, server) = mock(
        User::Run,
        vec![
            exchange("GET", "/api/v1/nodes?", None, 200, node_list(nodes)),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-7?",
                Some(taint_body("gpu-7")),
                200,
                node("gpu-7", Some("")),
            ),
        ],
    );
    let kube = Kube::new(client, pod());
    let outcome = kube
        .quarantine(&[culprit("gpu-7")], &QuarantinePolicy::default(), NOW)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Quarantine {
            tainted: vec!["gpu-7".into()],
            ..Quarantine::default()
        }
    );
    server.await.unwrap();
}

#[tokio::test]
async fn the_breaker_refuses_the_third_node_out_of_four_and_says_why() {
    // Two of four nodes were quarantined a minute ago; the third is refused, and no
    // PATCH is sent (the mock fails on any request past the list).
    let nodes = vec![
        node("gpu-1", Some("2025-12-02T10:59:00Z")),
        node("gpu-2", Some("2025-12-02T10:59:10Z")),
        node("gpu-7", None),
        node("gpu-9", None),
    ];
    let (client, server) = mock(
        User::Run,
        vec![exchange(
            "GET",
            "/api/v1/nodes?",
            None,
            200,
            node_list(nodes),
        )],
    );
    let kube = Kube::new(client, pod());
    let outcome = kube
        .quarantine(&[culprit("gpu-7")], &QuarantinePolicy::default(), NOW)
        .await
        .unwrap();
    assert!(outcome.tainted.is_empty(), "{outcome:?}");
    assert_eq!(outcome.refused.len(), 1);
    assert_eq!(outcome.refused[0].0, "gpu-7");
    assert!(
        outcome.refused[0].1.contains("3 of 4 nodes") && outcome.refused[0].1.contains("50 %"),
        "{}",
        outcome.refused[0].1
    );
    server.await.unwrap();
    // The refusal is data the binary records in the InstanceRebuildRequested event.
    let recorded = serde_json::to_value(&outcome).unwrap();
    assert_eq!(recorded["refused"][0][0], "gpu-7");
}

#[tokio::test]
async fn a_conflict_is_read_again_and_retried_once_and_an_api_error_is_recorded() {
    let nodes = vec![
        node("gpu-1", None),
        node("gpu-7", None),
        node("gpu-8", None),
        node("gpu-9", None),
    ];
    let (client, server) = mock(
        User::Run,
        vec![
            exchange("GET", "/api/v1/nodes?", None, 200, node_list(nodes)),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-7?",
                Some(taint_body("gpu-7")),
                409,
                status(409, "Conflict"),
            ),
            exchange("GET", "/api/v1/nodes/gpu-7", None, 200, node("gpu-7", None)),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-7?",
                Some(taint_body("gpu-7")),
                200,
                node("gpu-7", Some("")),
            ),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-8?",
                Some(taint_body("gpu-8")),
                403,
                status(403, "Forbidden"),
            ),
        ],
    );
    let kube = Kube::new(client, pod());
    let outcome = kube
        .quarantine(
            &[culprit("gpu-7"), culprit("gpu-8")],
            &QuarantinePolicy::default(),
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(outcome.tainted, ["gpu-7"]);
    assert_eq!(outcome.failed.len(), 1);
    assert_eq!(outcome.failed[0].0, "gpu-8");
    assert!(
        outcome.failed[0]
            .1
            .starts_with("the Kubernetes API failed to taint node `gpu-8`"),
        "{}",
        outcome.failed[0].1
    );
    server.await.unwrap();
}

#[tokio::test]
async fn a_refused_list_is_an_error_with_the_rbac_hint() {
    let (client, server) = mock(
        User::Run,
        vec![exchange(
            "GET",
            "/api/v1/nodes?",
            None,
            403,
            status(403, "Forbidden"),
        )],
    );
    let err = Kube::new(client, pod())
        .quarantine(&[culprit("gpu-7")], &QuarantinePolicy::default(), NOW)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the Kubernetes API failed to list the nodes"),
        "{err}"
    );
    assert!(err.hint().unwrap().contains("deploy/rbac.yaml"));
    server.await.unwrap();
}

/// The body that lifts gpuvet's taint and its annotations from a node of [`node`].
fn lift_body() -> Value {
    json!({
        "metadata": {
            "resourceVersion": "41",
            "annotations": {
                "gpuvet.io/quarantine": null,
                "gpuvet.io/quarantined-at": null,
                "gpuvet.io/repeat-offender": null,
            },
        },
        "spec": { "taints": [{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }] },
    })
}

/// One run of a node, as the store lists it.
fn run(run_id: i64, started_at_ms: u64, outcome: Outcome) -> RunSummary {
    RunSummary {
        run_id,
        report_id: String::new(),
        outcome,
        backend: "sim".into(),
        started_at_ms,
        duration_secs: Some(3.0),
        checks: 3,
        failed_checks: u32::from(outcome == Outcome::Failed),
        findings: 0,
        node_failed: false,
    }
}

/// 2025-12-02T10:00:00Z, when the nodes of these tests were quarantined.
const TAINTED_AT: u64 = NOW - 3_600_000;

#[tokio::test]
async fn untaint_lifts_the_taint_and_its_annotations_after_a_passing_run() {
    let policy = RepeatOffenderPolicy::default();
    // Failed before the quarantine, passed after it.
    let runs = [
        run(12, TAINTED_AT + 60_000, Outcome::Passed),
        run(11, TAINTED_AT - 60_000, Outcome::Failed),
    ];
    let (client, server) = mock(
        User::Untaint,
        vec![
            exchange(
                "GET",
                "/api/v1/nodes/gpu-7",
                None,
                200,
                node("gpu-7", Some("2025-12-02T10:00:00Z")),
            ),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-7?",
                Some(lift_body()),
                200,
                node("gpu-7", None),
            ),
            exchange("GET", "/api/v1/nodes/gpu-8", None, 200, node("gpu-8", None)),
            exchange(
                "GET",
                "/api/v1/nodes/gone",
                None,
                404,
                status(404, "NotFound"),
            ),
        ],
    );
    let gate = UntaintGate::Proof {
        runs: &runs,
        policy: &policy,
    };
    let Untainted::Proven(proof) = untaint(&client, "gpu-7", gate).await.unwrap() else {
        panic!("not proven");
    };
    assert_eq!(proof.passing_runs, [12]);
    assert_eq!(
        untaint(&client, "gpu-8", gate).await.unwrap(),
        Untainted::WasNotTainted
    );
    let err = untaint(&client, "gone", gate).await.unwrap_err();
    assert!(
        matches!(err, KubeError::NoSuchNode(ref n) if n == "gone"),
        "{err:?}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn untaint_refuses_a_node_without_a_passing_run_since_its_quarantine() {
    let policy = RepeatOffenderPolicy::default();
    // It passed once, but before the quarantine; and then it failed after it.
    let before = [run(11, TAINTED_AT - 60_000, Outcome::Passed)];
    let failed_since = [
        run(12, TAINTED_AT + 60_000, Outcome::Failed),
        run(11, TAINTED_AT - 60_000, Outcome::Passed),
    ];
    // Only reads: a refused untaint sends no PATCH (the script would fail on one).
    let tainted = || {
        exchange(
            "GET",
            "/api/v1/nodes/gpu-7",
            None,
            200,
            node("gpu-7", Some("2025-12-02T10:00:00Z")),
        )
    };
    let (client, server) = mock(User::Untaint, vec![tainted(), tainted()]);
    for runs in [&before[..], &failed_since[..]] {
        let gate = UntaintGate::Proof {
            runs,
            policy: &policy,
        };
        let err = untaint(&client, "gpu-7", gate).await.unwrap_err();
        let KubeError::Unproven { node, reason } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(node, "gpu-7");
        assert!(
            matches!(
                reason,
                Unproven::TooFewRuns { runs: 0, .. } | Unproven::NotPassed { run_id: 12, .. }
            ),
            "{reason:?}"
        );
        assert!(
            err.to_string()
                .starts_with("node `gpu-7` stays quarantined: "),
            "{err}"
        );
        assert!(
            err.hint()
                .unwrap()
                .contains("run `gpuvet check` on the node")
        );
        assert!(err.hint().unwrap().contains("--force --reason"));
    }
    server.await.unwrap();
}

#[tokio::test]
async fn a_flagged_repeat_offender_needs_two_passes_and_force_needs_none() {
    let policy = RepeatOffenderPolicy::default();
    let mut flagged = node("gpu-7", Some("2025-12-02T10:00:00Z"));
    flagged["metadata"]["annotations"]["gpuvet.io/repeat-offender"] =
        json!(r#"{"failed":3,"of_last":5}"#);
    let one = [run(12, TAINTED_AT + 60_000, Outcome::Passed)];
    let two = [
        run(13, TAINTED_AT + 120_000, Outcome::Passed),
        run(12, TAINTED_AT + 60_000, Outcome::Passed),
    ];
    let (client, server) = mock(
        User::Untaint,
        vec![
            exchange("GET", "/api/v1/nodes/gpu-7", None, 200, flagged.clone()),
            exchange("GET", "/api/v1/nodes/gpu-7", None, 200, flagged.clone()),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-7?",
                Some(lift_body()),
                200,
                node("gpu-7", None),
            ),
            // Without a time, nothing proves it; `--force` lifts it all the same.
            exchange(
                "GET",
                "/api/v1/nodes/gpu-9",
                None,
                200,
                node("gpu-9", Some("")),
            ),
            exchange(
                "GET",
                "/api/v1/nodes/gpu-9",
                None,
                200,
                node("gpu-9", Some("")),
            ),
            exchange(
                "PATCH",
                "/api/v1/nodes/gpu-9?",
                Some(lift_body()),
                200,
                node("gpu-9", None),
            ),
        ],
    );
    let gate = |runs| UntaintGate::Proof {
        runs,
        policy: &policy,
    };
    let err = untaint(&client, "gpu-7", gate(&one)).await.unwrap_err();
    assert!(
        err.to_string().contains("it needs 2 passing runs in a row"),
        "{err}"
    );
    let Untainted::Proven(proof) = untaint(&client, "gpu-7", gate(&two)).await.unwrap() else {
        panic!("not proven");
    };
    assert_eq!(proof.passing_runs, [13, 12]);
    let err = untaint(&client, "gpu-9", gate(&two)).await.unwrap_err();
    assert!(
        matches!(
            err,
            KubeError::Unproven {
                reason: Unproven::NoQuarantineTime,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        untaint(&client, "gpu-9", UntaintGate::Force).await.unwrap(),
        Untainted::Forced {
            quarantined_at_ms: None
        }
    );
    server.await.unwrap();
}

#[test]
fn the_rebuild_summary_says_what_happened_to_each_node() {
    let mut outcome = Quarantine {
        tainted: vec!["gpu-7".into()],
        already_tainted: vec!["gpu-8".into()],
        ..Quarantine::default()
    };
    assert!(outcome.deletes_pod());
    assert_eq!(
        outcome.summary("vllm-0"),
        "rebuild of pod `vllm-0`: tainted `gpu-7` (gpuvet.io/unhealthy); already tainted `gpu-8`"
    );
    outcome.tainted.clear();
    outcome
        .refused
        .push(("gpu-9".into(), "circuit breaker: ...".into()));
    outcome.failed.push(("gpu-3".into(), "forbidden".into()));
    outcome.not_in_cluster.push("host-a".into());
    assert!(!outcome.deletes_pod());
    assert_eq!(
        outcome.summary("vllm-0"),
        "rebuild of pod `vllm-0`: tainted no node (gpuvet.io/unhealthy); already tainted \
         `gpu-8`; refused `gpu-9`: circuit breaker: ...; the pod is not deleted; could not \
         taint `gpu-3`: forbidden; not nodes of this cluster: `host-a`"
    );
}
