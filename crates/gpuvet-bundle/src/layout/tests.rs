use super::*;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, NewEvent};
use gpuvet_model::record::{CheckSpan, MemberClock, MemberRecord, RecordedTimeline};
use gpuvet_model::results::{
    CheckResult, CheckStatus, DeviceInfo, Entity, EntityResult, Evidence, GroupSummary, Lane,
    Measurement, Outcome, RunContext,
};

const T0: u64 = 1_800_000_000_000;
const SECRET: &str = "a-token-nobody-may-see-0123";

/// A group of `nodes` nodes with 8 GPUs each, every check with `samples` raw samples
/// an entity, one slow GPU, and a few events a node.
fn group_record(nodes: usize, samples: usize) -> JobRecord {
    let names: Vec<String> = (0..nodes).map(|i| format!("node-{i}")).collect();
    let entity = |entity: Entity, slow: bool| EntityResult {
        measurement: Measurement::ok(entity.clone(), 100.0, vec![100.0; samples]),
        entity,
        verdict: if slow { Verdict::Slow } else { Verdict::Ok },
        lane: Lane::Host,
        reason: "a reason of a typical length for an entity of a check".to_owned(),
        evidence: Evidence::default(),
    };
    let checks: Vec<CheckResult> = CheckName::ALL
        .iter()
        .map(|&name| {
            let entities = names
                .iter()
                .flat_map(|node| {
                    (0..8).map(move |index| Entity::Device {
                        node: node.clone(),
                        index,
                    })
                })
                .enumerate()
                .map(|(i, e)| entity(e, name == CheckName::GemmFlops && i == 21))
                .collect();
            CheckResult::judged(name, CheckStatus::Passed, entities)
        })
        .collect();
    let device = |index: u32| DeviceInfo {
        index,
        name: "NVIDIA H200".to_owned(),
        memory_bytes: Some(141 << 30),
        facts: Default::default(),
        details: Default::default(),
    };
    let members = names
        .iter()
        .enumerate()
        .map(|(rank, node)| MemberRecord {
            rank: rank as u32,
            node: node.clone(),
            clock: Some(MemberClock {
                offset_ns: 1_000,
                uncertainty_ns: 20_000,
                samples: 5,
            }),
            spans: CheckName::ALL
                .iter()
                .enumerate()
                .map(|(i, &check)| CheckSpan {
                    check,
                    began_ms: T0 + 1000 * i as u64,
                    ended_ms: T0 + 1000 * i as u64 + 900,
                })
                .collect(),
            devices: (0..8).map(device).collect(),
        })
        .collect();
    let report = RunReport {
        report_id: "r".into(),
        gpuvet_version: "0".into(),
        job_id: "job/../7".into(),
        attempt: 2,
        node: "node-0".into(),
        instance: "pod-0".into(),
        backend: "cuda".into(),
        devices: Vec::new(),
        started_at_ms: T0,
        duration_secs: 20.0,
        timeout_secs: 600.0,
        outcome: Outcome::of(&checks),
        checks,
        group: Some(GroupSummary {
            size: None,
            nodes: names.clone(),
            timeline: Some(RecordedTimeline {
                coordinator: "node-0".into(),
                members,
                checks: Vec::new(),
            }),
            ..GroupSummary::default()
        }),
        context: Some(RunContext {
            config_file: Some("/etc/gpuvet.json".into()),
            config: serde_json::json!({"gpuvet": {"rebuild_hook": ["curl", SECRET]}}),
            environment: [("GPUVET_JOB_ID".to_owned(), "7".to_owned())].into(),
            slurm: None,
        }),
        diagnosis: None,
        repeat_offender: None,
    };
    let events = names
        .iter()
        .flat_map(|node| {
            (0..4).map(move |i| Event {
                id: i,
                attempt: Attempt {
                    job_id: "job/../7".into(),
                    attempt: 2,
                    node: node.clone(),
                    instance: format!("pod-{node}"),
                },
                event: NewEvent {
                    event_id: format!("{node}-{i}"),
                    time_ms: T0 + 30_000 + i as u64,
                    kind: EventKind::InstanceStarted,
                    lane: None,
                    message: format!("started on {node} with token {SECRET}"),
                    details: serde_json::json!({"command": ["serve", SECRET]}),
                },
                count: 1,
                last_seen_ms: None,
            })
        })
        .collect();
    JobRecord {
        job_id: "job/../7".into(),
        attempt: 2,
        reports: vec![report],
        events,
    }
}

