//! Health readings → findings, with fake samples: throttle bits, ECC, remaps, retired
//! pages, recovery actions, temperature, NVLink and PCIe rates, lost GPUs.

use gpuvet_model::results::Lane;
use gpuvet_watch::health::{
    EccCounts, FakeSource, FakeStep, GpuSample, HealthReading, HealthThresholds, NvLinkCounters,
    NvLinkState, RecoveryAction, RemappedRows, RetiredPages, Watcher, WatcherConfig,
    evaluate_reading, evaluate_sample,
};
use gpuvet_watch::policy::{GpuId, RuntimeFinding, Severity};
use gpuvet_watch::xid::ActionClass;

const T0: u64 = 1_764_000_000_000;

fn sample(t: u64) -> GpuSample {
    GpuSample {
        gpu: GpuId::new(Some(0), Some("0000:18:00")),
        time_ms: t,
        ..GpuSample::default()
    }
}

fn eval(prev: Option<&GpuSample>, cur: &GpuSample) -> Vec<RuntimeFinding> {
    evaluate_sample(prev, cur, &HealthThresholds::default())
}

fn checks(f: &[RuntimeFinding]) -> Vec<(&str, Severity)> {
    f.iter().map(|f| (f.check.as_str(), f.severity)).collect()
}

#[test]
fn combined_throttle_bits_yield_every_fault() {
    // SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
    let s = GpuSample {
        clock_event_reasons: Some(0x4 | 0x8 | 0x20 | 0x40 | 0x80),
        ..sample(T0)
    };
    let f = eval(None, &s);
    assert_eq!(
        checks(&f),
        vec![
            ("throttle.hw_slowdown", Severity::Fail),
            ("throttle.sw_thermal", Severity::Fail),
            ("throttle.hw_thermal", Severity::Fail),
            ("throttle.hw_power_brake", Severity::Warn),
        ]
    );
    assert!(
        f[0].message
            .contains("SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE"),
        "{}",
        f[0].message
    );
    assert!(f.iter().all(|f| f.lane == Lane::Host));

    // Normal operation bits are not findings.
    let s = GpuSample {
        clock_event_reasons: Some(0x1 | 0x2 | 0x4 | 0x10 | 0x100),
        ..sample(T0)
    };
    assert!(eval(None, &s).is_empty());
}

#[test]
fn ecc_remaps_and_retired_pages() {
    let s = GpuSample {
        ecc: EccCounts {
            volatile_uncorrected: Some(1),
            volatile_corrected: Some(500),
            ..EccCounts::default()
        },
        remapped_rows: Some(RemappedRows {
            correctable: 3,
            uncorrectable: 512,
            pending: true,
            failure: true,
        }),
        retired_pages: Some(RetiredPages {
            single_bit: 60,
            double_bit: 3,
            pending: true,
        }),
        ..sample(T0)
    };
    let f = eval(None, &s);
    assert_eq!(
        checks(&f),
        vec![
            ("ecc.volatile_uncorrected", Severity::Fail),
            ("remap.failure", Severity::Fail),
            ("remap.pending", Severity::Warn),
            ("remap.uncorrectable", Severity::Warn),
            ("retired_pages", Severity::Fail),
            ("retired_pages.pending", Severity::Warn),
        ]
    );
    assert_eq!(f[0].action, ActionClass::ResetGpu);

    let ok = GpuSample {
        ecc: EccCounts {
            volatile_uncorrected: Some(0),
            aggregate_uncorrected: Some(2),
            ..EccCounts::default()
        },
        remapped_rows: Some(RemappedRows {
            correctable: 10,
            uncorrectable: 511,
            ..RemappedRows::default()
        }),
        retired_pages: Some(RetiredPages {
            single_bit: 62,
            double_bit: 0,
            pending: false,
        }),
        ..sample(T0)
    };
    assert!(eval(None, &ok).is_empty());
    // A lifetime count that rises while we watch is new damage.
    let later = GpuSample {
        ecc: EccCounts {
            aggregate_uncorrected: Some(3),
            ..ok.ecc.clone()
        },
        ..sample(T0 + 1_000)
    };
    assert_eq!(
        checks(&eval(Some(&ok), &later)),
        vec![("ecc.aggregate_uncorrected_increase", Severity::Fail)]
    );
}

