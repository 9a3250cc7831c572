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
        r#"{"gpuvet": {"watch": {"kmsg": "off", "nvml": false, "nccl_ras": "off"}}}"#,
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

#[test]
fn runtime_kill_stops_the_app_on_a_fatal_finding_with_its_own_code() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    std::fs::write(&kmsg, "").unwrap();
    let config = scratch.config(
        "kill.json",
        &format!(
            r#"{{"aimaster": {{"runtime_check": {{"fail_action": "kill", "micro_benchmarks": "c4d"}}}},
                 "gpuvet": {{"watch": {{"kmsg": "{}", "nvml": false, "interval_ms": 200}}}}}}"#,
            kmsg.display()
        ),
    );
    // Without the kill, this app would run for a minute.
    // (The long sleep runs in the background with its own stdio, so it cannot hold the
    // test's pipes open once the app is gone.)
    let script = format!(
        "trap 'exit 143' TERM; sleep 0.5; echo '{XID_79}' >> '{}'; sleep 60 >/dev/null 2>&1 & wait $!; exit 0",
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
    assert_eq!(output.status.code(), Some(79), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("stopping the app (runtime fail_action `kill`)"),
        "{}",
        stderr(&output)
    );
    let events = scratch.events();
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "InstanceExited");
    assert_eq!(last["details"]["killed_by"]["xid"], 79);
}

#[test]
fn watch_serves_prometheus_metrics() {
    use std::io::{BufRead, BufReader, Read, Write};

    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    std::fs::write(&kmsg, format!("{XID_79}\n")).unwrap();
    let config = watch_config(&scratch, &kmsg);
    let mut child = scratch
        .gpuvet()
        .args([
            "watch",
            "--duration",
            "30",
            "--metrics-addr",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = stderr_lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.split("http://")
                .nth(1)
                .map(|rest| rest.trim_end_matches("/metrics").to_owned())
        })
        .expect("gpuvet watch names the metrics address");
    // The XID is reported after its hold time; scrape until it shows (anti-hang bound).
    let mut body = String::new();
    for _ in 0..100 {
        let mut stream = std::net::TcpStream::connect(&url).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        body.clear();
        stream.read_to_string(&mut body).unwrap();
        if body.contains("gpuvet_xid_events_total{") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("gpuvet_watch_up"), "{body}");
    assert!(body.contains("xid=\"79\""), "{body}");
}

/// A fake NCCL RAS server: speaks the text protocol and answers every `STATUS` with
/// one 4-rank communicator whose rank 3 RAS considers dead.
fn fake_ras_with_a_dead_rank() -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Write};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rank = |r: u32| {
        format!(
            r#"{{"rank": {r}, "host": "10.0.0.{r}", "pid": {pid}, "cuda_dev": 0, "nvml_dev": 0,
                "status": {{"init_state": 0, "async_error": 0, "finalize_called": false,
                           "destroy_flag": false, "abort_flag": false}},
                "collective_counts": {{"AllReduce": 7}}}}"#,
            pid = 5000 + r
        )
    };
    let document = format!(
        r#"{{"nccl_version": "2.29.1", "communicators_count": 1,
            "communicators": [{{"hash": "0x5eed", "size": 4, "ranks_count": 3, "missing_ranks_count": 1,
              "ranks": [{}, {}, {}],
              "missing_ranks": [{{"rank": 3, "host": "10.0.0.3", "pid": 5003, "cuda_dev": 0, "nvml_dev": 0,
                                  "status": {{"unresponsive": true, "considered_dead": true}}}}]}}],
            "ras": {{"collection_time_sec": 0.01, "timeouts_count": 0}}}}
"#,
        rank(0),
        rank(1),
        rank(2)
    );
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                let command = line.trim().to_ascii_uppercase();
                line.clear();
                let reply = if command.starts_with("CLIENT PROTOCOL") {
                    "SERVER PROTOCOL 2\n".to_owned()
                } else if command == "STATUS" || command == "VERBOSE STATUS" {
                    let _ = writer.write_all(document.as_bytes());
                    break;
                } else {
                    "OK\n".to_owned()
                };
                if writer.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
        }
    });
    addr
}

#[test]
fn watch_names_a_dead_nccl_rank_once_however_often_ras_repeats_it() {
    let scratch = Scratch::temp();
    let ras = fake_ras_with_a_dead_rank();
    let config = scratch.config(
        "ras.json",
        &format!(
            r#"{{"gpuvet": {{"watch": {{"kmsg": "off", "nvml": false, "interval_ms": 100,
                                       "nccl_ras": "{ras}"}}}}}}"#
        ),
    );
    let output = scratch
        .gpuvet()
        .args(["watch", "--json", "--duration", "3", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let findings: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        findings.len(),
        1,
        "one event for a dead rank seen on every poll: {findings:?}"
    );
    assert_eq!(findings[0]["source"], "nccl_ras");
    assert_eq!(findings[0]["lane"], "network");
    assert_eq!(findings[0]["severity"], "fail");
    assert!(
        findings[0]["message"].as_str().unwrap().contains("rank 3"),
        "{}",
        findings[0]
    );
}
