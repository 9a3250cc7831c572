//! The XID policy across a restart: its state exported, written as JSON (as the store
//! keeps it), read back and restored into a new policy, which then neither forgets the
//! incidents that count toward an escalation nor reports anything a second time.

use gpuvet_model::results::Lane;
use gpuvet_watch::health::{FakeSource, FakeStep, HealthReading, Watcher, WatcherConfig};
use gpuvet_watch::policy::{
    Decision, GpuId, POLICY_STATE_FORMAT, PolicyConfig, PolicyState, RuntimeFinding, Severity,
    XidObservation, XidPolicy,
};
use gpuvet_watch::xid::ActionClass;

const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;
const DAY: u64 = 24 * HOUR;
const T0: u64 = 1_764_000_000_000;

fn gpus(n: u32) -> Vec<GpuId> {
    (0..n)
        .map(|i| GpuId::new(Some(i), Some(&format!("0000:{:02x}:00", 0x18 + i * 0x10))))
        .collect()
}

fn obs(gpu: &GpuId, xid: u32, time_ms: u64, boot: &str) -> XidObservation {
    XidObservation {
        gpu: gpu.clone(),
        xid,
        time_ms,
        boot_id: boot.to_owned(),
        pid: Some(1234),
        text: "test".to_owned(),
        source: "kmsg".to_owned(),
    }
}

fn node(n: u32) -> (XidPolicy, Vec<GpuId>) {
    let mut p = XidPolicy::new(PolicyConfig::default());
    let g = gpus(n);
    p.register_gpus(&g);
    (p, g)
}

fn incident(p: &mut XidPolicy, gpu: &GpuId, xid: u32, t: u64, boot: &str) -> Vec<RuntimeFinding> {
    p.observe(&obs(gpu, xid, t, boot));
    p.tick(t + 3_000)
}

/// Exports `p`, writes the state as JSON and reads it back, and restores it into a
/// new policy of the same node at `now_ms` in `boot`.
fn restart(p: &XidPolicy, n_gpus: u32, now_ms: u64, boot: &str) -> XidPolicy {
    let json = serde_json::to_string(&p.export()).unwrap();
    let state: PolicyState = serde_json::from_str(&json).unwrap();
    let (mut fresh, _) = node(n_gpus);
    let restored = fresh.restore(state, now_ms, boot);
    assert_eq!(restored.unknown_format, None);
    fresh
}

#[test]
fn a_storm_that_began_before_the_restart_escalates_after_it() {
    // XID 95 escalates at the fifth incident on one GPU within a day.
    let (mut p, g) = node(8);
    let mut before = Vec::new();
    for k in 0..3 {
        before.extend(incident(&mut p, &g[2], 95, T0 + k * HOUR, "b"));
    }
    assert_eq!(before.len(), 1, "the first sighting only: {before:#?}");

    let mut p = restart(&p, 8, T0 + 3 * HOUR, "b");
    assert!(incident(&mut p, &g[2], 95, T0 + 4 * HOUR, "b").is_empty());
    let fifth = incident(&mut p, &g[2], 95, T0 + 5 * HOUR, "b");
    assert_eq!(fifth.len(), 1, "{fifth:#?}");
    assert!(fifth[0].escalated);
    assert_eq!(fifth[0].action, ActionClass::ContactSupport);
    assert!(
        fifth[0].message.contains("5 incidents"),
        "{}",
        fifth[0].message
    );
    assert_eq!(fifth[0].count, 5);
    assert_eq!(fifth[0].first_ms, T0);
}

#[test]
fn a_policy_without_the_state_would_not_have_escalated() {
    // The control for the test above: the two incidents after the restart alone.
    let (mut p, g) = node(8);
    let mut all = incident(&mut p, &g[2], 95, T0 + 4 * HOUR, "b");
    all.extend(incident(&mut p, &g[2], 95, T0 + 5 * HOUR, "b"));
    assert!(all.iter().all(|f| !f.escalated), "{all:#?}");
}

