//! `deploy/slurm/prolog.sh` and `epilog.sh` as slurmd runs them, without Slurm: the real
//! gpuvet on the sim backend, and a fake `scontrol` first on `PATH` that records what it
//! was asked. A failing node is drained with gpuvet's verdict as the reason and the
//! prolog fails (so Slurm requeues the job); a healthy node, a gpuvet that hangs past
//! the budget and a gpuvet that cannot check (a bad config) let the job start. The same
//! scripts on a real cluster are in `slurm.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use crate::common::{Scratch, stderr};

/// A failing node: device 1 of 2 at half speed.
pub const FAILING_SIM: &str =
    r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 2, "speed": {"1": 0.5}}}}"#;
/// A healthy node: 2 sim devices alike.
pub const HEALTHY_SIM: &str = r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 2}}}"#;

/// The repository's `deploy/slurm/NAME`.
pub fn deploy_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/slurm")
        .join(name)
}

struct Hook {
    scratch: Scratch,
}

impl Hook {
    /// A scratch dir whose `bin/scontrol` appends its arguments to `scontrol.args`.
    fn new() -> Hook {
        let scratch = Scratch::temp();
        let bin = scratch.path("bin");
        std::fs::create_dir(&bin).unwrap();
        write_script(
            &bin.join("scontrol"),
            &format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\n",
                scratch.path("scontrol.args").display()
            ),
        );
        Hook { scratch }
    }

    /// Runs `deploy/slurm/NAME` as slurmd would for job 42 on `gv-node9`.
    fn run(&self, name: &str, env: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            self.scratch.path("bin").display()
        );
        let mut command = Command::new(deploy_script(name));
        command
            .env_clear()
            .env("PATH", path)
            .env("SLURMD_NODENAME", "gv-node9")
            .env("SLURM_JOB_ID", "42")
            .env("SLURM_JOB_DERIVED_EC", "0")
            .env("SLURM_JOB_USER", "alice")
            .env("GPUVET", env!("CARGO_BIN_EXE_gpuvet"))
            .env("GPUVET_STORE", self.scratch.store())
            .env("GPUVET_SLURM_LOG", self.log_path())
            .env("GPUVET_SLURM_SETTINGS", self.scratch.path("no-settings"))
            .env("GPUVET_PROLOG_CHECKS", "gemm_flops,kernel_launch")
            .env("GPUVET_PROLOG_SECONDS", "30");
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("running the script")
    }

    fn config(&self, json: &str) -> String {
        let path = self.scratch.config("gpuvet.json", json);
        path.to_str().unwrap().to_owned()
    }

    fn log_path(&self) -> PathBuf {
        self.scratch.path("slurm.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// What `scontrol` was asked, one argument a line; empty when it never ran.
    fn scontrol_args(&self) -> Vec<String> {
        std::fs::read_to_string(self.scratch.path("scontrol.args"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_failing_node_is_drained_with_gpuvet_s_verdict_and_the_prolog_fails() {
    let hook = Hook::new();
    let config = hook.config(FAILING_SIM);
    let output = hook.run("prolog.sh", &[("GPUVET_CONFIG", &config)]);
    assert_eq!(output.status.code(), Some(1), "{}", hook.log());
    assert_eq!(
        hook.scontrol_args(),
        [
            "update",
            "NodeName=gv-node9",
            "State=DRAIN",
            "Reason=gpuvet: gv-node9/dev1 is slow in gemm_flops; hand it to the host team \
             [lane: host]"
        ],
        "{}",
        hook.log()
    );
    let log = hook.log();
    assert!(
        log.contains("prolog node=gv-node9 job=42 ") && log.contains(" drained exit=1 "),
        "{log}"
    );
    // The check is recorded in the node's store under the Slurm job.
    let results = Command::new(env!("CARGO_BIN_EXE_gpuvet"))
        .env("GPUVET_STORE", hook.scratch.store())
        .args(["results", "--job-id", "slurm-42", "--json"])
        .output()
        .unwrap();
    assert_eq!(results.status.code(), Some(0), "{}", stderr(&results));
    assert!(
        String::from_utf8_lossy(&results.stdout).contains("gemm_flops"),
        "{}",
        String::from_utf8_lossy(&results.stdout)
    );
}

#[test]
fn a_healthy_node_passes_without_a_drain() {
    let hook = Hook::new();
    let config = hook.config(HEALTHY_SIM);
    let output = hook.run("prolog.sh", &[("GPUVET_CONFIG", &config)]);
    assert_eq!(output.status.code(), Some(0), "{}", hook.log());
    assert!(
        hook.scontrol_args().is_empty(),
        "{:?}",
        hook.scontrol_args()
    );
    assert!(
        hook.log()
            .contains(" passed checks=gemm_flops,kernel_launch"),
        "{}",
        hook.log()
    );
}

#[test]
#[allow(clippy::print_stderr)] // the prolog's time against its budget is worth seeing
fn a_gpuvet_that_hangs_is_cut_off_within_the_budget_and_the_job_starts() {
    let hook = Hook::new();
    // It says how it was started (its parent is `timeout`), then hangs.
    let hanging = hook.scratch.path("bin/hanging-gpuvet");
    let started_as = hook.scratch.path("started-as");
    write_script(
        &hanging,
        &format!(
            "#!/bin/sh\n{{ tr '\\0' ' ' < /proc/$PPID/cmdline; echo; echo \"$*\"; }} > '{}'\nexec sleep 600\n",
            started_as.display()
        ),
    );
    let started = Instant::now();
    let output = hook.run(
        "prolog.sh",
        &[
            ("GPUVET", hanging.to_str().unwrap()),
            ("GPUVET_PROLOG_SECONDS", "10"),
        ],
    );
    let took = started.elapsed();
    eprintln!("a hanging gpuvet: the prolog took {took:.1?} of its 10 s budget");
    assert_eq!(output.status.code(), Some(0), "{}", hook.log());
    assert!(
        hook.scontrol_args().is_empty(),
        "{:?}",
        hook.scontrol_args()
    );
    assert!(
        hook.log()
            .contains(" timed out after 7 s; the job starts unchecked"),
        "{}",
        hook.log()
    );
    // Killed 7 s in (TERM, KILL 1 s later), so with 2 s for a drain the prolog stays
    // within 10 s; gpuvet's own deadline, 4 s (0.067 min), comes first.
    let started_as = std::fs::read_to_string(&started_as).unwrap();
    let mut lines = started_as.lines();
    assert!(
        lines.next().unwrap().starts_with("timeout -k 1 7 "),
        "{started_as}"
    );
    assert_eq!(
        lines.next().unwrap(),
        "check --checks gemm_flops,kernel_launch --timeout 0.067"
    );
}

#[test]
fn a_gpuvet_that_cannot_check_lets_the_job_start_and_says_why() {
    let hook = Hook::new();
    let config = hook.config(r#"{"gpuvet": {"backend": "nonsense"}}"#);
    let output = hook.run("prolog.sh", &[("GPUVET_CONFIG", &config)]);
    assert_eq!(output.status.code(), Some(0), "{}", hook.log());
    assert!(
        hook.scontrol_args().is_empty(),
        "{:?}",
        hook.scontrol_args()
    );
    let log = hook.log();
    assert!(log.contains(" gpuvet could not check (exit 2: "), "{log}");
    assert!(log.contains("); the job starts"), "{log}");
}

#[test]
fn the_epilog_records_the_job_s_end_and_always_succeeds() {
    let hook = Hook::new();
    // A gpuvet that records what it was asked, and fails: the epilog records the job's
    // end (`gpuvet epilog`) each time, pushes the outbox only when the config has a
    // `report_to`, and succeeds all the same.
    let recording = hook.scratch.path("bin/recording-gpuvet");
    write_script(
        &recording,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexit 76\n",
            hook.scratch.path("gpuvet.args").display()
        ),
    );
    let recording = recording.to_str().unwrap();
    let output = hook.run("epilog.sh", &[("GPUVET", recording)]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        hook.log()
            .contains(" epilog node=gv-node9 job=42 exit=0 user=alice"),
        "{}",
        hook.log()
    );
    assert_eq!(
        std::fs::read_to_string(hook.scratch.path("gpuvet.args")).unwrap(),
        "epilog\n",
        "no report_to, no push"
    );

    let config = hook.config(r#"{"gpuvet": {"report_to": "http://127.0.0.1:9"}}"#);
    let output = hook.run(
        "epilog.sh",
        &[("GPUVET", recording), ("GPUVET_CONFIG", &config)],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "a push left waiting is no failure"
    );
    assert_eq!(
        std::fs::read_to_string(hook.scratch.path("gpuvet.args")).unwrap(),
        "epilog\nepilog\npush\n"
    );
}
