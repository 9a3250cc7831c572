//! `gpuvet check --local-nodes 4` with one agent stopped (SIGSTOP) at different moments
//! of the suite: the command ends with exit 1, names the stopped rank as the first
//! error, and kills the stopped agent instead of waiting on it, so no agent is left.
//! How fast it acts is measured by `scripts/soak-local-faults.py` (docs/benchmarks.md);
//! the limit here only turns a hang into a failure.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuvet_backend::child::find_child;

use crate::common::{self, Scratch};

/// Far beyond the seconds a stopped agent costs; only a hang reaches it.
const HANG_GUARD: Duration = Duration::from_secs(90);
const CHECKS: &str = "all_reduce_2,all_gather_2,all_reduce,network_connectivity,all_to_all_2";

/// Whether `pid` still exists (and is not a zombie nobody reaped).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

fn wait_with_guard(child: &mut Child) -> Option<i32> {
    let until = Instant::now() + HANG_GUARD;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().expect("polling gpuvet") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("gpuvet --local-nodes did not exit within {HANG_GUARD:?} of the stop");
}

#[test]
#[allow(clippy::print_stderr)] // the measured times are worth seeing in the test log
fn a_stopped_local_agent_is_named_and_killed_at_any_moment() {
    let _turn = common::one_at_a_time();
    // At the suite's start, early in it, and later in it.
    for (attempt, stop_after) in [0.0, 1.0, 2.5].into_iter().enumerate() {
        let scratch = Scratch::temp();
        let mut gpuvet = scratch
            .gpuvet()
            .args(["check", "--json", "--no-store", "--local-nodes", "4"])
            .args(["--backend", "cpu", "--cpu-devices", "1", "--checks", CHECKS])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting gpuvet");
        let stopped_rank = 1 + (attempt as u32 % 3);
        let mut stdout = gpuvet.stdout.take().expect("piped stdout");
        let stderr = gpuvet.stderr.take().expect("piped stderr");
        let out = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        let (joined_tx, joined_rx) = mpsc::channel();
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("4 of 4 nodes joined") {
                    let _ = joined_tx.send(());
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        // The suite starts once every agent has joined.
        joined_rx
            .recv_timeout(HANG_GUARD)
            .expect("the group never formed");
        let pid = find_child(gpuvet.id(), "--node-rank", &stopped_rank.to_string())
            .expect("the agent's process");
        std::thread::sleep(Duration::from_secs_f64(stop_after));
        // SAFETY: kill(2) on a pid this test found as gpuvet's child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let stopped_at = Instant::now();
        let code = wait_with_guard(&mut gpuvet);
        let took = stopped_at.elapsed();
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        eprintln!("stopped rank {stopped_rank} {stop_after}s in: exit {code:?} after {took:?}");

        let report: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("no JSON report ({e}): {out}\n{err}"));
        assert_eq!(code, Some(1), "{report:#}\n{err}");
        let first = &report["group"]["first_error"];
        assert_eq!(first["rank"], stopped_rank, "{report:#}\n{err}");
        assert_eq!(first["kind"], "unresponsive", "{report:#}");
        assert!(
            !alive(pid),
            "the stopped agent {pid} was left behind after the verdict"
        );
        // Every agent line is whole: none starts inside another's; and the end of the
        // group is reported once, by the coordinator, not again by each agent.
        for line in err.lines() {
            assert!(!line.contains("warning: warning:"), "{line}");
            assert!(!line.contains("note: note:"), "{line}");
        }
        assert!(!err.contains("this node has no group verdict"), "{err}");
    }
}
