use super::*;
use crate::inventory::DeviceFacts;
use crate::results::{DeviceInfo, Evidence, Lane, Measurement};

fn gpu(node: &str, index: u32) -> Entity {
    Entity::Device {
        node: node.into(),
        index,
    }
}

/// The record key of `gpu`'s `gemm_flops` in the reports of these tests, whose GEMM
/// names no parameters.
fn gemm(gpu: &str) -> RecordKey {
    RecordKey {
        gpu: gpu.to_owned(),
        check: CheckName::GemmFlops,
        work: String::new(),
    }
}

fn ok(entity: Entity, value: f64) -> EntityResult {
    EntityResult {
        entity: entity.clone(),
        verdict: Verdict::Ok,
        lane: Lane::Host,
        reason: "within 0.5% of the peer median (threshold 5.0%)".into(),
        evidence: Evidence::default(),
        measurement: Measurement::ok(entity, value, Vec::new()),
    }
}

/// A record of `n` values around 100 with a ±1 % wobble.
fn record(n: usize) -> GpuRecord {
    GpuRecord {
        values: (0..n).map(|i| 100.0 + (i % 3) as f64 - 1.0).collect(),
        first_at_ms: 1_000,
        degraded_since_ms: None,
    }
}

fn report(values: &[f64]) -> RunReport {
    let entities = values
        .iter()
        .enumerate()
        .map(|(i, &v)| ok(gpu("n0", i as u32), v))
        .collect();
    RunReport {
        report_id: String::new(),
        gpuvet_version: "0".into(),
        job_id: "j".into(),
        attempt: 1,
        node: "n0".into(),
        instance: "i".into(),
        backend: "sim".into(),
        devices: Vec::new(),
        started_at_ms: 0,
        duration_secs: 0.0,
        timeout_secs: 0.0,
        outcome: Outcome::Passed,
        checks: vec![CheckResult::judged(
            CheckName::GemmFlops,
            CheckStatus::Passed,
            entities,
        )],
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

const NOW: u64 = 1_800_000_000_000;

#[test]
fn the_summary_is_the_median_and_a_spread_one_outlier_does_not_move() {
    let summary = summarize(&[100.0, 102.0, 98.0, 101.0, 99.0]).unwrap();
    assert_eq!(summary.runs, 5);
    assert_eq!(summary.median, 100.0);
    // MAD of 0,2,2,1,1 is 1: 1.4826 % of the median.
    assert!((summary.spread - 0.014826).abs() < 1e-9, "{summary:?}");
    let with_outlier = summarize(&[100.0, 102.0, 98.0, 101.0, 99.0, 10.0]).unwrap();
    assert_eq!(with_outlier.median, 99.5);
    assert!(with_outlier.spread < 0.025, "{with_outlier:?}");
    assert_eq!(summarize(&[]), None);
    assert_eq!(summarize(&[f64::NAN]), None);
    assert_eq!(summarize(&[0.0, 0.0]), None);
}

#[test]
fn the_threshold_is_the_tolerance_unless_the_record_scatters_more() {
    let steady = Summary {
        runs: 20,
        median: 100.0,
        spread: 0.005,
    };
    assert_eq!(threshold(&steady, 0.08), 0.08);
    let scattered = Summary {
        spread: 0.03,
        ..steady
    };
    let expected = SPREAD_SIGMAS * 0.03 * (1.0f64 + 1.0 / 20.0).sqrt();
    assert!((threshold(&scattered, 0.08) - expected).abs() < 1e-12);
}

#[test]
fn a_gpu_fifteen_percent_below_its_record_is_degraded_and_says_by_how_much_and_since_when() {
    let policy = HistoryPolicy::default();
    let mut result = ok(gpu("n0", 3), 85.0);
    assert!(judge_entity(
        CheckName::GemmFlops,
        &mut result,
        &record(20),
        &policy,
        NOW
    ));
    assert_eq!(result.verdict, Verdict::Degraded);
    let evidence = result.evidence.history.as_ref().unwrap();
    assert_eq!(evidence.runs, 20);
    assert_eq!(evidence.median, 100.0);
    assert_eq!(evidence.deficit_pct, 15.0);
    assert_eq!(evidence.threshold_pct, 8.0);
    assert_eq!(evidence.degraded_since_ms, Some(NOW));
    assert!(!evidence.fails);
    assert!(
        !result.fails(),
        "degraded informs unless the config says so"
    );
    assert!(
        result.reason.starts_with(
            "85.0 TFLOPS is 15.0% below its own median 100 TFLOPS over its last 20 ok runs \
             (threshold 8.0%), since this run"
        ),
        "{}",
        result.reason
    );
    // A degradation that began in an earlier run says when.
    let mut earlier = record(20);
    earlier.degraded_since_ms = Some(0);
    let mut result = ok(gpu("n0", 3), 85.0);
    judge_entity(CheckName::GemmFlops, &mut result, &earlier, &policy, NOW);
    assert!(
        result.reason.contains("since 1970-01-01T00:00:00.000Z"),
        "{}",
        result.reason
    );
}

#[test]
fn within_the_record_stays_ok_with_the_record_as_evidence() {
    let mut result = ok(gpu("n0", 0), 95.0);
    assert!(!judge_entity(
        CheckName::GemmFlops,
        &mut result,
        &record(20),
        &HistoryPolicy::default(),
        NOW
    ));
    assert_eq!(result.verdict, Verdict::Ok);
    assert_eq!(result.evidence.history.as_ref().unwrap().deficit_pct, 5.0);
    // Faster than its record is never degraded.
    let mut faster = ok(gpu("n0", 0), 150.0);
    assert!(!judge_entity(
        CheckName::GemmFlops,
        &mut faster,
        &record(20),
        &HistoryPolicy::default(),
        NOW
    ));
}

#[test]
fn lower_is_better_checks_are_degraded_above_their_record() {
    let mut result = ok(gpu("n0", 0), 120.0);
    assert!(judge_entity(
        CheckName::KernelLaunch,
        &mut result,
        &record(20),
        &HistoryPolicy::default(),
        NOW
    ));
    assert!(
        result.reason.contains("20.0% above its own median"),
        "{}",
        result.reason
    );
}

#[test]
fn too_short_a_record_or_a_verdict_already_made_is_left_alone() {
    let policy = HistoryPolicy::default();
    let mut short = ok(gpu("n0", 0), 50.0);
    assert!(!judge_entity(
        CheckName::GemmFlops,
        &mut short,
        &record(policy.min_runs - 1),
        &policy,
        NOW
    ));
    assert_eq!(short.verdict, Verdict::Ok);
    assert_eq!(short.evidence.history, None);
    let mut slow = ok(gpu("n0", 0), 50.0);
    slow.verdict = Verdict::Slow;
    assert!(!judge_entity(
        CheckName::GemmFlops,
        &mut slow,
        &record(20),
        &policy,
        NOW
    ));
    assert_eq!(slow.verdict, Verdict::Slow);
    // Only the newest `runs` values count: an old fast past is forgotten.
    let mut aged = record(10);
    aged.values.extend([200.0; 30]);
    let mut result = ok(gpu("n0", 0), 99.0);
    let policy = HistoryPolicy { runs: 10, ..policy };
    assert!(!judge_entity(
        CheckName::GemmFlops,
        &mut result,
        &aged,
        &policy,
        NOW
    ));
}

#[test]
fn a_whole_node_degraded_together_is_degraded_on_every_gpu_though_its_peers_agree() {
    let mut report = report(&[85.0; 8]);
    let records = (0..8)
        .map(|i| (gemm(&format!("n0/dev{i}")), record(20)))
        .collect();
    let found = judge_report(&mut report, &records, &HistoryPolicy::default(), NOW);
    assert_eq!(found, 8);
    assert!(
        report.checks[0]
            .entities
            .iter()
            .all(|e| e.verdict == Verdict::Degraded)
    );
    // It informs: the check passes, the run passes, and nothing is a finding.
    assert_eq!(report.checks[0].status, CheckStatus::Passed);
    assert_eq!(report.outcome, Outcome::Passed);
    assert_eq!(report.findings().count(), 0);
    assert_eq!(report.degraded().count(), 8);

    // Off: nothing changes.
    let mut off = self::report(&[85.0; 8]);
    let policy = HistoryPolicy {
        enabled: false,
        ..HistoryPolicy::default()
    };
    assert_eq!(judge_report(&mut off, &records, &policy, NOW), 0);
}

#[test]
fn fail_on_degraded_fails_the_check_and_the_run() {
    let mut report = report(&[85.0, 100.0]);
    let records = (0..2)
        .map(|i| (gemm(&format!("n0/dev{i}")), record(20)))
        .collect();
    let policy = HistoryPolicy {
        fail_on_degraded: true,
        ..HistoryPolicy::default()
    };
    assert_eq!(judge_report(&mut report, &records, &policy, NOW), 1);
    assert_eq!(report.checks[0].status, CheckStatus::Failed);
    assert_eq!(report.outcome, Outcome::Failed);
    let findings: Vec<String> = report
        .findings()
        .map(|(_, f)| f.entity.to_string())
        .collect();
    assert_eq!(findings, ["n0/dev0"]);
    assert_eq!(report.degraded().count(), 0);
}

/// A GPU as a backend that names GPUs by UUID lists it; `on` is set in the group
/// coordinator's list of every node's devices.
fn device_with_uuid(index: u32, uuid: &str, on: Option<&str>) -> DeviceInfo {
    DeviceInfo {
        index,
        name: "H100".into(),
        memory_bytes: None,
        facts: DeviceFacts {
            uuid: Some(uuid.into()),
            ..DeviceFacts::default()
        },
        details: on
            .map(|node| (keys::NODE.to_owned(), node.to_owned()))
            .into_iter()
            .collect(),
    }
}

#[test]
fn a_gpu_is_known_by_its_uuid_on_its_own_node_else_by_node_and_index() {
    let mut report = report(&[100.0]);
    // A backend without UUIDs (cpu, sim): every GPU by node and index.
    assert_eq!(gpu_key(&report, &gpu("n0", 0)).as_deref(), Some("n0/dev0"));
    assert_eq!(gpu_key(&report, &gpu("n1", 0)).as_deref(), Some("n1/dev0"));
    report.devices.push(device_with_uuid(0, "GPU-1234", None));
    assert_eq!(
        gpu_key(&report, &gpu("n0", 0)).as_deref(),
        Some("uuid:GPU-1234")
    );
    assert_eq!(gpu_key(&report, &Entity::Node { node: "n0".into() }), None);
    assert_eq!(wanted(&report), [gemm("uuid:GPU-1234")]);
}

/// On cuda, a member's copy of the group's verdict has another node's GPU 0 but not its
/// UUID: it keeps no record of it, which would be a second one beside the record its
/// own node keeps by UUID. The coordinator's report lists every node's devices, each
/// with its node, and knows every GPU by UUID.
#[test]
fn on_cuda_every_copy_of_a_group_verdict_keys_a_gpu_by_its_uuid_or_not_at_all() {
    let mut member = report(&[100.0]);
    member.checks[0].entities.push(ok(gpu("n1", 0), 100.0));
    member.devices.push(device_with_uuid(0, "GPU-n0-0", None));
    assert_eq!(gpu_key(&member, &gpu("n1", 0)), None);
    assert_eq!(wanted(&member), [gemm("uuid:GPU-n0-0")]);

    let mut coordinator = member.clone();
    coordinator.devices = vec![
        device_with_uuid(0, "GPU-n0-0", Some("n0")),
        device_with_uuid(0, "GPU-n1-0", Some("n1")),
    ];
    assert_eq!(
        wanted(&coordinator),
        [gemm("uuid:GPU-n0-0"), gemm("uuid:GPU-n1-0"),]
    );
    // The devices' own node wins over the report's: `n0`'s GPU 0 is not `n1`'s.
    coordinator.node = "n1".into();
    assert_eq!(
        gpu_key(&coordinator, &gpu("n0", 0)).as_deref(),
        Some("uuid:GPU-n0-0")
    );

    // A member whose GPU is judged against records only when its key is known: the
    // other node's GPU keeps its peers' verdict.
    let records: BTreeMap<_, _> = [(gemm("uuid:GPU-n0-0"), record(20))].into_iter().collect();
    member.checks[0].entities[0].measurement.value = Some(80.0);
    member.checks[0].entities[1].measurement.value = Some(80.0);
    assert_eq!(
        judge_report(&mut member, &records, &HistoryPolicy::default(), NOW),
        1
    );
    assert_eq!(member.checks[0].entities[1].verdict, Verdict::Ok);
}

/// A GPU's record is per workload: the parameters that decide a GEMM's figure (its
/// precision and shape), not how it was run (iterations, library, notes).
#[test]
fn a_record_is_kept_per_workload_and_a_bf16_run_is_not_held_to_fp8s_record() {
    let mut report = report(&[500.0]);
    let params = [
        ("dtype", "bf16"),
        ("m", "8192"),
        ("n", "8192"),
        ("k", "8192"),
        ("iterations", "37"),
        ("library", "cublasLt"),
    ];
    report.checks[0].params = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(
        work_of(&report.checks[0]),
        "dtype=bf16 k=8192 m=8192 n=8192"
    );
    let launch = CheckResult::judged(CheckName::KernelLaunch, CheckStatus::Passed, Vec::new());
    assert_eq!(work_of(&launch), "");

    // Its record at fp8 is twice as fast; the bf16 run is not judged by it.
    let fp8 = RecordKey {
        work: "dtype=fp8 k=8192 m=8192 n=8192".to_owned(),
        ..gemm("n0/dev0")
    };
    let fp8_only: BTreeMap<_, _> = [(fp8, record(20))]
        .into_iter()
        .map(|(key, mut record)| {
            record.values.iter_mut().for_each(|v| *v *= 10.0);
            (key, record)
        })
        .collect();
    assert_eq!(wanted(&report)[0].work, "dtype=bf16 k=8192 m=8192 n=8192");
    assert_eq!(
        judge_report(&mut report, &fp8_only, &HistoryPolicy::default(), NOW),
        0
    );
    assert_eq!(report.checks[0].entities[0].verdict, Verdict::Ok);
    assert!(report.checks[0].entities[0].evidence.history.is_none());
}

#[test]
fn verdict_names_are_stable() {
    for verdict in Verdict::ALL {
        let json = serde_json::to_string(&verdict).unwrap();
        assert_eq!(json, format!("\"{}\"", verdict.as_str()));
    }
}

/// A node judges its own GPUs among a check's results, by the keys its store keeps
/// them under, and leaves another node's alone (it holds no record of them).
#[test]
fn a_node_judges_its_own_gpus_before_it_sends_them() {
    let check = |uuid_backend: bool| {
        let mut result = report(&[85.0, 100.0]).checks.remove(0);
        // Another node's GPU, as slow: no record of it here, so never judged here.
        result.entities.push(ok(gpu("n1", 0), 85.0));
        let devices: Vec<DeviceInfo> = (0..2)
            .map(|index| {
                let mut device = device_with_uuid(index, &format!("GPU-{index}"), None);
                if !uuid_backend {
                    device.facts.uuid = None;
                }
                device
            })
            .collect();
        (result, devices)
    };
    let policy = HistoryPolicy {
        fail_on_degraded: true,
        ..HistoryPolicy::default()
    };
    for uuid_backend in [false, true] {
        let (mut result, devices) = check(uuid_backend);
        let gpus = OwnRecords::gpus("n0", &devices);
        let mut records: BTreeMap<RecordKey, GpuRecord> =
            gpus.iter().map(|gpu| (gemm(gpu), record(20))).collect();
        // Were it judged, n1's GPU would be degraded too.
        records.insert(gemm("n1/dev0"), record(20));
        let own = OwnRecords {
            node: "n0".into(),
            devices,
            records,
            policy,
        };
        assert_eq!(own.judge(&mut result, NOW), 1, "uuid: {uuid_backend}");
        let verdicts: Vec<Verdict> = result.entities.iter().map(|e| e.verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::Degraded, Verdict::Ok, Verdict::Ok],
            "uuid: {uuid_backend}"
        );
        assert_eq!(result.status, CheckStatus::Failed);
        let expected = if uuid_backend {
            ["uuid:GPU-0", "uuid:GPU-1"]
        } else {
            ["n0/dev0", "n0/dev1"]
        };
        assert_eq!(gpus, expected);
    }
}
