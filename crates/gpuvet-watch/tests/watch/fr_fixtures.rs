//! The flight-recorder analyzer on dumps written in torch's format by
//! `tests/fixtures/fr/make_fixtures.py`: 4 and 8 ranks, pickle and JSON, healthy,
//! hung, mismatched, wrapped and with a rank missing.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use gpuvet_model::results::Lane;
use gpuvet_watch::flight_recorder::{
    DumpFormat, EntryState, FrError, FrFindingKind, FrReport, analyze, analyze_dir, load_dir,
    load_dump, summary,
};

fn fixture(format: &str, case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fr")
        .join(format)
        .join(case)
}

fn report(format: &str, case: &str) -> FrReport {
    analyze_dir(&fixture(format, case)).unwrap()
}

/// The culprit, the ranks that waited, the group and the sequence id of the first error.
fn first_error(report: &FrReport) -> (FrFindingKind, Vec<u32>, Vec<u32>, String, u64) {
    let first = report
        .first_error
        .as_ref()
        .unwrap_or_else(|| panic!("no first error in {report:#?}"));
    assert!(first.first_error);
    assert_eq!(report.findings.first(), Some(first));
    (
        first.kind,
        first.ranks.clone(),
        first.waiting_ranks.clone(),
        first.group.clone().unwrap_or_default(),
        first.seq.unwrap_or_default(),
    )
}

fn assert_healthy(report: &FrReport) {
    assert_eq!(report.first_error, None, "{report:#?}");
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
    assert!(report.missing_ranks.is_empty());
    for group in &report.groups {
        assert_eq!(group.first_error, None, "{group:#?}");
        assert!(group.collectives_checked > 0, "{group:#?}");
        assert_eq!(group.last_completed_seq, group.last_seq, "{group:#?}");
    }
}

#[test]
fn hang_names_the_rank_that_never_entered_4_ranks() {
    for format in ["pickle", "json"] {
        let report = report(format, "r4_hang");
        assert_eq!(
            first_error(&report),
            (
                FrFindingKind::NeverEntered,
                vec![2],
                vec![0, 1, 3],
                "0".to_string(),
                8
            ),
            "{format}"
        );
        let first = report.first_error.as_ref().unwrap();
        assert_eq!(first.lane, Lane::App);
        assert_eq!(first.op.as_deref(), Some("nccl:all_reduce"));
        assert_eq!(first.group_desc.as_deref(), Some("default_pg"));
        assert_eq!(report.findings.len(), 1, "{:#?}", report.findings);
    }
}

#[test]
fn hang_names_the_rank_that_never_entered_8_ranks() {
    for format in ["pickle", "json"] {
        let report = report(format, "r8_hang");
        assert_eq!(
            first_error(&report),
            (
                FrFindingKind::NeverEntered,
                vec![6],
                vec![0, 1, 2, 3, 4, 5, 7],
                "0".to_string(),
                3
            ),
            "{format}"
        );
        // The tensor-parallel groups were healthy up to their last collective.
        for group in report.groups.iter().filter(|g| g.name != "0") {
            assert_eq!(group.first_error, None, "{group:#?}");
        }
    }
}

#[test]
fn size_mismatch_names_the_odd_rank() {
    for format in ["pickle", "json"] {
        let report = report(format, "r4_mismatch");
        assert_eq!(
            first_error(&report),
            (
                FrFindingKind::SizeMismatch,
                vec![1],
                vec![0, 2, 3],
                "0".to_string(),
                6
            ),
            "{format}"
        );
        let message = &report.first_error.as_ref().unwrap().message;
        assert!(
            message.contains("[[1024]]") && message.contains("[[2048]]"),
            "{message}"
        );
    }
}

#[test]
fn dtype_mismatch_names_the_odd_rank() {
    let report = report("pickle", "r8_mismatch");
    let (kind, ranks, waiting, group, seq) = first_error(&report);
    assert_eq!(
        (kind, ranks, group, seq),
        (FrFindingKind::DtypeMismatch, vec![5], "0".to_string(), 2)
    );
    assert_eq!(waiting, vec![0, 1, 2, 3, 4, 6, 7]);
    let message = &report.first_error.as_ref().unwrap().message;
    assert!(message.contains("BFloat16"), "{message}");
}

#[test]
fn missing_dump_names_the_missing_rank_4_ranks() {
    for format in ["pickle", "json"] {
        let report = report(format, "r4_missing");
        assert_eq!(report.missing_ranks, vec![3], "{format}");
        assert_eq!(report.expected_ranks, vec![0, 1, 2, 3]);
        assert_eq!(
            first_error(&report),
            (
                FrFindingKind::MissingDump,
                vec![3],
                vec![0, 1, 2],
                "0".to_string(),
                7
            ),
            "{format}"
        );
        assert_eq!(report.first_error.as_ref().unwrap().lane, Lane::Platform);
    }
}

