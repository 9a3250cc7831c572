//! The runtime check `c4d` in `gpuvet run` and `gpuvet watch`, fed by a recorded
//! kernel log (the real kmsg reader on a file): findings become `RuntimeCheckFailed`
//! events while the app keeps running, and the app's exit code is returned; a watch
//! restarted against the same store keeps its escalation history.

use crate::common::{Scratch, stderr, stdout};

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

/// Places a kernel-log file's `[s.us]` timestamps on the wall clock (`gpuvet watch`
/// reads `/dev/kmsg` that way), so a test can put incidents minutes apart.
const KMSG_BOOT_TIME_ENV: &str = "GPUVET_KMSG_BOOT_TIME_MS";

/// A boot an hour ago: every line below (minutes after it) is in the past, so each
/// incident is decided at the first poll that reads it, however slow the machine.
fn boot_an_hour_ago() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    (now - 3_600_000).to_string()
}

/// One XID line on GPU 0000:3b:00, `kernel_s` seconds after boot.
fn xid_line(kernel_s: u64, xid: u32) -> String {
    format!("[ {kernel_s}.000000] NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, test error\n")
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn a_killed_watch_restarted_still_escalates_the_storm_it_had_seen() {
    use std::io::{BufRead, BufReader};

    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    let config = watch_config(&scratch, &kmsg);
    let boot = boot_an_hour_ago();
    // XID 95 escalates at the fifth incident on one GPU in a day. Three incidents,
    // 100 s apart (a new incident after 60 s): only the first sighting is reported.
    let lines: String = [100, 200, 300].map(|s| xid_line(s, 95)).concat();
    std::fs::write(&kmsg, lines).unwrap();
    let mut child = scratch
        .gpuvet()
        .args(["watch", "--json", "--duration", "60", "--config"])
        .arg(&config)
        .env(KMSG_BOOT_TIME_ENV, &boot)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout_lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // A finding is shown once it is in the store.
    let first = stdout_lines
        .next()
        .expect("gpuvet watch reports the first sighting")
        .unwrap();
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        (first["xid"].as_u64(), first["escalated"].as_bool()),
        (Some(95), Some(false))
    );
    // Killed like a crash or the OOM killer would: nothing runs at the stop.
    child.kill().unwrap();
    child.wait().unwrap();

    // The supervisor restarts it; meanwhile the kernel's ring buffer has moved on and
    // holds only two new incidents. The fifth in a day escalates.
    let lines: String = [400, 500].map(|s| xid_line(s, 95)).concat();
    std::fs::write(&kmsg, lines).unwrap();
    let output = scratch
        .gpuvet()
        .args(["watch", "--json", "--duration", "2", "--config"])
        .arg(&config)
        .env(KMSG_BOOT_TIME_ENV, &boot)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let findings = json_lines(&stdout(&output));
    assert_eq!(findings.len(), 1, "{findings:#?}\n{}", stderr(&output));
    let f = &findings[0];
    assert_eq!(f["escalated"], true, "{f}");
    assert_eq!(f["action"], "contact_support");
    assert_eq!(f["count"], 5);
    assert!(
        f["message"].as_str().unwrap().contains("5 incidents"),
        "{}",
        f["message"]
    );
    let escalated: Vec<bool> = scratch
        .events()
        .iter()
        .map(|e| e["details"]["escalated"].as_bool().unwrap())
        .collect();
    assert_eq!(escalated, [false, true]);
}

#[test]
fn a_restarted_watch_reading_the_log_again_reports_nothing_again() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    let config = watch_config(&scratch, &kmsg);
    let boot = boot_an_hour_ago();
    let watch = || {
        let output = scratch
            .gpuvet()
            .args(["watch", "--json", "--duration", "2", "--config"])
            .arg(&config)
            .env(KMSG_BOOT_TIME_ENV, &boot)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        output
    };
    // XID 119 (GSP): reported, then escalated to a reboot at the second incident, and
    // to contact support at the fifth.
    let mut log: String = [100, 200].map(|s| xid_line(s, 119)).concat();
    std::fs::write(&kmsg, &log).unwrap();
    let steps: Vec<(String, bool)> = json_lines(&stdout(&watch()))
        .iter()
        .map(|f| {
            (
                f["action"].as_str().unwrap().to_owned(),
                f["escalated"] == true,
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("reset_gpu".to_owned(), false),
            ("reboot_node".to_owned(), true)
        ]
    );

    // Restarted, it reads the whole log again (as it reads `/dev/kmsg` from the start),
    // with one incident more: still the first step, which was reported already. Were
    // the old lines counted again, this would make five and escalate.
    log.push_str(&xid_line(300, 119));
    std::fs::write(&kmsg, &log).unwrap();
    let output = watch();
    assert_eq!(stdout(&output), "", "{}", stderr(&output));
    assert!(
        stderr(&output).contains("restored the escalation history"),
        "{}",
        stderr(&output)
    );
    // The two steps, no third: one XID on one GPU, so one row that counts both
    // (`gpuvet_model::event_fold`) and carries the escalated step.
    let events = scratch.events();
    let counted: u64 = events.iter().map(|e| e["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, 2, "{events:#?}");
    assert_eq!(events.last().unwrap()["details"]["action"], "reboot_node");
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

#[test]
fn run_and_watch_with_no_store_show_findings_and_record_nothing() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    std::fs::write(&kmsg, format!("{XID_79}\n")).unwrap();
    let config = watch_config(&scratch, &kmsg);
    let watch = scratch
        .gpuvet()
        .args([
            "watch",
            "--json",
            "--no-store",
            "--duration",
            "2",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(watch.status.code(), Some(0), "{}", stderr(&watch));
    let findings = json_lines(&stdout(&watch));
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["xid"], 79);

    let run = scratch
        .gpuvet()
        .args(["run", "--no-store", "--config"])
        .arg(&config)
        .args(["--", "sh", "-c", "sleep 2; exit 5"])
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(5),
        "the app's code: {}",
        stderr(&run)
    );
    assert!(stderr(&run).contains("c4d: "), "{}", stderr(&run));
    assert!(
        !scratch.store().exists(),
        "nothing was recorded, so no store was made"
    );
}
