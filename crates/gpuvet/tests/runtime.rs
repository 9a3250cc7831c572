//! The runtime check `c4d` in `gpuvet run` and `gpuvet watch`, fed by a recorded
//! kernel log (the real kmsg reader on a file): findings become `RuntimeCheckFailed`
//! events while the app keeps running, and the app's exit code is returned.

mod common;

use common::{Scratch, stderr, stdout};

const XID_79: &str =
    "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.";

fn watch_config(scratch: &Scratch, kmsg: &std::path::Path) -> std::path::PathBuf {
    scratch.config(
        "c4d.json",
        &format!(
            r#"{{"aimaster": {{"runtime_check": {{"fail_action": "retain", "micro_benchmarks": "c4d"}},
                               "sanity_check": {{"micro_benchmarks": "gemm_flops"}}}},
                 "gpuvet": {{"backend": "sim", "watch": {{"kmsg": "{}", "nvml": false, "interval_ms": 200}}}}}}"#,
            kmsg.display()
        ),
    )
}

#[test]
fn run_records_a_runtime_event_while_the_app_runs_and_returns_its_code() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    std::fs::write(&kmsg, "[    0.000000] Linux version 6.1\n").unwrap();
    let config = watch_config(&scratch, &kmsg);
    // The app writes an XID into the log mid-run, then keeps running for a while.
    let script = format!(
        "sleep 0.5; echo '{XID_79}' >> '{}'; sleep 5; exit 5",
        kmsg.display()
    );
    let output = scratch
        .gpuvet()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("GPU has fallen off the bus"),
        "{}",
        stderr(&output)
    );

    let events = scratch.events();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "SanityCheckSucceeded",
            "InstanceStarted",
            "RuntimeCheckFailed",
            "InstanceExited"
        ]
    );
    let runtime = &events[2];
    assert_eq!(runtime["lane"], "host");
    assert_eq!(runtime["details"]["xid"], 79);
    assert_eq!(runtime["details"]["count"], 1);
    let exited = &events[3];
    assert!(
        runtime["time_ms"].as_u64() < exited["time_ms"].as_u64(),
        "the runtime event was recorded while the app still ran"
    );
}

#[test]
fn watch_runs_as_a_daemon_and_deduplicates_a_flood() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    let flood: String = (0..500)
        .map(|i| {
            format!("[ {i}.000000] NVRM: Xid (PCI:0000:3b:00): 95, pid=1, Uncontained ECC error\n")
        })
        .collect();
    std::fs::write(&kmsg, flood).unwrap();
    let config = watch_config(&scratch, &kmsg);
    let output = scratch
        .gpuvet()
        .args(["watch", "--json", "--duration", "4", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let findings: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["xid"], 95);
    assert_eq!(findings[0]["count"], 500);
    let events = scratch.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["kind"], "RuntimeCheckFailed");
}

#[test]
fn watch_without_any_source_is_a_clear_error() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "none.json",
        r#"{"gpuvet": {"watch": {"kmsg": "off", "nvml": false}}}"#,
    );
    let output = scratch
        .gpuvet()
        .args(["watch", "--duration", "1", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("the runtime check has no source to watch"),
        "{}",
        stderr(&output)
    );
}
