//! gpuvet under Slurm, as a process: `run` with `fail_action: rebuild` inside a Slurm job
//! drains its own node and requeues the job, with Slurm's names in its events and
//! report; `undrain` lifts gpuvet's drain only once the node passed a run after it;
//! `epilog` records the end of a job gpuvet ran on the node.
//! Slurm is played by stand-in `sinfo` and `scontrol` scripts first on `PATH`, which
//! keep the nodes in a file and log every command; the real commands against a real
//! `slurmctld` are the Slurm cluster test's (`deploy/slurm/`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::{Scratch, json, stderr, stdout};

/// `sinfo` prints `dir/nodes`; `scontrol` logs its arguments, one a line, to
/// `dir/calls`, and drains or resumes in `dir/nodes`.
fn fake_slurm(dir: &Path, nodes: &str) {
    std::fs::write(dir.join("nodes"), nodes).unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let scripts = [
        ("sinfo", format!("cat '{}/nodes'", dir.display())),
        (
            "scontrol",
            format!(
                r#"d='{dir}'
for arg in "$@"; do printf '%s\n' "$arg" >> "$d/calls"; done
echo --- >> "$d/calls"
[ "$1" = update ] || exit 0
for arg in "$@"; do
  case "$arg" in
    NodeName=*) node="${{arg#NodeName=}}" ;;
    State=*) state="${{arg#State=}}" ;;
    Reason=*) reason="${{arg#Reason=}}" ;;
  esac
done
grep -v "^$node|" "$d/nodes" > "$d/nodes.new"
if [ "$state" = DRAIN ]; then
  echo "$node|drained|$(date -u +%Y-%m-%dT%H:%M:%S)|$reason" >> "$d/nodes.new"
else
  echo "$node|idle|Unknown|none" >> "$d/nodes.new"
fi
mv "$d/nodes.new" "$d/nodes""#,
                dir = dir.display()
            ),
        ),
    ];
    for (name, body) in scripts {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn calls(scratch: &Scratch) -> String {
    std::fs::read_to_string(scratch.path("calls")).unwrap_or_default()
}

/// `gpuvet` inside Slurm job 77, step 0, on `gpu-02`, after one requeue, with the
/// stand-ins first on `PATH`.
fn in_slurm_job(scratch: &Scratch) -> Command {
    let path = format!(
        "{}:{}",
        scratch.path("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = scratch.gpuvet();
    command
        .env("PATH", path)
        .env_remove("GPUVET_JOB_ID")
        .env_remove("GPUVET_NODE")
        .env_remove("NODE_NAME")
        .env_remove("TORCHELASTIC_RUN_ID")
        .env("SLURM_JOB_ID", "77")
        .env("SLURM_STEP_ID", "0")
        .env("SLURMD_NODENAME", "gpu-02")
        .env("SLURM_RESTART_COUNT", "1");
    command
}

const FOUR_NODES: &str = "gpu-01|idle|Unknown|none\ngpu-02|mixed|Unknown|none\n\
                          gpu-03|idle|Unknown|none\ngpu-04|idle|Unknown|none\n";

/// A gemm_flops floor the cpu backend cannot meet: a host-lane finding on this node.
fn unmeetable(fail_action: &str) -> String {
    format!(
        r#"{{"aimaster": {{"sanity_check": {{"fail_action": "{fail_action}", "micro_benchmarks": "gemm_flops", "timeout": 2}}}},
            "gpuvet": {{"backend": "cpu", "cpu_devices": 1, "gemm": {{"size": 256}},
                        "baselines": {{"gemm_flops": {{"floor": 1000000}}}}}}}}"#
    )
}

#[test]
fn rebuild_in_a_slurm_job_drains_the_node_requeues_and_records_slurms_names() {
    let scratch = Scratch::temp();
    fake_slurm(scratch.dir.path(), FOUR_NODES);
    let config = scratch.config("c.json", &unmeetable("rebuild"));
    let output = in_slurm_job(&scratch)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--", "sh", "-c", "echo ran > app-ran"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(!scratch.path("app-ran").exists());
    let calls = calls(&scratch);
    let (drain, requeue) = calls.split_once("---\n").unwrap();
    assert!(
        drain.starts_with(
            "update\nNodeName=gpu-02\nState=DRAIN\nReason=gpuvet: host lane: gemm_flops \
             gpu-02/dev0 slow: "
        ),
        "{calls}"
    );
    assert_eq!(requeue, "requeue\n77\n---\n", "{calls}");
    assert!(
        stderr(&output).contains("slurm: rebuild of slurm job `77`: drained `gpu-02`"),
        "{}",
        stderr(&output)
    );

    let events = in_slurm_job(&scratch)
        .args(["events", "--json", "--job-id", "77"])
        .output()
        .unwrap();
    let events = json(&events);
    let rebuild = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "InstanceRebuildRequested")
        .unwrap_or_else(|| panic!("{events:#}"));
    // The job's requeue count makes this attempt 2, on a node that never saw the job.
    assert_eq!(rebuild["attempt"], 2, "{rebuild:#}");
    assert_eq!(rebuild["node"], "gpu-02");
    assert_eq!(
        rebuild["details"]["slurm"],
        serde_json::json!({"job_id": "77", "step_id": "0", "node": "gpu-02", "restart_count": 1})
    );
    assert_eq!(
        rebuild["details"]["slurm_rebuild"]["drained"],
        serde_json::json!(["gpu-02"])
    );
    assert_eq!(rebuild["details"]["slurm_rebuild"]["requeue"], "77");

    // The timeline (and so the bundle, which packs it) names the Slurm job.
    let timeline = in_slurm_job(&scratch)
        .args(["timeline", "--job-id", "77"])
        .output()
        .unwrap();
    assert!(
        stdout(&timeline).contains("slurm: job 77 step 0 (requeued 1×) on gpu-02"),
        "{}{}",
        stdout(&timeline),
        stderr(&timeline)
    );
}

