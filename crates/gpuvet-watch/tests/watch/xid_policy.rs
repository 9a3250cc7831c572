//! The XID policy end to end: floods, repeats, node-wide bursts, XID 45, and the kernel
//! log and NVML seeing the same XID.

use std::io::Write;

use gpuvet_model::results::Lane;
use gpuvet_watch::health::{HealthReading, HealthSource};
use gpuvet_watch::kmsg::{KmsgOptions, KmsgSource};
use gpuvet_watch::policy::{
    GpuId, PolicyConfig, RuntimeFinding, Severity, XidObservation, XidPolicy,
};
use gpuvet_watch::xid::ActionClass;

const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;
const T0: u64 = 1_764_000_000_000;

fn gpus(n: u32) -> Vec<GpuId> {
    (0..n)
        .map(|i| GpuId::new(Some(i), Some(&format!("0000:{:02x}:00", 0x18 + i * 0x10))))
        .collect()
}

fn obs(gpu: &GpuId, xid: u32, time_ms: u64, boot: &str, source: &str) -> XidObservation {
    XidObservation {
        gpu: gpu.clone(),
        xid,
        time_ms,
        boot_id: boot.to_owned(),
        pid: Some(1234),
        text: "test".to_owned(),
        source: source.to_owned(),
    }
}

fn node(n: u32) -> (XidPolicy, Vec<GpuId>) {
    let mut p = XidPolicy::new(PolicyConfig::default());
    let g = gpus(n);
    p.register_gpus(&g);
    (p, g)
}

/// Observes `xid` on `gpu` at `t` and lets the incident settle; returns what came out.
fn incident(p: &mut XidPolicy, gpu: &GpuId, xid: u32, t: u64, boot: &str) -> Vec<RuntimeFinding> {
    p.observe(&obs(gpu, xid, t, boot, "kmsg"));
    p.tick(t + 3_000)
}

#[test]
fn ten_thousand_identical_xid_95_lines_are_one_finding() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kern.log");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..10_000u64 {
        writeln!(
            f,
            "[{}.{:06}] NVRM: Xid (PCI:0000:38:00): 95, pid=4242, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No",
            100 + i / 1000,
            i % 1000
        )
        .unwrap();
    }
    drop(f);

    let options = KmsgOptions {
        boot_id: Some("boot-a".into()),
        ..KmsgOptions::default()
    };
    let mut source = KmsgSource::open(&path, options).unwrap();
    let readings = source.poll(T0).unwrap();
    assert_eq!(readings.len(), 10_000);

    let (mut policy, _) = node(8);
    for r in &readings {
        let HealthReading::Xid(o) = r else {
            panic!("not an XID reading: {r:?}")
        };
        policy.observe(o);
    }
    // Held while the burst may still grow, then reported once with its count.
    assert!(policy.tick(T0).is_empty());
    let findings = policy.tick(T0 + 3_000);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(f.count, 10_000);
    assert_eq!(
        (f.xid, f.action, f.lane),
        (Some(95), ActionClass::ResetGpu, Lane::Host)
    );
    assert_eq!(f.severity, Severity::Fail);
    assert!(
        !f.escalated,
        "one flood is one incident, not 10,000 repeats"
    );
    assert_eq!(
        f.gpu.as_ref().unwrap().index,
        Some(2),
        "PCI id matched to the NVML index"
    );
    assert_eq!(f.boot_id, "boot-a");
    assert!(policy.tick(T0 + HOUR).is_empty());
    assert!(source.poll(T0 + HOUR).unwrap().is_empty());
    assert_eq!(policy.snapshot()[0].count, 10_000);
}

#[test]
fn repeated_xid_79_escalates() {
    let (mut p, g) = node(8);
    let first = incident(&mut p, &g[3], 79, T0, "boot-a");
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].action, first[0].escalated),
        (ActionClass::RebootNode, false)
    );

    // The node was rebooted; the same GPU falls off the bus again.
    let again = incident(&mut p, &g[3], 79, T0 + 30 * MIN, "boot-b");
    assert_eq!(again.len(), 1, "{again:#?}");
    let f = &again[0];
    assert!(f.escalated);
    assert_eq!(
        (f.action, f.lane, f.severity),
        (ActionClass::ContactSupport, Lane::Host, Severity::Fail)
    );
    assert!(f.message.contains("2 incidents"), "{}", f.message);

    // A third time in the same boot: already escalated, nothing new.
    assert!(incident(&mut p, &g[3], 79, T0 + 40 * MIN, "boot-b").is_empty());
}

