use std::collections::BTreeMap;

use super::*;
use gpuvet_model::analysis::{JudgePolicy, judge};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{
    CheckResult, DeviceInfo, Entity, GroupSummary, Measurement, MetricInfo, Outcome,
};

fn sample_report() -> RunReport {
    let gemm = CheckName::GemmFlops;
    let device = |index| Entity::Device {
        node: "node-a".into(),
        index,
    };
    let measurements = [
        Measurement::ok(device(0), 0.1, vec![0.1; 4]),
        Measurement::ok(device(1), 0.05, vec![0.05; 4]),
    ];
    let entities = judge(
        gemm.spec(),
        &measurements,
        &JudgePolicy {
            tolerance: 0.05,
            limit: None,
        },
    );
    let metric = gemm.spec().metric;
    let checks = vec![
        CheckResult {
            name: gemm,
            status: CheckStatus::Failed,
            reason: None,
            duration_secs: 1.25,
            metric: MetricInfo {
                name: metric.name.into(),
                unit: metric.unit.into(),
                direction: metric.direction,
            },
            params: BTreeMap::from([("dtype".to_owned(), "fp32".to_owned())]),
            entities,
        },
        CheckResult::without_work(
            CheckName::AllReduce2,
            CheckStatus::Skipped,
            "needs 2 nodes; the group has 1",
        ),
        CheckResult::without_work(
            CheckName::AllGather,
            CheckStatus::NotImplemented,
            "not implemented on the cpu backend yet",
        ),
    ];
    RunReport {
        report_id: String::new(),
        gpuvet_version: "0.0.0-test".into(),
        job_id: "job-1".into(),
        attempt: 2,
        node: "node-a".into(),
        instance: "inst-a".into(),
        backend: "cpu".into(),
        devices: vec![
            DeviceInfo {
                index: 0,
                name: "cpu".into(),
                memory_bytes: None,
                facts: Default::default(),
                details: BTreeMap::new(),
            },
            DeviceInfo {
                index: 1,
                name: "cpu".into(),
                memory_bytes: None,
                facts: Default::default(),
                details: BTreeMap::new(),
            },
        ],
        started_at_ms: 0,
        duration_secs: 1.5,
        timeout_secs: 300.0,
        outcome: Outcome::of(&checks),
        checks,
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

#[test]
fn table_shows_every_check_and_each_finding() {
    insta::assert_snapshot!(table(&sample_report(), 110, Detail::Full));
}

#[test]
fn brief_details_stay_short_and_keep_what_runs_are_compared_by() {
    let mut report = sample_report();
    report.checks[0].params.extend([
        (
            "algorithm".to_owned(),
            "a long description of the algorithm".to_owned(),
        ),
        ("engine".to_owned(), "gpuvet-tcp".to_owned()),
        ("engine_note".to_owned(), "x".repeat(300)),
    ]);
    report.checks[1].reason = Some(format!("skipped because {}", "very ".repeat(40)));
    let brief = table(&report, 200, Detail::Brief);
    let full = table(&report, 400, Detail::Full);
    assert!(brief.contains("1 of 2 ok; dtype=fp32"), "{brief}");
    assert!(!brief.contains("engine="), "{brief}");
    assert!(full.contains("engine=gpuvet-tcp"), "{full}");
    assert!(!brief.contains("engine_note"), "{brief}");
    assert!(!brief.contains("algorithm="), "{brief}");
    assert!(full.contains("engine_note="), "{full}");
    assert!(full.contains("algorithm=a long"), "{full}");
    for line in brief.lines().filter(|l| l.starts_with('│')) {
        let details = line
            .rsplit('┆')
            .next()
            .unwrap()
            .trim_end_matches('│')
            .trim();
        assert!(details.chars().count() <= BRIEF_DETAILS, "{details}");
    }
    assert!(brief.contains("skipped because very"), "{brief}");
    assert!(brief.contains("…"), "{brief}");
}

#[test]
fn shorten_cuts_at_a_word_and_marks_the_cut() {
    assert_eq!(shorten("short", 80), "short");
    assert_eq!(shorten("one two three four", 12), "one two…");
    assert_eq!(shorten("abcdefghijklmnop", 8), "abcdefg…");
    assert!(shorten(&"ü".repeat(100), 80).chars().count() <= 80);
}

#[test]
fn junit_marks_skips_and_gaps_as_skipped_and_failures_as_failures() {
    insta::assert_snapshot!(junit(&sample_report()));
}

#[test]
fn json_names_backend_node_devices_and_statuses() {
    let json = serde_json::to_value(sample_report()).unwrap();
    assert_eq!(json["backend"], "cpu");
    assert_eq!(json["node"], "node-a");
    assert_eq!(json["devices"].as_array().unwrap().len(), 2);
    assert_eq!(json["outcome"], "failed");
    assert_eq!(json["checks"][0]["status"], "failed");
    assert_eq!(json["checks"][0]["entities"][1]["verdict"], "slow");
    assert_eq!(json["checks"][0]["entities"][1]["lane"], "host");
    assert_eq!(
        json["checks"][0]["entities"][1]["evidence"]["peer_median"],
        0.1
    );
    assert_eq!(json["checks"][1]["status"], "skipped");
    assert_eq!(json["checks"][2]["status"], "not_implemented");
    let back: RunReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, sample_report());
}

#[test]
fn the_group_line_folds_runs_of_node_names() {
    let mut report = sample_report();
    report.group = Some(GroupSummary {
        nodes: (0..4096).map(|n| format!("node-{n}")).collect(),
        ..GroupSummary::default()
    });
    let text = table(&report, 110, Detail::Brief);
    assert!(text.contains("\ngroup of 4096: node-[0-4095]\n"), "{text}");
}

#[test]
fn a_members_copy_of_a_large_group_says_how_many_nodes_and_that_it_names_only_some() {
    let mut report = sample_report();
    report.group = Some(GroupSummary {
        nodes: vec!["node-17".to_owned()],
        size: Some(4096),
        ..GroupSummary::default()
    });
    let text = table(&report, 110, Detail::Brief);
    assert!(
        text.contains(
            "\ngroup of 4096: node-17 named here; the coordinator's report names them all\n"
        ),
        "{text}"
    );
    report.group = Some(GroupSummary {
        size: Some(4096),
        ..GroupSummary::default()
    });
    let text = table(&report, 110, Detail::Brief);
    assert!(
        text.contains("\ngroup of 4096: the coordinator's report names them\n"),
        "{text}"
    );
}

#[test]
fn a_failed_run_leads_with_its_verdict_and_folds_its_findings() {
    use crate::diagnose::diagnose_report;
    use crate::fold::tests::{device_check, report};

    let mut report = report(vec![device_check(
        CheckName::GemmFlops,
        &["n0", "n1"],
        |node, _| if node == "n1" { 420.0 } else { 700.0 },
    )]);
    report.diagnosis = diagnose_report(&report);
    let brief = table(&report, 100, Detail::Brief);
    let lines: Vec<&str> = brief.lines().collect();
    let bottom = lines.iter().position(|l| l.starts_with('└')).unwrap();
    assert_eq!(
        lines[bottom + 1],
        "verdict: n1/dev[0-7] are slow in gemm_flops; hand it to the host team [lane: host]"
    );
    assert!(lines.iter().all(|l| l.chars().count() <= 100), "{brief}");
    assert_eq!(
        brief.matches("n1/dev").count(),
        2,
        "verdict and one finding: {brief}"
    );
    assert!(
        brief.contains("  gemm_flops: n1/dev[0-7] slow: 420 TFLOPS, 40 % below"),
        "{brief}"
    );

    let full = table(&report, 100, Detail::Full);
    for index in 0..8 {
        assert!(
            full.contains(&format!("gemm_flops slow on n1/dev{index} [lane: host]")),
            "--verbose keeps every entity: {full}"
        );
    }
}

#[test]
fn degraded_gpus_are_told_apart_from_findings_and_a_brief_line_stays_bounded() {
    use gpuvet_model::history::{GpuRecord, HistoryPolicy, judge_report};
    let mut report = sample_report();
    let gemm = &mut report.checks[0];
    gemm.status = CheckStatus::Passed;
    gemm.entities = (0..8)
        .map(|index| {
            let entity = Entity::Device {
                node: "node-a".into(),
                index,
            };
            let value = 85.0 - index as f64 * 0.1;
            EntityResult {
                entity: entity.clone(),
                verdict: gpuvet_model::results::Verdict::Ok,
                lane: gpuvet_model::results::Lane::Host,
                reason: "within 0.5% of the peer median (threshold 5.0%)".into(),
                evidence: Default::default(),
                measurement: Measurement::ok(entity, value, Vec::new()),
            }
        })
        .collect();
    let records = (0..8)
        .map(|i| {
            let record = GpuRecord {
                values: vec![100.0; 20],
                first_at_ms: 0,
                degraded_since_ms: None,
            };
            let key = gpuvet_model::history::RecordKey {
                gpu: format!("node-a/dev{i}"),
                check: CheckName::GemmFlops,
                work: gpuvet_model::history::work_of(&report.checks[0]),
            };
            (key, record)
        })
        .collect();
    judge_report(&mut report, &records, &HistoryPolicy::default(), 1);
    let brief = table(&report, 100, Detail::Brief);
    assert!(
        brief.contains("degraded (below their own record; the start is not refused for it):"),
        "{brief}"
    );
    assert!(
        brief.contains("gemm_flops on 8 GPU(s), worse than their own median by: node-a/dev7 15.7%")
            && brief.contains("node-a/dev4 15.4% and 4 more"),
        "{brief}"
    );
    assert!(brief.contains("0 of 8 ok, 8 degraded"), "{brief}");
    assert!(!brief.contains("findings:"), "{brief}");
    let full = table(&report, 100, Detail::Full);
    assert_eq!(
        full.matches("gemm_flops degraded on node-a/dev").count(),
        8,
        "{full}"
    );
}