#[test]
fn missing_dump_is_the_origin_of_the_ranks_blocked_behind_it_8_ranks() {
    let report = report("pickle", "r8_missing");
    assert_eq!(report.missing_ranks, vec![6]);
    assert_eq!(
        first_error(&report),
        (
            FrFindingKind::MissingDump,
            vec![6],
            vec![4, 5, 7],
            "2".to_string(),
            4
        )
    );
    // Ranks 4, 5 and 7 then never entered the data-parallel all-reduce (and rank 3
    // waits in a send to rank 4): reported, but not as the first error.
    let downstream = report
        .findings
        .iter()
        .find(|f| f.group.as_deref() == Some("0"))
        .unwrap();
    assert_eq!(downstream.kind, FrFindingKind::NeverEntered);
    assert_eq!(downstream.ranks, vec![3, 4, 5, 7]);
    assert!(!downstream.first_error);
    assert!(
        downstream.message.contains("wait in process group `2`"),
        "{}",
        downstream.message
    );
}

#[test]
fn wrapped_hang_finds_the_origin_across_groups() {
    let report = report("pickle", "r8_wrapped_hang");
    assert_eq!(
        first_error(&report),
        (
            FrFindingKind::NeverEntered,
            vec![5],
            vec![4, 6, 7],
            "2".to_string(),
            3
        )
    );
    let starts: BTreeSet<Option<u64>> = report.dumps.iter().map(|d| d.first_record_id).collect();
    assert!(starts.len() > 1, "{:#?}", report.dumps);
    assert_eq!(report.findings.iter().filter(|f| f.first_error).count(), 1);
}

#[test]
fn healthy_dumps_have_no_culprit() {
    for format in ["pickle", "json"] {
        let report = report(format, "r4_healthy");
        assert_healthy(&report);
        assert_eq!(report.dumps.len(), 4);
        assert_eq!(report.groups.len(), 2);
    }
}

#[test]
fn wrapped_ring_buffers_are_aligned_without_a_false_missing() {
    for (format, case) in [
        ("pickle", "r4_wrapped"),
        ("json", "r4_wrapped"),
        ("pickle", "r8_wrapped"),
    ] {
        let report = report(format, case);
        assert_healthy(&report);
        // The buffers really start at different record ids.
        let starts: BTreeSet<Option<u64>> =
            report.dumps.iter().map(|d| d.first_record_id).collect();
        assert!(starts.len() > 1, "{case}: {:#?}", report.dumps);
    }
}

