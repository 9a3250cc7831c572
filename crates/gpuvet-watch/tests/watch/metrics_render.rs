//! The `/metrics` exposition: dcgm-exporter names and labels, HELP and TYPE lines,
//! label escaping, gauges that follow the latest sample, counters that only go up, a
//! stable order, and a watcher fed by a fake source (samples, an XID flood, a
//! node-wide burst, a failed poll and a hung probe) ending with the right values.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuvet_model::results::Lane;
use gpuvet_watch::health::{
    EccCounts, FakeSource, FakeStep, GpuSample, HealthReading, NvLinkCounters, NvLinkState,
    RecoveryAction, RemappedRows, RetiredPages, Watcher, WatcherConfig,
};
use gpuvet_watch::metrics::Metrics;
use gpuvet_watch::policy::{GpuId, RuntimeFinding, Severity, XidObservation};
use gpuvet_watch::xid::ActionClass;

const T0: u64 = 1_764_000_000_000;

/// One parsed series line.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A strict reader of the text format as gpuvet writes it: every family has one HELP
/// and one TYPE line before its series, series of one family are contiguous, and
/// label values are unescaped. Panics on anything else.
fn parse(text: &str) -> (Vec<Series>, BTreeMap<String, String>) {
    let mut series = Vec::new();
    let mut types = BTreeMap::new();
    let mut helped = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap().to_owned();
            assert!(helped.insert(name.clone()), "two HELP lines for {name}");
            assert!(!types.contains_key(&name), "HELP after TYPE for {name}");
            current = Some(name);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(current.as_deref(), Some(name), "TYPE without HELP: {line}");
            assert!(["gauge", "counter"].contains(&kind), "{line}");
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "two TYPE lines for {name}"
            );
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let (head, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}').unwrap())),
            None => (head, BTreeMap::new()),
        };
        assert_eq!(
            current.as_deref(),
            Some(name),
            "series outside its family: {line}"
        );
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':'),
            "{name}"
        );
        series.push(Series {
            name: name.to_owned(),
            labels,
            value: value.parse().unwrap(),
        });
    }
    (series, types)
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'));
        let mut value = String::new();
        loop {
            match chars.next().expect("unterminated label value") {
                '"' => break,
                '\\' => match chars.next().unwrap() {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => panic!("bad escape \\{c}"),
                },
                '\n' => panic!("raw newline in a label value"),
                c => value.push(c),
            }
        }
        assert!(out.insert(key, value).is_none(), "duplicate label in {s}");
        match chars.next() {
            None | Some(',') => {}
            Some(c) => panic!("unexpected {c:?} in {s}"),
        }
    }
    out
}

/// The value of the one series named `name` whose labels include `labels`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (series, _) = parse(text);
    let hits: Vec<&Series> = series
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?} matches {hits:#?}");
    hits.first().map(|s| s.value)
}

fn gpu(i: u32) -> GpuId {
    GpuId::new(Some(i), Some(&format!("0000:{:02x}:00", 0x18 + i * 0x10)))
}

fn full_sample(i: u32, temp: u32) -> GpuSample {
    GpuSample {
        gpu: gpu(i),
        time_ms: T0,
        temperature_c: Some(temp),
        power_mw: Some(312_500),
        ecc: EccCounts {
            volatile_corrected: Some(3),
            volatile_uncorrected: Some(0),
            aggregate_corrected: Some(40),
            aggregate_uncorrected: Some(1),
        },
        remapped_rows: Some(RemappedRows {
            correctable: 2,
            uncorrectable: 1,
            pending: true,
            failure: false,
        }),
        retired_pages: Some(RetiredPages {
            single_bit: 5,
            double_bit: 1,
            pending: false,
        }),
        clock_event_reasons: Some(0x8 | 0x40 | 0x1000),
        pcie_replays: Some(7),
        pcie_link_width: Some(16),
        nvlink: NvLinkCounters {
            links: vec![
                NvLinkState {
                    link: 1,
                    active: false,
                },
                NvLinkState {
                    link: 0,
                    active: true,
                },
            ],
            crc_flit_total: Some(11),
            crc_data_total: Some(12),
            replay_total: Some(13),
            recovery_total: Some(14),
        },
        recovery_action: Some(RecoveryAction::DrainAndReset),
    }
}