fn packed(record: &JobRecord) -> (Packed, Vec<u8>) {
    let mut bytes = Vec::new();
    let packed = pack(record, T0, "0.1.0", &[SECRET], &mut bytes).unwrap();
    (packed, bytes)
}

#[test]
fn a_small_bundle_reads_back_as_the_record_it_was_made_from() {
    let record = group_record(4, 20);
    let (packed, bytes) = packed(&record);
    assert!(packed.info.trimmed.is_empty(), "{:?}", packed.info.trimmed);
    let (info, back) = unpack(bytes.as_slice()).unwrap();
    assert_eq!(info, packed.info);
    // Only the secret differs: it was scrubbed from the config and the events.
    assert_eq!(back.reports[0].checks, record.reports[0].checks);
    assert_eq!(back.reports[0].group, record.reports[0].group);
    let config = &back.reports[0].context.as_ref().unwrap().config;
    assert_eq!(config["gpuvet"]["rebuild_hook"][1], REDACTED);
    assert_eq!(back.events.len(), record.events.len());
    assert!(back.events[0].event.message.ends_with("token [redacted]"));
    let again = explain::explain(&back, &timeline::assemble(&back));
    assert_eq!(again, packed.explanation);
    assert_eq!(
        packed.explanation.first_error.as_ref().unwrap().node,
        "node-2"
    );
}

#[test]
fn a_64_node_job_stays_under_5_mb_with_its_samples_trimmed_and_said_so() {
    let record = group_record(64, 200);
    let raw: usize = record
        .reports
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap().len())
        .sum();
    assert!(
        raw > REPORTS_BUDGET_BYTES,
        "the test needs a report over budget: {raw}"
    );
    let (packed, bytes) = packed(&record);
    assert!(bytes.len() < 5_000_000, "{} bytes", bytes.len());
    assert_eq!(packed.bytes as usize, bytes.len());
    let note = &packed.info.trimmed[0];
    assert!(note.starts_with("reports: "), "{note}");
    let bundle = crate::read(bytes.as_slice(), &Limits::default()).unwrap();
    let readme = String::from_utf8(bundle.get("README.md").unwrap().bytes.clone()).unwrap();
    assert!(
        readme.contains("## Left out to keep the bundle small"),
        "{readme}"
    );
    // Unpacked, each file is still under the limit a reader sets by default.
    let total: usize = bundle.files.iter().map(|f| f.bytes.len()).sum();
    assert!(total < 32 << 20, "{total}");
    // Trimming keeps every verdict: the answer does not change.
    let (_, back) = unpack(bytes.as_slice()).unwrap();
    assert_eq!(
        explain::explain(&back, &timeline::assemble(&back)),
        packed.explanation
    );
    assert_eq!(
        bundle
            .files
            .iter()
            .filter(|f| f.path.starts_with("inventory/"))
            .count(),
        64
    );
}

#[test]
fn no_file_holds_a_known_secret() {
    let (_, bytes) = packed(&group_record(4, 5));
    let bundle = crate::read(bytes.as_slice(), &Limits::default()).unwrap();
    for file in &bundle.files {
        let text = String::from_utf8_lossy(&file.bytes);
        assert!(!text.contains(SECRET), "{} holds the secret", file.path);
    }
    let config: serde_json::Value = bundle.json("config.json").unwrap();
    assert_eq!(config["gpuvet"]["rebuild_hook"][1], REDACTED);
    // The job id `job/../7` names the directory safely.
    assert_eq!(bundle.root, "gpuvet-bundle-job_.._7-attempt2");
}