#[test]
fn pickle_and_json_agree() {
    for case in [
        "r4_healthy",
        "r4_hang",
        "r4_mismatch",
        "r4_wrapped",
        "r4_missing",
        "r8_hang",
    ] {
        let pickle = report("pickle", case);
        let json = report("json", case);
        let outline = |report: &FrReport| {
            report
                .groups
                .iter()
                .map(|g| {
                    let error = g.first_error.as_ref().map(|e| {
                        (
                            e.kind,
                            e.seq,
                            e.culprit_ranks.clone(),
                            e.waiting_ranks.clone(),
                        )
                    });
                    (
                        g.name.clone(),
                        g.ranks.clone(),
                        g.aligned_from_seq,
                        g.last_completed_seq,
                        error,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(outline(&pickle), outline(&json), "{case}");
        assert!(pickle.dumps.iter().all(|d| d.format == DumpFormat::Pickle));
        assert!(json.dumps.iter().all(|d| d.format == DumpFormat::Json));
    }
}

#[test]
fn dump_fields_are_read_from_pickle_and_json() {
    let pickle = load_dump(&fixture("pickle", "r4_hang").join("nccl_trace_rank_1")).unwrap();
    let json = load_dump(&fixture("json", "r4_hang").join("nccl_trace_rank_1.json")).unwrap();
    for dump in [&pickle, &json] {
        assert_eq!(dump.rank, 1);
        assert_eq!(dump.version.as_deref(), Some("2.10"));
        assert_eq!(dump.pg_config["0"].ranks, Some(vec![0, 1, 2, 3]));
        assert_eq!(dump.pg_config["1"].desc, "tp");
        assert_eq!(dump.pg_status["0"].last_completed_collective, Some(7));
        assert_eq!(dump.skipped_entries, 0);
        let last = dump.entries.last().unwrap();
        assert_eq!(
            (last.pg_name.as_str(), last.pg_desc.as_str()),
            ("0", "default_pg")
        );
        assert_eq!(last.collective_seq_id, 8);
        assert_eq!(last.profiling_name, "nccl:all_reduce");
        assert_eq!(last.state, EntryState::Started);
        assert_eq!(last.input_sizes, vec![vec![2048]]);
        assert_eq!(last.input_dtypes, vec!["Float".to_string()]);
        assert_eq!(last.time_discovered_completed_ns, None);
        assert!(last.time_discovered_started_ns.is_some());
        assert_eq!(last.timeout_ms, Some(600_000));
        assert!(!last.is_p2p && !last.retired);
        // The coalesced launch: three entries under one sequence id.
        assert_eq!(
            dump.entries
                .iter()
                .filter(|e| e.collective_seq_id == 3)
                .count(),
            3
        );
    }
    assert_eq!(pickle.format, DumpFormat::Pickle);
    assert_eq!(
        pickle.entries.last().unwrap().frames[0].filename,
        "train.py"
    );
    // torch's JSON variant carries no stack frames.
    assert!(json.entries.last().unwrap().frames.is_empty());
}

#[test]
fn summary_names_the_culprit_and_the_waiting_ranks() {
    let text = summary(&report("pickle", "r4_hang"));
    assert!(
        text.starts_with("flight recorder: 4 dumps (ranks 0-3; pickle, version 2.10)"),
        "{text}"
    );
    assert!(
        text.contains(
            "first error: [app] rank 2 never entered nccl:all_reduce (seq 8) in process group `0` \
             (default_pg); ranks 0, 1, 3 entered it and wait (waiting at train_step at train.py:42)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "`0` (default_pg), ranks 0-3, seq 1..8: never_entered at seq 8, culprit rank 2"
        ),
        "{text}"
    );

    let healthy = summary(&report("json", "r4_healthy"));
    assert!(healthy.contains("first error: none"), "{healthy}");

    let missing = summary(&report("pickle", "r8_missing"));
    assert!(missing.contains("; no dump from rank 6"), "{missing}");
}

#[test]
fn report_serializes() {
    let value = serde_json::to_value(report("pickle", "r4_mismatch")).unwrap();
    assert_eq!(value["first_error"]["kind"], "size_mismatch");
    assert_eq!(value["first_error"]["ranks"], serde_json::json!([1]));
    assert_eq!(value["first_error"]["lane"], "app");
    assert!(value["groups"].as_array().unwrap().len() == 2);
}

#[test]
fn analyze_takes_dumps_in_any_order() {
    let mut dumps = load_dir(&fixture("pickle", "r8_hang"), Some("nccl_trace_rank_")).unwrap();
    dumps.reverse();
    let report = analyze(&dumps);
    assert_eq!(report.first_error.unwrap().ranks, vec![6]);
}

#[test]
fn directory_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let error = load_dir(dir.path(), None).unwrap_err();
    assert!(matches!(error, FrError::NoDumps { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains(&format!("`{}`", dir.path().display())),
        "{error}"
    );

    fs::write(dir.path().join("trace_a_0"), b"x").unwrap();
    fs::write(dir.path().join("trace_b_0"), b"x").unwrap();
    let error = load_dir(dir.path(), None).unwrap_err();
    assert!(
        matches!(error, FrError::AmbiguousPrefix { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("`trace_a_`, `trace_b_`"),
        "{error}"
    );

    let error = load_dir(dir.path(), Some("trace_a_")).unwrap_err();
    assert!(matches!(error, FrError::Pickle { .. }), "{error:?}");
    assert!(error.to_string().contains("trace_a_0`"), "{error}");

    fs::write(dir.path().join("trace_b_0"), b"{\"entries\": [").unwrap();
    let error = load_dir(dir.path(), Some("trace_b_")).unwrap_err();
    assert!(matches!(error, FrError::Json { .. }), "{error:?}");

    fs::write(dir.path().join("trace_b_0"), b"[1, 2]").unwrap();
    let error = load_dir(dir.path(), Some("trace_b_")).unwrap_err();
    assert!(matches!(error, FrError::NotADump { .. }), "{error:?}");

    let error = load_dir(&dir.path().join("absent"), None).unwrap_err();
    assert!(matches!(error, FrError::ReadDir { .. }), "{error:?}");
}

#[test]
fn two_files_for_one_rank_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("json", "r4_healthy").join("nccl_trace_rank_0.json");
    fs::copy(&source, dir.path().join("nccl_trace_rank_0.json")).unwrap();
    fs::copy(&source, dir.path().join("nccl_trace_rank_00.json")).unwrap();
    let error = load_dir(dir.path(), None).unwrap_err();
    assert!(
        matches!(error, FrError::DuplicateRank { rank: 0, .. }),
        "{error:?}"
    );
}