#[test]
fn a_full_sample_renders_dcgm_exporter_names_types_and_labels() {
    let m = Metrics::new();
    m.observe_sample(&full_sample(0, 65));
    let text = m.render();
    let (series, types) = parse(&text);

    let expect = [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", 65.0),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", 312.5),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", 3.0),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", 0.0),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", 40.0),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", 1.0),
        ("DCGM_FI_DEV_RETIRED_SBE", "counter", 5.0),
        ("DCGM_FI_DEV_RETIRED_DBE", "counter", 1.0),
        ("DCGM_FI_DEV_RETIRED_PENDING", "gauge", 0.0),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", 2.0),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", 1.0),
        ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", 1.0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", 0.0),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", 7.0),
        ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", 16.0),
        (
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "counter",
            11.0,
        ),
        (
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            "counter",
            12.0,
        ),
        (
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "counter",
            13.0,
        ),
        (
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
            "counter",
            14.0,
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "gauge",
            (0x8 | 0x40 | 0x1000) as f64,
        ),
        ("DCGM_FI_DEV_GPU_RECOVERY_ACTION", "gauge", 4.0),
    ];
    let labels = [
        ("gpu", "0"),
        ("pci_bus_id", "0000:18:00"),
        ("device", "nvidia0"),
    ];
    for (name, kind, v) in expect {
        assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
        assert_eq!(value(&text, name, &labels), Some(v), "{name}");
    }
    // No Hostname unless asked for, and no UUID: gpuvet does not know it.
    let temp = series
        .iter()
        .find(|s| s.name == "DCGM_FI_DEV_GPU_TEMP")
        .unwrap();
    assert_eq!(
        temp.labels.keys().map(String::as_str).collect::<Vec<_>>(),
        ["device", "gpu", "pci_bus_id"]
    );

    // Per-reason 0/1 gauges for combined bits, unknown bits included.
    let reason = |r: &str| {
        value(
            &text,
            "gpuvet_clock_event_reason",
            &[("gpu", "0"), ("reason", r)],
        )
    };
    assert_eq!(reason("HW_SLOWDOWN"), Some(1.0));
    assert_eq!(reason("HW_THERMAL"), Some(1.0));
    assert_eq!(reason("UNKNOWN"), Some(1.0));
    assert_eq!(reason("SW_POWER_CAP"), Some(0.0));
    assert_eq!(reason("GPU_IDLE"), Some(0.0));
    let reasons = series
        .iter()
        .filter(|s| s.name == "gpuvet_clock_event_reason")
        .count();
    assert_eq!(reasons, 10, "9 NVML reasons and UNKNOWN");

    let link = |l: &str| value(&text, "gpuvet_nvlink_link_active", &[("link", l)]);
    assert_eq!((link("0"), link("1")), (Some(1.0), Some(0.0)));
    assert_eq!(value(&text, "gpuvet_gpu_lost", &[("gpu", "0")]), Some(0.0));
    assert_eq!(types["gpuvet_watch_up"], "gauge");
    assert_eq!(value(&text, "gpuvet_watch_up", &[]), Some(0.0));
    assert_eq!(types["gpuvet_watch_polls_total"], "counter");
    assert_eq!(value(&text, "gpuvet_watch_polls_total", &[]), Some(0.0));
    assert_eq!(
        value(&text, "gpuvet_watch_probe_hung_total", &[]),
        Some(0.0)
    );
}

#[test]
fn missing_readings_are_left_out_not_zeroed() {
    let m = Metrics::new();
    m.observe_sample(&GpuSample {
        gpu: gpu(0),
        temperature_c: Some(50),
        ..GpuSample::default()
    });
    let text = m.render();
    assert_eq!(
        value(&text, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "0")]),
        Some(50.0)
    );
    for absent in [
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gpuvet_clock_event_reason",
        "gpuvet_nvlink_link_active",
        "gpuvet_xid_events_total",
        "gpuvet_watch_last_poll_timestamp_seconds",
    ] {
        assert!(!text.contains(absent), "{absent} in\n{text}");
    }
}