#[test]
fn recovery_actions_follow_dcgm() {
    for (a, action, sev) in [
        (
            RecoveryAction::GpuReset,
            ActionClass::ResetGpu,
            Severity::Fail,
        ),
        (
            RecoveryAction::NodeReboot,
            ActionClass::RebootNode,
            Severity::Fail,
        ),
        (
            RecoveryAction::DrainAndReset,
            ActionClass::ResetGpu,
            Severity::Fail,
        ),
        (
            RecoveryAction::DrainP2p,
            ActionClass::ResetGpu,
            Severity::Warn,
        ),
        (
            RecoveryAction::Other(7),
            ActionClass::ContactSupport,
            Severity::Warn,
        ),
    ] {
        let f = eval(
            None,
            &GpuSample {
                recovery_action: Some(a),
                ..sample(T0)
            },
        );
        assert_eq!(f.len(), 1, "{a:?}");
        assert_eq!(
            (f[0].check.as_str(), f[0].action, f[0].severity),
            ("recovery_action", action, sev),
            "{a:?}"
        );
    }
    assert!(
        eval(
            None,
            &GpuSample {
                recovery_action: Some(RecoveryAction::None),
                ..sample(T0)
            }
        )
        .is_empty()
    );
}

#[test]
fn temperature_limit() {
    assert!(
        eval(
            None,
            &GpuSample {
                temperature_c: Some(85),
                ..sample(T0)
            }
        )
        .is_empty()
    );
    let f = eval(
        None,
        &GpuSample {
            temperature_c: Some(86),
            ..sample(T0)
        },
    );
    assert_eq!(checks(&f), vec![("temperature", Severity::Warn)]);
    assert_eq!((f[0].value, f[0].threshold), (Some(86.0), Some(85.0)));
}

#[test]
fn nvlink_crc_rate_and_link_down() {
    let links = |states: &[bool]| {
        states
            .iter()
            .enumerate()
            .map(|(i, &a)| NvLinkState {
                link: i as u32,
                active: a,
            })
            .collect()
    };
    let a = GpuSample {
        nvlink: NvLinkCounters {
            links: links(&[true; 4]),
            crc_flit_total: Some(0),
            crc_data_total: Some(0),
            ..NvLinkCounters::default()
        },
        ..sample(T0)
    };
    // 50 + 20 per second: fine.
    let b = GpuSample {
        nvlink: NvLinkCounters {
            links: links(&[true; 4]),
            crc_flit_total: Some(100),
            crc_data_total: Some(40),
            ..NvLinkCounters::default()
        },
        ..sample(T0 + 2_000)
    };
    assert!(eval(Some(&a), &b).is_empty());
    // 1000 per second, and link 2 went down.
    let c = GpuSample {
        nvlink: NvLinkCounters {
            links: links(&[true, true, false, true]),
            crc_flit_total: Some(1_100),
            crc_data_total: Some(40),
            ..NvLinkCounters::default()
        },
        ..sample(T0 + 3_000)
    };
    let f = eval(Some(&b), &c);
    assert_eq!(
        checks(&f),
        vec![
            ("nvlink.down", Severity::Fail),
            ("nvlink.crc_rate", Severity::Warn)
        ]
    );
    assert!(
        f[0].message.contains("link(s) 2 went down"),
        "{}",
        f[0].message
    );
    assert_eq!(f[1].value, Some(1000.0));
    // On the first look, a link down among active ones warns.
    assert_eq!(
        checks(&eval(None, &c)),
        vec![("nvlink.inactive", Severity::Warn)]
    );
}