#[test]
fn repeated_xid_79_in_one_boot_escalates_as_an_update() {
    let (mut p, g) = node(8);
    assert_eq!(incident(&mut p, &g[0], 79, T0, "b").len(), 1);
    let up = incident(&mut p, &g[0], 79, T0 + 10 * MIN, "b");
    assert_eq!(up.len(), 1);
    assert!(up[0].escalated);
    assert_eq!(up[0].count, 2);
    assert_eq!(up[0].first_ms, T0);
}

#[test]
fn lines_of_one_incident_are_not_repeats() {
    let (mut p, g) = node(8);
    for i in 0..50 {
        p.observe(&obs(&g[1], 79, T0 + i * 500, "b", "kmsg"));
    }
    let f = p.tick(T0 + MIN);
    assert_eq!(f.len(), 1);
    assert!(!f[0].escalated);
    assert_eq!(f[0].count, 50);
}

#[test]
fn same_xid_on_all_8_gpus_is_the_app_and_never_escalates() {
    let (mut p, g) = node(8);
    let mut all = Vec::new();
    // Three rounds, each hitting all 8 GPUs within a few ms, an hour apart.
    for round in 0..3 {
        let t = T0 + round * HOUR;
        for (i, gpu) in g.iter().enumerate() {
            p.observe(&obs(gpu, 79, t + i as u64, "b", "kmsg"));
        }
        all.extend(p.tick(t + 3_000));
    }
    assert_eq!(all.len(), 1, "{all:#?}");
    let f = &all[0];
    assert_eq!(f.lane, Lane::App);
    assert!(!f.escalated);
    assert_eq!(f.gpus.len(), 8);
    assert_eq!(f.gpu, None);
    assert_eq!(f.count, 8);
    assert_eq!(f.check, "xid.node_wide");
    assert!(all.iter().all(|f| !f.escalated));
    // The snapshot keeps counting.
    let snap = p.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].count, 24);
}

#[test]
fn half_the_gpus_is_node_wide_fewer_is_not() {
    let (mut p, g) = node(8);
    for gpu in &g[..3] {
        p.observe(&obs(gpu, 13, T0, "b", "kmsg"));
    }
    let f = p.tick(T0 + 3_000);
    assert_eq!(f.len(), 3);
    assert!(f.iter().all(|f| f.check == "xid" && f.gpu.is_some()));

    let (mut p, g) = node(8);
    for gpu in &g[..4] {
        p.observe(&obs(gpu, 13, T0, "b", "kmsg"));
    }
    let f = p.tick(T0 + 3_000);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].lane, f[0].gpus.len()), (Lane::App, 4));
}

#[test]
fn xid_45_repeats_never_escalate() {
    let (mut p, g) = node(8);
    let mut all = Vec::new();
    for k in 0..30 {
        all.extend(incident(&mut p, &g[5], 45, T0 + k * 30 * MIN, "b"));
    }
    assert_eq!(all.len(), 1);
    assert_eq!(
        (all[0].action, all[0].escalated),
        (ActionClass::RecordOnly, false)
    );
    assert_eq!(all[0].severity, Severity::Info);
}

#[test]
fn fatal_xid_escalates_at_five_incidents_in_a_day() {
    let (mut p, g) = node(8);
    let mut escalated_at = None;
    for k in 0..6u64 {
        let f = incident(&mut p, &g[2], 95, T0 + k * 2 * HOUR, "b");
        if f.iter().any(|f| f.escalated) {
            escalated_at.get_or_insert(k + 1);
            assert_eq!(f[0].action, ActionClass::ContactSupport);
        } else if k > 0 {
            assert!(f.is_empty(), "repeat {k} re-reported: {f:#?}");
        }
    }
    assert_eq!(escalated_at, Some(5));

    // Spread over more than a day, the same five do not escalate.
    let (mut p, g) = node(8);
    for k in 0..5u64 {
        let f = incident(&mut p, &g[2], 95, T0 + k * 7 * HOUR, "b");
        assert!(f.iter().all(|f| !f.escalated));
    }
}