#[test]
fn label_values_and_help_are_escaped() {
    let m = Metrics::new().with_hostname("node\\a \"b\"\nc");
    m.observe_sample(&full_sample(0, 60));
    m.observe_source_error("weird \"src\"\\\n");
    let text = m.render();
    assert!(text.contains(r#"Hostname="node\\a \"b\"\nc""#), "{text}");
    assert!(text.contains(r#"source="weird \"src\"\\\n""#), "{text}");
    // The strict reader gets the raw values back.
    assert_eq!(
        value(
            &text,
            "gpuvet_watch_source_errors_total",
            &[
                ("source", "weird \"src\"\\\n"),
                ("Hostname", "node\\a \"b\"\nc")
            ]
        ),
        Some(1.0)
    );
    // One line per series: no raw newline leaked.
    let (series, _) = parse(&text);
    let lines = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(lines, series.len());
}

#[test]
fn gauges_follow_the_latest_sample_and_a_lost_gpu_drops_them() {
    let m = Metrics::new();
    m.observe_sample(&full_sample(0, 60));
    let mut next = full_sample(0, 71);
    next.nvlink.links.clear(); // links are read every few polls only
    next.clock_event_reasons = Some(0x4);
    m.observe_sample(&next);
    let text = m.render();
    assert_eq!(
        value(&text, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "0")]),
        Some(71.0)
    );
    assert_eq!(
        value(&text, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", &[("gpu", "0")]),
        Some(4.0)
    );
    let reason = |r: &str| {
        value(
            &text,
            "gpuvet_clock_event_reason",
            &[("gpu", "0"), ("reason", r)],
        )
    };
    assert_eq!(reason("HW_SLOWDOWN"), Some(0.0));
    assert_eq!(reason("SW_POWER_CAP"), Some(1.0));
    // Link states carried over from the sample that had them.
    assert_eq!(
        value(&text, "gpuvet_nvlink_link_active", &[("link", "1")]),
        Some(0.0)
    );

    m.observe_reading(&HealthReading::GpuError {
        gpu: gpu(0),
        time_ms: T0,
        call: "temperature".into(),
        error: "GPU is lost".into(),
        lost: true,
    });
    let text = m.render();
    assert_eq!(value(&text, "gpuvet_gpu_lost", &[("gpu", "0")]), Some(1.0));
    assert_eq!(value(&text, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "0")]), None);

    // A GPU that answers again is back.
    m.observe_sample(&full_sample(0, 55));
    let text = m.render();
    assert_eq!(value(&text, "gpuvet_gpu_lost", &[("gpu", "0")]), Some(0.0));
    assert_eq!(
        value(&text, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "0")]),
        Some(55.0)
    );
}

#[test]
fn an_index_only_gpu_joins_its_inventory_entry() {
    let m = Metrics::new();
    m.observe_sample(&GpuSample {
        gpu: GpuId::index(3),
        temperature_c: Some(40),
        ..GpuSample::default()
    });
    m.observe_reading(&HealthReading::Inventory { gpus: vec![gpu(3)] });
    m.observe_sample(&GpuSample {
        gpu: GpuId::index(3),
        temperature_c: Some(41),
        ..GpuSample::default()
    });
    let text = m.render();
    let (series, _) = parse(&text);
    let temps: Vec<&Series> = series
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_GPU_TEMP")
        .collect();
    assert_eq!(temps.len(), 1, "{temps:#?}");
    assert_eq!(temps[0].labels["pci_bus_id"], "0000:48:00");
    assert_eq!(temps[0].value, 41.0);
}

fn xid_finding(g: u32, xid: u32, count: u64) -> RuntimeFinding {
    RuntimeFinding {
        xid: Some(xid),
        count,
        boot_id: "boot-a".into(),
        ..RuntimeFinding::condition(
            "kmsg",
            "xid".into(),
            Some(gpu(g)),
            Lane::Host,
            ActionClass::ResetGpu,
            T0,
            "x".into(),
        )
    }
}