#[test]
fn pcie_replay_rate_per_lane() {
    let a = GpuSample {
        pcie_replays: Some(100),
        pcie_link_width: Some(16),
        ..sample(T0)
    };
    // 20 per minute on x16 is under 1.92 × 16 = 30.72.
    let b = GpuSample {
        pcie_replays: Some(120),
        pcie_link_width: Some(16),
        ..sample(T0 + 60_000)
    };
    assert!(eval(Some(&a), &b).is_empty());
    let c = GpuSample {
        pcie_replays: Some(160),
        pcie_link_width: Some(16),
        ..sample(T0 + 120_000)
    };
    let f = eval(Some(&b), &c);
    assert_eq!(checks(&f), vec![("pcie.replay_rate", Severity::Warn)]);
    // On x4 the same 20 per minute is too many.
    let d = GpuSample {
        pcie_replays: Some(180),
        pcie_link_width: Some(4),
        ..sample(T0 + 180_000)
    };
    assert_eq!(eval(Some(&c), &d).len(), 1);
    // A reset counter yields no rate.
    let e = GpuSample {
        pcie_replays: Some(0),
        ..sample(T0 + 240_000)
    };
    assert!(eval(Some(&d), &e).is_empty());
}

#[test]
fn lost_gpus_and_hung_probes() {
    let th = HealthThresholds::default();
    let lost = HealthReading::GpuError {
        gpu: GpuId::index(4),
        time_ms: T0,
        call: "temperature".into(),
        error: "GPU is lost".into(),
        lost: true,
    };
    let f = evaluate_reading(&lost, &th).unwrap();
    assert_eq!(
        (f.check.as_str(), f.action, f.severity),
        ("nvml.gpu_lost", ActionClass::RebootNode, Severity::Fail)
    );
    let other = HealthReading::GpuError {
        gpu: GpuId::index(4),
        time_ms: T0,
        call: "temperature".into(),
        error: "Unknown".into(),
        lost: false,
    };
    let f = evaluate_reading(&other, &th).unwrap();
    assert_eq!(
        (f.check.as_str(), f.severity),
        ("nvml.error.temperature", Severity::Warn)
    );

    let hung = |ms| HealthReading::ProbeHung {
        source: "nvml".into(),
        time_ms: T0,
        hung_ms: ms,
        skipped_polls: 0,
    };
    assert_eq!(
        evaluate_reading(&hung(5_000), &th).unwrap().severity,
        Severity::Warn
    );
    let f = evaluate_reading(&hung(60_000), &th).unwrap();
    assert_eq!(
        (f.severity, f.action),
        (Severity::Fail, ActionClass::RebootNode)
    );
    assert!(f.message.contains("hung for 60 s"), "{}", f.message);
}

#[test]
fn a_persistent_condition_is_one_finding_with_a_count() {
    let throttled = HealthReading::Gpu(GpuSample {
        gpu: GpuId::index(0),
        clock_event_reasons: Some(0x40),
        ..GpuSample::default()
    });
    let lost = HealthReading::GpuError {
        gpu: GpuId::index(1),
        time_ms: 0,
        call: "device".into(),
        error: "GPU is lost".into(),
        lost: true,
    };
    let fake = FakeSource::new("fake")
        .then(FakeStep::Readings(vec![HealthReading::Inventory {
            gpus: vec![
                GpuId::new(Some(0), Some("0000:18:00")),
                GpuId::new(Some(1), Some("0000:28:00")),
            ],
        }]))
        .idle(vec![throttled, lost])
        .stamp_with_poll_time();
    let mut w = Watcher::new(WatcherConfig {
        boot_id: "b".into(),
        ..WatcherConfig::default()
    })
    .with_source(fake);
    assert!(w.step(T0).is_empty());
    let first = w.step(T0 + 1_000);
    assert_eq!(
        checks(&first),
        vec![
            ("throttle.hw_thermal", Severity::Fail),
            ("nvml.gpu_lost", Severity::Fail)
        ]
    );
    assert_eq!(
        first[0].gpu.as_ref().unwrap().pci_bus_id.as_deref(),
        Some("0000:18:00")
    );
    for k in 2..=10 {
        assert!(w.step(T0 + k * 1_000).is_empty());
    }
    let snap = w.policy().snapshot();
    assert_eq!(snap.len(), 2);
    assert!(
        snap.iter()
            .all(|f| f.count == 10 && f.first_ms == T0 + 1_000 && f.last_ms == T0 + 10_000)
    );
}