#[test]
fn nothing_is_reported_again_after_a_restart_even_when_the_log_is_read_again() {
    // XID 119 escalates at 2 incidents and again at 5.
    let (mut p, g) = node(8);
    let lines = [T0, T0 + 100, T0 + HOUR, T0 + HOUR + 100];
    let mut before = Vec::new();
    for &t in &lines {
        p.observe(&obs(&g[0], 119, t, "b"));
        before.extend(p.tick(t + 3_000));
    }
    let steps: Vec<(ActionClass, bool)> = before.iter().map(|f| (f.action, f.escalated)).collect();
    assert_eq!(
        steps,
        [
            (ActionClass::ResetGpu, false),
            (ActionClass::RebootNode, true)
        ]
    );

    let mut p = restart(&p, 8, T0 + 2 * HOUR, "b");
    // `/dev/kmsg` is read from the start again: the same lines, give or take the few
    // ms by which the boot time is re-derived.
    for &t in &lines {
        p.observe(&obs(&g[0], 119, t + 20, "b"));
    }
    assert!(p.tick(T0 + 2 * HOUR).is_empty());
    // A third incident: still the first step, already reported.
    assert!(incident(&mut p, &g[0], 119, T0 + 3 * HOUR, "b").is_empty());
    let snap = p.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(
        snap[0].count, 5,
        "4 lines before, 1 after; replays not counted"
    );
    assert_eq!(snap[0].action, ActionClass::RebootNode);
}

#[test]
fn an_incident_held_at_the_crash_is_reported_after_the_restart() {
    let (mut p, g) = node(8);
    p.observe(&obs(&g[1], 79, T0, "b"));
    // Still held (settling) when the watcher dies.
    assert!(p.tick(T0 + 500).is_empty());
    let state = p.export();
    assert_eq!(state.incidents.len(), 1);
    assert_eq!(state.incidents[0].decision, Decision::Pending);

    let mut p = restart(&p, 8, T0 + MIN, "b");
    let f = p.tick(T0 + MIN);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0].xid, f[0].count), (Some(79), 1));
}

#[test]
fn a_new_boot_reports_again_but_its_repeats_still_escalate() {
    let (mut p, g) = node(8);
    assert_eq!(incident(&mut p, &g[0], 13, T0, "a").len(), 1);
    assert_eq!(incident(&mut p, &g[3], 79, T0, "a").len(), 1);

    // The node rebooted; the watcher starts in boot `b`.
    let mut p = restart(&p, 8, T0 + HOUR, "b");
    // The old boot's dedup is not inherited: XID 13 in the new boot is new.
    let f = incident(&mut p, &g[0], 13, T0 + HOUR, "b");
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].boot_id, "b");
    // The GPU that fell off the bus before the reboot does it again: escalated, as
    // a watcher that had run through the reboot would have (REPEAT_TWICE).
    let f = incident(&mut p, &g[3], 79, T0 + HOUR, "b");
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(f[0].escalated);
    assert_eq!(f[0].action, ActionClass::ContactSupport);
}

#[test]
fn history_older_than_the_escalation_window_expires() {
    let (mut p, g) = node(8);
    for k in 0..4 {
        incident(&mut p, &g[2], 95, T0 + k * HOUR, "old");
    }
    assert_eq!(incident(&mut p, &g[4], 13, T0, "now").len(), 1);

    // Two days later, in boot `now`: the old boot's record and all four incidents
    // are gone, this boot's record stays (it still dedups this boot's lines).
    let state = p.export();
    let (mut fresh, _) = node(8);
    let restored = fresh.restore(state, T0 + 2 * DAY, "now");
    assert_eq!(restored.records, 1);
    assert_eq!(restored.incidents, 0);
    assert_eq!(
        restored.expired,
        4 + 1 + 1,
        "the incidents of both XIDs, the old record"
    );
    // A fifth XID 95 is the first of a new day: no escalation.
    let f = incident(&mut fresh, &g[2], 95, T0 + 2 * DAY, "now");
    assert_eq!(f.len(), 1);
    assert!(!f[0].escalated);
    // XID 13 of this boot is still known: not reported again.
    assert!(incident(&mut fresh, &g[4], 13, T0 + 2 * DAY + HOUR, "now").is_empty());
}

