//! `Scontrol` against stand-in programs on disk, run as real child processes: the exact
//! argument vectors it passes (no shell: a reason with spaces and quotes is one
//! argument), the environment `sinfo` runs with, and a program that fails, hangs past
//! the timeout or does not exist.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use gpuvet_slurm::{Scontrol, Slurm, SlurmError};

/// A shell script at `dir/name`: the stand-in for one of Slurm's programs.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Stand-ins that log each argument on its own line to `dir/calls`.
fn logging(dir: &Path) -> Scontrol {
    let log = dir.join("calls");
    let body = format!(
        "for arg in \"$0\" \"$@\"; do printf '%s\\n' \"$arg\" >> '{}'; done\necho --- >> '{}'",
        log.display(),
        log.display()
    );
    let sinfo_body = format!(
        "{body}\necho \"TZ=$TZ SLURM_TIME_FORMAT=$SLURM_TIME_FORMAT\" >> '{}'\n\
         echo 'gpu-01|drained|2026-12-04T10:19:08|gpuvet: host lane: x'\n\
         echo 'gpu-02|idle|Unknown|none'",
        log.display()
    );
    Scontrol {
        scontrol: script(dir, "scontrol", &body),
        sinfo: script(dir, "sinfo", &sinfo_body),
        timeout: Duration::from_secs(60),
    }
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap()
        .replace(&format!("{}/", dir.display()), "")
}

#[test]
fn commands_are_argument_vectors_and_sinfo_runs_in_utc() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = logging(dir.path());
    let nodes = slurm.nodes().unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(nodes[0].drained_by_gpuvet());
    slurm
        .drain(
            "gpu-01",
            "gpuvet: host lane: gemm_flops \"gpu-01/dev3\" slow; $(reboot)",
        )
        .unwrap();
    slurm.resume("gpu-01").unwrap();
    slurm.requeue("4242").unwrap();
    assert_eq!(
        calls(dir.path()),
        "sinfo\n--noheader\n--Node\n--format=%N|%T|%H|%E\n---\n\
         TZ=UTC SLURM_TIME_FORMAT=standard\n\
         scontrol\nupdate\nNodeName=gpu-01\nState=DRAIN\n\
         Reason=gpuvet: host lane: gemm_flops \"gpu-01/dev3\" slow; $(reboot)\n---\n\
         scontrol\nupdate\nNodeName=gpu-01\nState=RESUME\n---\n\
         scontrol\nrequeue\n4242\n---\n"
    );
}

#[test]
fn a_hostlist_is_never_passed_as_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = logging(dir.path());
    let err = slurm.drain("gpu-[01-04]", "gpuvet: x").unwrap_err();
    assert!(matches!(err, SlurmError::NoSuchNode(_)), "{err:?}");
    assert!(slurm.resume("a,b").is_err());
    assert!(!dir.path().join("calls").exists());
}

#[test]
fn a_failing_command_says_what_slurm_said() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = Scontrol {
        scontrol: script(
            dir.path(),
            "scontrol",
            "echo 'slurm_update error: Invalid node name specified' >&2; exit 1",
        ),
        ..Scontrol::default()
    };
    let err = slurm.drain("gpu-09", "gpuvet: x").unwrap_err();
    let SlurmError::Failed { stderr, status, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(stderr, "slurm_update error: Invalid node name specified");
    assert_eq!(status, "exit status: 1");
    assert!(err.hint().unwrap().contains("operator"));
}

#[test]
fn a_hung_command_is_killed_and_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = Scontrol {
        scontrol: script(dir.path(), "scontrol", "exec sleep 600"),
        timeout: Duration::from_millis(200),
        ..Scontrol::default()
    };
    let err = slurm.requeue("4242").unwrap_err();
    assert!(matches!(err, SlurmError::TimedOut { .. }), "{err:?}");
    assert!(
        err.to_string()
            .ends_with("requeue 4242` did not finish within 0.2 s and was killed"),
        "{err}"
    );
}

#[test]
fn a_missing_program_names_itself_and_says_what_to_install() {
    let slurm = Scontrol {
        sinfo: "/nonexistent/sinfo".into(),
        ..Scontrol::default()
    };
    let err = slurm.nodes().unwrap_err();
    assert_eq!(err.to_string(), "cannot run `/nonexistent/sinfo`");
    assert!(
        err.with_causes().contains("No such file or directory"),
        "{err:?}"
    );
    assert!(err.hint().unwrap().contains("slurm-client"));
}

#[test]
fn output_sinfo_never_writes_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = Scontrol {
        sinfo: script(dir.path(), "sinfo", "echo 'PARTITION AVAIL'"),
        ..Scontrol::default()
    };
    let err = slurm.nodes().unwrap_err();
    assert!(matches!(err, SlurmError::Unreadable { .. }), "{err:?}");
}
