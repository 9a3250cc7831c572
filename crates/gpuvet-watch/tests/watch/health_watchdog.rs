//! The watchdog and the watcher with scripted sources: a hung probe becomes a finding,
//! the watcher stays alive, no second probe starts while the first is stuck, and
//! panics and errors are findings too. Timeouts here only bound the test; nothing
//! asserts on how long anything took.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use gpuvet_model::results::Lane;
use gpuvet_watch::health::{
    FakeSource, FakeStep, GpuSample, HealthReading, HealthSource, Watchdog, Watcher, WatcherConfig,
};
use gpuvet_watch::policy::{GpuId, Severity, XidObservation};
use gpuvet_watch::xid::ActionClass;

const T0: u64 = 1_764_000_000_000;
/// Generous: a healthy fake answers in microseconds.
const TIMEOUT: Duration = Duration::from_secs(2);

fn config() -> WatcherConfig {
    WatcherConfig {
        boot_id: "boot-a".into(),
        ..WatcherConfig::default()
    }
}

fn xid(gpu: u32, x: u32) -> HealthReading {
    HealthReading::Xid(XidObservation {
        gpu: GpuId::index(gpu),
        xid: x,
        time_ms: 0,
        boot_id: String::new(),
        pid: None,
        text: String::new(),
        source: "nvml".into(),
    })
}

fn healthy(gpu: u32) -> HealthReading {
    HealthReading::Gpu(GpuSample {
        gpu: GpuId::index(gpu),
        temperature_c: Some(60),
        clock_event_reasons: Some(0x1),
        ..GpuSample::default()
    })
}

#[test]
fn hung_probe_is_a_finding_and_the_watcher_lives_on() {
    let (release, hang) = mpsc::channel();
    let fake = FakeSource::new("nvml")
        .then(FakeStep::HangUntil(hang, vec![xid(0, 48)]))
        .idle(vec![healthy(0)])
        .stamp_with_poll_time();
    let calls = fake.call_counter();
    let dog = Watchdog::new(fake, TIMEOUT)
        .unwrap()
        .with_hung_wait(TIMEOUT);
    let mut w = Watcher::new(config()).with_source(dog);

    // 1: the probe hangs → one watchdog finding.
    let f = w.step(T0);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].check.as_str(), f[0].lane, f[0].source.as_str()),
        ("probe.hung", Lane::Host, "watchdog")
    );
    assert_eq!(f[0].severity, Severity::Warn);
    assert!(
        f[0].message.starts_with("nvml probe hung for"),
        "{}",
        f[0].message
    );
    assert_eq!(f[0].boot_id, "boot-a");

    // 2: still hung: answered, not re-reported, and no second probe started.
    assert!(w.step(T0 + 1_000).is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let hung = w
        .policy()
        .snapshot()
        .into_iter()
        .find(|f| f.check == "probe.hung")
        .unwrap();
    assert_eq!(hung.count, 2);

    // 3: the stuck call returns; its late readings are used (stamped with the time the
    // probe started, so the XID has already settled).
    release.send(()).unwrap();
    let f = w.step(T0 + 2_000);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].xid, f[0].action, f[0].first_ms),
        (Some(48), ActionClass::ResetGpu, T0)
    );

    // 4: normal polling again.
    assert!(w.step(T0 + 3_000).is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(w.steps(), 4);
}

#[test]
fn watchdog_counts_hangs_skips_and_late_results() {
    let (release, hang) = mpsc::channel();
    let fake = FakeSource::new("slow").then(FakeStep::HangUntil(hang, vec![healthy(1)]));
    let mut dog = Watchdog::new(fake, Duration::from_millis(200))
        .unwrap()
        .with_hung_wait(Duration::from_millis(200));
    let r = dog.poll(T0).unwrap();
    assert!(
        matches!(&r[..], [HealthReading::ProbeHung { source, skipped_polls: 0, .. }] if source == "slow")
    );
    assert!(dog.is_hung());
    let r = dog.poll(T0 + 1_000).unwrap();
    assert!(matches!(
        &r[..],
        [HealthReading::ProbeHung {
            skipped_polls: 1,
            ..
        }]
    ));
    drop(release); // a dropped sender ends the hang too
    // Wait for the late result without a timed assertion: poll until it arrives.
    let mut late = None;
    for k in 0..100 {
        let r = dog.poll(T0 + 2_000 + k).unwrap();
        if !dog.is_hung() {
            late = Some(r);
            break;
        }
    }
    assert_eq!(late.unwrap(), vec![healthy(1)]);
    let s = dog.stats();
    assert_eq!((s.probes, s.hangs, s.late_results), (1, 1, 1));
    assert!(s.skipped_polls >= 1);
    // The next poll is a normal probe again.
    assert_eq!(dog.poll(T0 + 5_000).unwrap(), vec![]);
    assert_eq!(dog.stats().probes, 2);
}

#[test]
fn a_panicking_or_failing_probe_is_a_finding() {
    let fake = FakeSource::new("flaky")
        .then(FakeStep::Panic)
        .then(FakeStep::Error("NVML_ERROR_UNKNOWN".into()))
        .idle(vec![healthy(0)]);
    let dog = Watchdog::new(fake, TIMEOUT).unwrap();
    let mut w = Watcher::new(config()).with_source(dog);
    let f = w.step(T0);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].check, "source.error.flaky");
    assert!(f[0].message.contains("panicked"), "{}", f[0].message);
    // The error that follows is the same condition: counted, not re-reported.
    assert!(w.step(T0 + 1_000).is_empty());
    assert!(w.step(T0 + 2_000).is_empty());
    let snap = w.policy().snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].count, 2);
}

#[test]
fn spawned_watcher_reports_through_the_callback_and_stops() {
    let fake = FakeSource::new("nvml")
        .then(FakeStep::Readings(vec![xid(3, 79)]))
        .idle(vec![healthy(3)])
        .stamp_with_poll_time();
    let w = Watcher::new(WatcherConfig {
        interval: Duration::from_millis(10),
        ..config()
    })
    .with_source(Watchdog::new(fake, TIMEOUT).unwrap());
    let (tx, rx) = mpsc::channel();
    let handle = w.spawn(move |f| tx.send(f).unwrap()).unwrap();
    // The XID is held ~2 s (settle time); wait up to a minute for it.
    let f = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("no finding from the watcher");
    assert_eq!((f.xid, f.action), (Some(79), ActionClass::RebootNode));
    let w = handle.stop().expect("watcher thread panicked");
    assert!(w.steps() >= 1);
}