/// What an older gpuvet recorded unredacted (a password the rules catch today, in an
/// event's message and details and in a report's environment) is not packed either.
#[test]
fn what_an_older_gpuvet_recorded_unredacted_is_redacted_when_packed() {
    const OLD: &str = "hunter2-old-secret";
    let mut record = group_record(2, 1);
    record.events[0].event.message = format!("curl -u admin:{OLD} https://registry");
    record.events[1].event.details =
        serde_json::json!({ "command": ["mysql", format!("-p{OLD}")] });
    record.reports[0]
        .context
        .as_mut()
        .unwrap()
        .environment
        .insert("HF_TOKEN".to_owned(), OLD.to_owned());
    let (_, bytes) = packed(&record);
    let bundle = crate::read(bytes.as_slice(), &Limits::default()).unwrap();
    for file in &bundle.files {
        let text = String::from_utf8_lossy(&file.bytes);
        assert!(
            !text.contains(OLD),
            "{} holds the old secret:\n{text}",
            file.path
        );
    }
    let (_, back) = unpack(bytes.as_slice()).unwrap();
    assert_eq!(
        back.events[0].event.message,
        "curl -u admin:[redacted] https://registry"
    );
}

#[test]
fn node_names_that_clash_as_file_names_stay_apart() {
    let names = unique_names(["a/b", "a_b", "a/b", ".."].into_iter());
    assert_eq!(names, ["a_b", "a_b-2", "a_b-3", "__"]);
}

#[test]
fn a_bundle_of_another_layout_version_is_refused() {
    let mut files = vec![BundleFile::new(
        "bundle.json",
        serde_json::to_vec(&serde_json::json!({
            "format": FORMAT + 1, "job_id": "j", "attempt": 1, "created_at_ms": 0,
            "gpuvet_version": "9", "reports": []
        }))
        .unwrap(),
    )];
    files.push(BundleFile::new("events.json", b"[]".to_vec()));
    let mut bytes = Vec::new();
    crate::write(&files, "root", &mut bytes).unwrap();
    let err = unpack(bytes.as_slice()).unwrap_err();
    assert!(
        matches!(err, BundleError::Format { found, .. } if found == FORMAT + 1),
        "{err}"
    );
    assert!(err.hint().is_some());
}

#[test]
fn the_readme_leads_with_the_verdict_and_lists_the_findings_folded() {
    let mut record = group_record(4, 5);
    // Every GPU of node-1 slow in every check: one slow node, not 8 findings a check.
    for check in &mut record.reports[0].checks {
        check.status = CheckStatus::Failed;
        for entity in &mut check.entities {
            if entity.entity.node() == "node-1" {
                entity.verdict = Verdict::Slow;
            }
        }
    }
    let (packed, bytes) = packed(&record);
    let bundle = crate::read(bytes.as_slice(), &Limits::default()).unwrap();
    let readme = String::from_utf8(bundle.get("README.md").unwrap().bytes.clone()).unwrap();
    let diagnosis = packed.explanation.diagnosis.as_ref().unwrap();
    assert_eq!(diagnosis.headline, "node-1 is slow");
    // The verdict block as `explain` prints it, first under its heading.
    let block = format!(
        "## What went wrong\n\n```text\n{}\n```\n",
        diagnosis.lines(TERMINAL_WIDTH).join("\n")
    );
    assert!(readme.contains(&block), "{readme}");
    assert!(
        readme
            .contains("```text\nverdict: node-1 is slow; hand it to the host team [lane: host]\n"),
        "{readme}"
    );
    // The findings folded: the slow node once, the other slow GPU on a line of its own.
    let findings = readme
        .split("## Findings\n")
        .nth(1)
        .and_then(|rest| rest.split("```text\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("no findings block: {readme}"));
    let lines: Vec<&str> = findings.lines().collect();
    let checks = CheckName::ALL.len();
    assert_eq!(
        lines,
        [
            format!("node-1: slow in {checks} of {checks} checks, all 8 GPUs").as_str(),
            "gemm_flops: node-2/dev5 slow: a reason of a typical length for an entity of a check",
        ],
        "{readme}"
    );
    assert!(
        readme.find("## Findings") < readme.find("## Hypotheses"),
        "{readme}"
    );
}