#[test]
fn counters_only_go_up() {
    let m = Metrics::new();
    let f = xid_finding(1, 79, 5);
    m.observe_findings(std::slice::from_ref(&f));
    m.observe_snapshot(std::slice::from_ref(&f));
    let xid = |m: &Metrics| {
        value(
            &m.render(),
            "gpuvet_xid_events_total",
            &[("gpu", "1"), ("xid", "79")],
        )
    };
    assert_eq!(xid(&m), Some(5.0));

    // A later snapshot with more lines raises it; one with fewer does not lower it.
    m.observe_snapshot(&[xid_finding(1, 79, 9)]);
    assert_eq!(xid(&m), Some(9.0));
    m.observe_snapshot(&[xid_finding(1, 79, 2)]);
    assert_eq!(xid(&m), Some(9.0));
    // Another boot's record adds to the same series.
    let mut other_boot = xid_finding(1, 79, 4);
    other_boot.boot_id = "boot-b".into();
    m.observe_snapshot(&[other_boot]);
    assert_eq!(xid(&m), Some(13.0));

    // Every reported finding counts once per report, by check, lane, severity, action.
    m.observe_findings(&[f.clone().with_severity(Severity::Fail)]);
    let text = m.render();
    let findings = |sev: &str| {
        value(
            &text,
            "gpuvet_runtime_findings_total",
            &[
                ("check", "xid"),
                ("lane", "host"),
                ("severity", sev),
                ("action", "reset_gpu"),
            ],
        )
    };
    assert_eq!(findings("fail"), Some(2.0));

    let mut last = 0.0;
    for i in 0..5 {
        m.observe_poll(T0 + i * 1000);
        let polls = value(&m.render(), "gpuvet_watch_polls_total", &[]).unwrap();
        assert!(polls > last);
        last = polls;
    }
    assert_eq!(
        value(&m.render(), "gpuvet_watch_last_poll_timestamp_seconds", &[]),
        Some((T0 + 4000) as f64 / 1000.0)
    );
}

#[test]
fn order_is_stable_whatever_the_order_of_updates() {
    let a = Metrics::new();
    let b = Metrics::new();
    for i in [3, 0, 2, 1] {
        a.observe_sample(&full_sample(i, 60 + i));
    }
    for i in [1, 2, 0, 3] {
        b.observe_sample(&full_sample(i, 60 + i));
    }
    let fs = [
        xid_finding(2, 79, 1),
        xid_finding(0, 48, 2),
        xid_finding(0, 13, 3),
    ];
    a.observe_snapshot(&fs);
    b.observe_snapshot(&[fs[2].clone(), fs[1].clone(), fs[0].clone()]);
    a.observe_source_error("kmsg");
    a.observe_source_error("nvml");
    b.observe_source_error("nvml");
    b.observe_source_error("kmsg");
    assert_eq!(a.render(), b.render());
    assert_eq!(a.render(), a.render());

    let (series, _) = parse(&a.render());
    let gpus: Vec<&str> = series
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_GPU_TEMP")
        .map(|s| s.labels["gpu"].as_str())
        .collect();
    assert_eq!(gpus, ["0", "1", "2", "3"]);
}

fn obs(g: u32, xid: u32) -> HealthReading {
    HealthReading::Xid(XidObservation {
        gpu: gpu(g),
        xid,
        time_ms: 0,
        boot_id: String::new(),
        pid: Some(4242),
        text: "test".into(),
        source: "kmsg".into(),
    })
}

fn samples(temp: u32) -> Vec<HealthReading> {
    (0..8)
        .map(|i| HealthReading::Gpu(full_sample(i, temp + i)))
        .collect()
}