#[test]
fn the_breaker_keeps_the_node_and_the_job_is_not_requeued() {
    let scratch = Scratch::temp();
    // Two of four already drained by gpuvet within the window: a third is over 50 %.
    let now = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    let now = String::from_utf8(now.stdout).unwrap();
    let nodes = format!(
        "gpu-01|drained|{0}|gpuvet: earlier\ngpu-02|mixed|Unknown|none\n\
         gpu-03|drained|{0}|gpuvet: earlier\ngpu-04|idle|Unknown|none\n",
        now.trim()
    );
    fake_slurm(scratch.dir.path(), &nodes);
    let config = scratch.config("c.json", &unmeetable("rebuild"));
    let output = in_slurm_job(&scratch)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert_eq!(calls(&scratch), "", "nothing drained, nothing requeued");
    assert!(
        stderr(&output).contains("warning: slurm: node `gpu-02` not drained: circuit breaker"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn gpuvet_slurm_enabled_off_runs_the_hook_instead() {
    let scratch = Scratch::temp();
    fake_slurm(scratch.dir.path(), FOUR_NODES);
    let config = unmeetable("rebuild").replace(
        r#""backend": "cpu""#,
        r#""slurm": {"enabled": "off"}, "rebuild_hook": ["sh", "-c", "echo hook > hook-ran"], "backend": "cpu""#,
    );
    let config = scratch.config("c.json", &config);
    let output = in_slurm_job(&scratch)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(scratch.path("hook-ran").exists(), "{}", stderr(&output));
    assert_eq!(calls(&scratch), "");
}

/// `gpuvet undrain NODE` with the stand-ins, as an operator on the node.
fn undrain(scratch: &Scratch, args: &[&str]) -> std::process::Output {
    in_slurm_job(scratch)
        .env_remove("SLURM_JOB_ID")
        .arg("undrain")
        .args(args)
        .output()
        .unwrap()
}

/// A passing `gpuvet check` on `gpu-02`, recorded in the scratch's store.
fn passing_check(scratch: &Scratch) {
    let config = scratch.config(
        "pass.json",
        r#"{"aimaster": {"sanity_check": {"micro_benchmarks": "gemm_flops", "timeout": 2}},
            "gpuvet": {"backend": "cpu", "cpu_devices": 1, "gemm": {"size": 256}}}"#,
    );
    let output = scratch
        .gpuvet()
        .env("GPUVET_NODE", "gpu-02")
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn undrain_needs_a_passing_run_after_the_drain_or_force() {
    let scratch = Scratch::temp();
    // Drained in the future: no run can follow it yet.
    fake_slurm(
        scratch.dir.path(),
        "gpu-02|drained|2099-01-01T00:00:00|gpuvet: host lane: gemm_flops gpu-02/dev0 slow\n",
    );
    passing_check(&scratch);
    let output = undrain(&scratch, &["gpu-02"]);
    assert_eq!(output.status.code(), Some(81), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "error: node `gpu-02` is not proven healthy: the latest passing run on node \
             `gpu-02` started at"
        ),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("hint: run `gpuvet check` on the node"));
    assert_eq!(calls(&scratch), "");

    // `--force` needs a reason for the record.
    let output = undrain(&scratch, &["gpu-02", "--force"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--reason"), "{}", stderr(&output));
    assert_eq!(calls(&scratch), "");

    let output = undrain(&scratch, &["gpu-02", "--force", "--reason", "fan replaced"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        calls(&scratch),
        "update\nNodeName=gpu-02\nState=RESUME\n---\n"
    );
    assert_eq!(
        stdout(&output),
        "lifted gpuvet's drain from node `gpu-02`\n"
    );
    // Recorded as a lifted quarantine, with who and why.
    let events = scratch
        .gpuvet()
        .args(["events", "--json", "--job-id", "gpuvet-untaint"])
        .output()
        .unwrap();
    let events = json(&events);
    let lifted = &events[0];
    assert_eq!(lifted["kind"], "NodeUntainted", "{events:#}");
    assert_eq!(lifted["node"], "gpu-02", "{events:#}");
    assert_eq!(lifted["details"]["forced"], true, "{events:#}");
    assert_eq!(lifted["details"]["reason"], "fan replaced", "{events:#}");
    assert!(
        lifted["message"]
            .as_str()
            .unwrap()
            .ends_with(": fan replaced"),
        "{events:#}"
    );
}

#[test]
fn undrain_lifts_the_drain_once_the_node_passed_after_it() {
    let scratch = Scratch::temp();
    fake_slurm(
        scratch.dir.path(),
        "gpu-02|drained|2026-01-01T00:00:00|gpuvet: host lane: x\ngpu-03|drained|2026-01-01T00:00:00|bad fan\n",
    );
    // No store yet: nothing proves the node.
    let output = undrain(&scratch, &["gpu-02"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    passing_check(&scratch);
    let output = undrain(&scratch, &["gpu-02"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("node `gpu-02` passed job `job-test` attempt 1 after the drain"),
        "{}",
        stderr(&output)
    );
    let events = scratch
        .gpuvet()
        .args(["events", "--json", "--job-id", "gpuvet-untaint"])
        .output()
        .unwrap();
    let events = json(&events);
    assert_eq!(events[0]["kind"], "NodeUntainted", "{events:#}");
    assert_eq!(events[0]["details"]["forced"], false, "{events:#}");
    assert_eq!(
        events[0]["details"]["proof"],
        serde_json::json!({"job_id": "job-test", "attempt": 1}),
        "{events:#}"
    );
    assert_eq!(
        calls(&scratch),
        "update\nNodeName=gpu-02\nState=RESUME\n---\n"
    );
    // Someone else's drain, a node that is not drained, and no such node.
    let output = undrain(&scratch, &["gpu-03"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("drained, but not by gpuvet"),
        "{}",
        stdout(&output)
    );
    let output = undrain(&scratch, &["gpu-02"]);
    assert!(
        stdout(&output).contains("is not drained (`idle`)"),
        "{}",
        stdout(&output)
    );
    let output = undrain(&scratch, &["gpu-99"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("node `gpu-99` is not a node of this Slurm cluster"));
}

#[test]
fn undrain_when_slurm_fails_exits_82_with_a_hint() {
    let scratch = Scratch::temp();
    fake_slurm(scratch.dir.path(), "");
    std::fs::write(
        scratch.path("bin/sinfo"),
        "#!/bin/sh\necho 'sinfo: error: Unable to contact slurm controller' >&2\nexit 1\n",
    )
    .unwrap();
    let output = undrain(&scratch, &["gpu-02"]);
    assert_eq!(output.status.code(), Some(82), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("sinfo: error: Unable to contact slurm controller"),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("hint: "), "{}", stderr(&output));
}

/// `gpuvet epilog` as Slurm's Epilog runs it on `gpu-02`: no step, the job's id when
/// given, and what Slurm says of the exit.
fn epilog(scratch: &Scratch, job: Option<&str>, exit: &[(&str, &str)]) -> std::process::Output {
    let mut command = in_slurm_job(scratch);
    command
        .env_remove("SLURM_STEP_ID")
        .env_remove("SLURM_JOB_ID");
    if let Some(job) = job {
        command.env("SLURM_JOB_ID", job);
    }
    command.envs(exit.iter().copied());
    command.arg("epilog").output().unwrap()
}

#[test]
fn the_epilog_records_the_end_of_a_job_gpuvet_ran_on_the_node_and_only_those() {
    let scratch = Scratch::temp();
    // No store on the node: nothing to record, and none is made.
    let none = epilog(&scratch, Some("77"), &[]);
    assert_eq!(none.status.code(), Some(0), "{}", stderr(&none));
    assert!(stdout(&none).contains("no store"), "{}", stdout(&none));
    assert!(!scratch.store().exists());

    // gpuvet ran in job 77 (its second try) on gpu-02.
    let config = scratch.config(
        "pass.json",
        r#"{"aimaster": {"sanity_check": {"micro_benchmarks": "gemm_flops", "timeout": 2}},
            "gpuvet": {"backend": "cpu", "cpu_devices": 1, "gemm": {"size": 256}}}"#,
    );
    let check = in_slurm_job(&scratch)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));

    let other = epilog(&scratch, Some("78"), &[]);
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    assert!(
        stdout(&other).contains("gpuvet did not run job `78` on node `gpu-02`; nothing recorded"),
        "{}",
        stdout(&other)
    );

    let ended = epilog(&scratch, Some("77"), &[("SLURM_JOB_EXIT_CODE2", "0:15")]);
    assert_eq!(ended.status.code(), Some(0), "{}", stderr(&ended));
    assert!(
        stdout(&ended).contains("recorded the end of job `77` attempt 2 on node `gpu-02`"),
        "{}",
        stdout(&ended)
    );
    let listed = scratch
        .gpuvet()
        .args(["events", "--json", "--job-id", "77", "--type", "JobEnded"])
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let events = json(&listed);
    let events = events.as_array().expect("a list of events");
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["attempt"], 2, "{event:#}");
    assert_eq!(event["node"], "gpu-02", "{event:#}");
    assert_eq!(
        event["message"],
        "Slurm job `77` ended on node `gpu-02`: exit code `0:15`"
    );
    assert_eq!(event["details"]["exit"]["SLURM_JOB_EXIT_CODE2"], "0:15");
    assert_eq!(event["details"]["slurm"]["job_id"], "77", "{event:#}");

    // Outside Slurm, with no job named: a usage error that says how to run it.
    let missing = epilog(&scratch, None, &[]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    let err = stderr(&missing);
    assert!(
        err.contains("`SLURM_JOB_ID` is not set")
            && err.contains("hint: run `gpuvet epilog` as Slurm's `Epilog`"),
        "{err}"
    );
}