#[test]
fn a_node_wide_burst_is_not_reported_again_after_a_restart() {
    let (mut p, g) = node(8);
    for (i, gpu) in g.iter().enumerate() {
        p.observe(&obs(gpu, 79, T0 + i as u64, "b"));
    }
    let f = p.tick(T0 + 3_000);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].check, "xid.node_wide");

    let mut p = restart(&p, 8, T0 + MIN, "b");
    for (i, gpu) in g.iter().enumerate() {
        p.observe(&obs(gpu, 79, T0 + HOUR + i as u64, "b"));
    }
    assert!(p.tick(T0 + HOUR + 3_000).is_empty());
    let snap = p.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].count, 16);
}

#[test]
fn conditions_are_not_reported_again_unless_worse() {
    let mut p = XidPolicy::default();
    let c = |sev: Severity, t: u64| {
        RuntimeFinding::condition(
            "watchdog",
            "probe.hung".into(),
            Some(GpuId::index(0)),
            Lane::Host,
            ActionClass::ContactSupport,
            t,
            "hung".into(),
        )
        .with_severity(sev)
        .with_boot_id("b")
    };
    assert!(p.observe_condition(c(Severity::Warn, T0)).is_some());
    // No GPUs registered before, none after: the condition keeps its key.
    let mut p = restart(&p, 0, T0 + MIN, "b");
    assert!(p.observe_condition(c(Severity::Warn, T0 + MIN)).is_none());
    assert!(
        p.observe_condition(c(Severity::Fail, T0 + 2 * MIN))
            .is_some()
    );
}

#[test]
fn the_state_is_plain_json_with_a_format_and_another_format_restores_nothing() {
    let (mut p, g) = node(8);
    incident(&mut p, &g[0], 79, T0, "b");
    let json = serde_json::to_value(p.export()).unwrap();
    assert_eq!(json["format"], POLICY_STATE_FORMAT);
    assert_eq!(json["incidents"][0]["decision"], "per_gpu");
    assert_eq!(json["incidents"][0]["gpu_key"], "0000:18:00");
    assert_eq!(json["records"][0]["level"], 0);
    assert_eq!(json["records"][0]["emitted"], true);

    let mut other = json.clone();
    other["format"] = serde_json::json!(POLICY_STATE_FORMAT + 1);
    let (mut fresh, _) = node(8);
    let restored = fresh.restore(serde_json::from_value(other).unwrap(), T0, "b");
    assert_eq!(restored.unknown_format, Some(POLICY_STATE_FORMAT + 1));
    assert_eq!(restored.records, 0);
    assert!(fresh.export().records.is_empty());
}

#[test]
fn the_watcher_hands_out_its_state_only_when_something_changed() {
    let xid = |t: u64| {
        HealthReading::Xid(XidObservation {
            source: "nvml".into(),
            ..obs(&GpuId::index(0), 79, t, "b")
        })
    };
    let fake = FakeSource::new("nvml")
        .then(FakeStep::Readings(vec![xid(T0)]))
        .then(FakeStep::Readings(Vec::new()))
        .then(FakeStep::Readings(Vec::new()));
    let mut w = Watcher::new(WatcherConfig {
        boot_id: "b".into(),
        ..WatcherConfig::default()
    })
    .with_source(fake);
    assert!(w.step(T0).is_empty());
    let held = w.changed_state().expect("a new incident is a change");
    assert_eq!(held.incidents[0].decision, Decision::Pending);
    assert_eq!(w.step(T0 + 3_000).len(), 1);
    let decided = w.changed_state().expect("a decision is a change");
    assert_eq!(decided.incidents[0].decision, Decision::PerGpu);
    assert!(decided.records[0].emitted);
    assert!(w.step(T0 + 4_000).is_empty());
    assert_eq!(w.changed_state(), None, "nothing happened");

    // A restarted watcher starts from the saved state and has nothing new to save.
    let mut again = Watcher::new(WatcherConfig {
        boot_id: "b".into(),
        ..WatcherConfig::default()
    });
    again.restore(decided, T0 + 5_000);
    assert_eq!(again.changed_state(), None);
    assert_eq!(again.policy().snapshot().len(), 1);
}