#[test]
fn gsp_errors_escalate_in_two_steps() {
    let (mut p, g) = node(8);
    let mut steps = Vec::new();
    for k in 0..5u64 {
        for f in incident(&mut p, &g[0], 119, T0 + k * HOUR, "b") {
            steps.push((k + 1, f.action, f.escalated));
        }
    }
    assert_eq!(
        steps,
        vec![
            (1, ActionClass::ResetGpu, false),
            (2, ActionClass::RebootNode, true),
            (5, ActionClass::ContactSupport, true),
        ]
    );
}

#[test]
fn nvml_and_kmsg_sightings_of_one_xid_count_once() {
    let (mut p, g) = node(8);
    p.observe(&obs(&GpuId::pci("0000:28:00"), 48, T0, "b", "kmsg"));
    p.observe(&obs(&g[1], 48, T0 + 800, "b", "nvml"));
    let f = p.tick(T0 + 5_000);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].count, 1);
    assert_eq!(f[0].source, "kmsg+nvml");
    assert_eq!(f[0].gpu, Some(g[1].clone()));
}

#[test]
fn kernel_text_completes_an_nvml_sighting() {
    let (mut p, g) = node(8);
    let nvml = XidObservation {
        pid: None,
        text: String::new(),
        ..obs(&g[0], 79, T0, "b", "nvml")
    };
    p.observe(&nvml);
    let kmsg = XidObservation {
        gpu: GpuId::pci("0000:18:00"),
        text: "GPU has fallen off the bus.".into(),
        ..obs(&g[0], 79, T0 + 300, "b", "kmsg")
    };
    p.observe(&kmsg);
    let f = p.tick(T0 + 5_000);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].count, f[0].source.as_str()), (1, "kmsg+nvml"));
    assert!(f[0].message.contains("pid 1234"), "{}", f[0].message);
    assert!(
        f[0].message.contains("GPU has fallen off the bus."),
        "{}",
        f[0].message
    );
}

#[test]
fn unknown_xid_is_contact_support() {
    let (mut p, g) = node(8);
    let f = incident(&mut p, &g[0], 4242, T0, "b");
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].action, f[0].severity),
        (ActionClass::ContactSupport, Severity::Fail)
    );
    assert!(
        f[0].message.contains("unknown XID 4242"),
        "{}",
        f[0].message
    );
}

#[test]
fn a_new_boot_reports_again_once() {
    let (mut p, g) = node(8);
    assert_eq!(incident(&mut p, &g[0], 13, T0, "a").len(), 1);
    assert!(incident(&mut p, &g[0], 13, T0 + HOUR, "a").is_empty());
    assert_eq!(incident(&mut p, &g[0], 13, T0 + 2 * HOUR, "b").len(), 1);
}

#[test]
fn findings_serialize_for_the_event_store() {
    let (mut p, g) = node(8);
    let f = incident(&mut p, &g[0], 79, T0, "b").remove(0);
    let json = serde_json::to_value(&f).unwrap();
    assert_eq!(json["lane"], "host");
    assert_eq!(json["action"], "reboot_node");
    assert_eq!(json["severity"], "fail");
    assert_eq!(json["xid"], 79);
    assert_eq!(json["count"], 1);
    assert_eq!(json["first_ms"], T0);
    let back: RuntimeFinding = serde_json::from_value(json).unwrap();
    assert_eq!(back, f);
}

#[test]
fn conditions_are_reported_once_and_again_when_worse() {
    let mut p = XidPolicy::default();
    let gpu = GpuId::index(0);
    let c = |sev: Severity, t: u64| {
        RuntimeFinding::condition(
            "watchdog",
            "probe.hung".into(),
            Some(gpu.clone()),
            Lane::Host,
            ActionClass::ContactSupport,
            t,
            "hung".into(),
        )
        .with_severity(sev)
    };
    assert!(p.observe_condition(c(Severity::Warn, 1)).is_some());
    for t in 2..10 {
        assert!(p.observe_condition(c(Severity::Warn, t)).is_none());
    }
    let worse = p.observe_condition(c(Severity::Fail, 10)).unwrap();
    assert_eq!(
        (worse.severity, worse.count, worse.first_ms, worse.last_ms),
        (Severity::Fail, 10, 1, 10)
    );
    assert!(p.observe_condition(c(Severity::Warn, 11)).is_none());
}