#[test]
fn a_watcher_with_a_fake_source_and_an_xid_flood_ends_with_the_right_values() {
    let inventory = HealthReading::Inventory {
        gpus: (0..8).map(gpu).collect(),
    };
    let mut step1 = vec![inventory];
    step1.extend(samples(60));
    step1.extend((0..5_000).map(|_| obs(2, 95)));
    let mut step2 = samples(61);
    step2.extend((0..5_000).map(|_| obs(2, 95)));
    let mut step4 = samples(62);
    step4.push(HealthReading::ProbeHung {
        source: "nvml".into(),
        time_ms: 0,
        hung_ms: 5_000,
        skipped_polls: 1,
    });
    // More lines of the same incident after its finding, and XID 13 on every GPU.
    let mut step5 = samples(63);
    step5.extend((0..7).map(|_| obs(2, 95)));
    step5.extend((0..8).map(|g| obs(g, 13)));
    let fake = FakeSource::new("nvml")
        .then(FakeStep::Readings(step1))
        .then(FakeStep::Readings(step2))
        .then(FakeStep::Error("driver busy".into()))
        .then(FakeStep::Readings(step4))
        .then(FakeStep::Readings(step5))
        .idle(samples(64))
        .stamp_with_poll_time();

    let metrics = Arc::new(Metrics::new().with_hostname("node-1"));
    let mut w = Watcher::new(WatcherConfig {
        boot_id: "boot-a".into(),
        ..WatcherConfig::default()
    })
    .with_source(fake)
    .with_metrics(Arc::clone(&metrics));

    let mut findings = Vec::new();
    for i in 0..8 {
        findings.extend(w.step(T0 + i * 1_000));
    }
    findings.extend(w.flush());

    let text = metrics.render();
    let xid95: Vec<&RuntimeFinding> = findings.iter().filter(|f| f.xid == Some(95)).collect();
    assert_eq!(xid95.len(), 1, "{findings:#?}");
    assert_eq!(xid95[0].count, 10_000, "the flood is one finding");
    assert_eq!(
        value(
            &text,
            "gpuvet_xid_events_total",
            &[
                ("gpu", "2"),
                ("pci_bus_id", "0000:38:00"),
                ("xid", "95"),
                ("Hostname", "node-1")
            ]
        ),
        Some(10_007.0),
        "every line counts, also those after the finding"
    );
    // The burst on all 8 GPUs is node-wide: no per-GPU series for it.
    assert!(
        findings
            .iter()
            .any(|f| f.check == "xid.node_wide" && f.xid == Some(13))
    );
    assert_eq!(
        value(&text, "gpuvet_xid_node_wide_events_total", &[("xid", "13")]),
        Some(8.0)
    );
    assert_eq!(
        value(
            &text,
            "gpuvet_xid_events_total",
            &[("gpu", "0"), ("xid", "13")]
        ),
        None
    );

    // The findings counter matches what the watcher returned, label by label.
    let mut by_labels: BTreeMap<(String, &str, &str, &str), f64> = BTreeMap::new();
    for f in &findings {
        *by_labels
            .entry((
                f.check.to_string(),
                f.lane.as_str(),
                f.severity.as_str(),
                f.action.as_str(),
            ))
            .or_default() += 1.0;
    }
    let (series, _) = parse(&text);
    let rendered: BTreeMap<(String, &str, &str, &str), f64> = series
        .iter()
        .filter(|s| s.name == "gpuvet_runtime_findings_total")
        .map(|s| {
            let l = |k: &str| s.labels[k].as_str();
            (
                (l("check").to_owned(), l("lane"), l("severity"), l("action")),
                s.value,
            )
        })
        .collect();
    assert_eq!(rendered, by_labels);
    assert!(by_labels.contains_key(&("probe.hung".to_owned(), "host", "warn", "contact_support")));
    assert!(by_labels.keys().any(|k| k.0 == "source.error.nvml"));

    // Gauges hold the last sample: 64 + index at the idle steps.
    for g in 0..8u32 {
        let idx = g.to_string();
        assert_eq!(
            value(&text, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", idx.as_str())]),
            Some(f64::from(64 + g))
        );
    }
    assert_eq!(value(&text, "gpuvet_watch_polls_total", &[]), Some(8.0));
    assert_eq!(
        value(
            &text,
            "gpuvet_watch_source_errors_total",
            &[("source", "nvml")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "gpuvet_watch_probe_hung_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "gpuvet_watch_last_poll_timestamp_seconds", &[]),
        Some((T0 + 7_000) as f64 / 1000.0)
    );
}

#[test]
fn a_spawned_watcher_is_up_until_stopped() {
    let fake = FakeSource::new("nvml")
        .idle(vec![HealthReading::Gpu(full_sample(0, 60))])
        .stamp_with_poll_time();
    let metrics = Arc::new(Metrics::new());
    let mut w = Watcher::new(WatcherConfig {
        boot_id: "boot-a".into(),
        interval: Duration::from_millis(10),
        ..WatcherConfig::default()
    })
    .with_source(fake);
    w.set_metrics(Arc::clone(&metrics));
    let handle = w.spawn(|_| {}).unwrap();

    // Anti-hang bound only.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let polls = value(&metrics.render(), "gpuvet_watch_polls_total", &[]).unwrap();
        if polls >= 2.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the watcher never stepped");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(value(&metrics.render(), "gpuvet_watch_up", &[]), Some(1.0));
    let w = handle.stop().expect("the watcher thread ended cleanly");
    assert!(w.steps() >= 2);
    let text = metrics.render();
    assert_eq!(value(&text, "gpuvet_watch_up", &[]), Some(0.0));
    assert_eq!(
        value(&text, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "0")]),
        Some(60.0)
    );
}
