//! Fault bundles and `explain` from real runs of each fault the platform must hand
//! over: a slow node, an agent stopped (SIGSTOP) or killed (SIGKILL), an inventory
//! mismatch, XID 79 from a kernel log, and a flight-recorder dump of a hang (the slow
//! link between network namespaces is in `tests/netns`). For each: `explain` names the
//! first error and its lane (its text is a snapshot), gives the same answer on the
//! bundle as on the store, the bundle's manifest checks out with `sha256sum -c`, and
//! no file of the bundle holds the group's or the push token.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::explained::{
    REPORT_TOKEN, config_with_secret, explain_everywhere, first_error, for_snapshot, hypothesis,
};
use crate::common::group::{GROUP_TOKEN, Group, GroupSpec};
use crate::common::{self, Scratch, json, stderr};

/// Only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(90);
/// A group of four on loopback with a store per rank, the group's token in the config
/// and the environment, and the push token in the environment.
fn stored_group(scratch: &Scratch, checks: &str) -> GroupSpec {
    let mut spec = GroupSpec::loopback(4, checks);
    spec.keep_store = true;
    let config = config_with_secret(scratch, "secret.json", r#""backend": "cpu", "#);
    spec.extra_args = vec!["--config".to_owned(), config.display().to_string()];
    spec.env = vec![("GPUVET_REPORT_TOKEN".to_owned(), REPORT_TOKEN.to_owned())];
    spec
}

const GROUP_CHECKS: &str = "all_reduce_2,all_gather_2,all_reduce,network_connectivity";

#[test]
fn a_stopped_agent_is_explained_as_the_hosts() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let spec = stored_group(&scratch, GROUP_CHECKS);
    let mut group = Group::start(&scratch, &spec);
    // At once, so the agent is lost before any collective completes, as the snapshot
    // of the hypotheses says.
    group.wait_for_stderr(0, "4 of 4 nodes joined", LIMIT);
    group.signal(2, libc::SIGSTOP);
    group.wait_for_exit(0, LIMIT);
    group.signal(2, libc::SIGCONT);
    let finished = group.finish(LIMIT);
    assert_eq!(finished[0].code, Some(1), "{}", finished[0].stderr);
    let (explanation, text) = explain_everywhere(&scratch, &scratch.path("rank0.db"), "job-group");
    assert_eq!(first_error(&explanation), ("n2", "host"), "{text}");
    assert_eq!(explanation["first_error"]["incident"], "unresponsive");
    assert_eq!(hypothesis(&explanation, "host"), "confirmed", "{text}");
    insta::assert_snapshot!("stopped_agent", for_snapshot(&text));
}

#[test]
fn a_killed_agent_is_explained_as_the_hosts() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let spec = stored_group(&scratch, GROUP_CHECKS);
    let group = Group::start(&scratch, &spec);
    group.wait_for_stderr(0, "4 of 4 nodes joined", LIMIT);
    group.signal(1, libc::SIGKILL);
    let finished = group.finish(LIMIT);
    assert_eq!(finished[0].code, Some(1), "{}", finished[0].stderr);
    let (explanation, text) = explain_everywhere(&scratch, &scratch.path("rank0.db"), "job-group");
    assert_eq!(first_error(&explanation), ("n1", "host"), "{text}");
    assert_eq!(explanation["first_error"]["incident"], "crashed");
    insta::assert_snapshot!("killed_agent", for_snapshot(&text));
}

#[test]
fn an_inventory_mismatch_is_explained_as_the_platforms() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let mut spec = stored_group(&scratch, "inventory_consistency");
    spec.backend_args[2] = ["--cpu-devices", "2"].map(str::to_owned).to_vec();
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    assert_eq!(finished[0].code, Some(1), "{}", finished[0].stderr);
    let (explanation, text) = explain_everywhere(&scratch, &scratch.path("rank0.db"), "job-group");
    assert_eq!(first_error(&explanation), ("n2", "platform"), "{text}");
    assert_eq!(hypothesis(&explanation, "platform"), "confirmed", "{text}");
    insta::assert_snapshot!("inventory_mismatch", for_snapshot(&text));
}

/// Four sim nodes in one config (as `--local-nodes` agents share it), `local-2` at
/// half speed.
fn local_nodes(
    scratch: &Scratch,
    job: &str,
    checks: &str,
    node_speed: &str,
) -> std::process::Output {
    let config = config_with_secret(
        scratch,
        "local.json",
        &format!(r#""backend": "sim", "sim": {{"devices": 2, "node_speed": {{{node_speed}}}}}, "#),
    );
    scratch
        .gpuvet()
        .env("GPUVET_JOB_ID", job)
        .env("GPUVET_TOKEN", GROUP_TOKEN)
        .env("GPUVET_REPORT_TOKEN", REPORT_TOKEN)
        .args([
            "check",
            "--local-nodes",
            "4",
            "--checks",
            checks,
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap()
}

#[test]
fn a_slow_node_is_named_with_its_lane() {
    let scratch = Scratch::temp();
    let output = local_nodes(
        &scratch,
        "slow-node",
        "gemm_flops,all_reduce_2,inventory_consistency",
        r#""local-2": 0.5"#,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let (explanation, text) = explain_everywhere(&scratch, &scratch.store(), "slow-node");
    assert_eq!(first_error(&explanation).0, "local-2", "{text}");
    insta::assert_snapshot!("slow_node", for_snapshot(&text));
}

fn fr_fixture(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../gpuvet-watch/tests/fixtures/fr/json")
        .join(case)
}

#[test]
fn a_flight_recorder_hang_is_placed_on_its_ranks_node() {
    let scratch = Scratch::temp();
    let output = local_nodes(&scratch, "fr-hang", "all_reduce_2", r#""local-0": 1.0"#);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The app then hung; its ranks' dumps are read into the job.
    let fr = scratch
        .gpuvet()
        .arg("fr")
        .arg(fr_fixture("r4_hang"))
        .args(["--job", "fr-hang"])
        .output()
        .unwrap();
    assert_eq!(fr.status.code(), Some(1), "{}", stderr(&fr));
    assert!(stderr(&fr).contains("on `local-2`"), "{}", stderr(&fr));
    let (explanation, text) = explain_everywhere(&scratch, &scratch.store(), "fr-hang");
    assert_eq!(first_error(&explanation), ("local-2", "app"), "{text}");
    assert_eq!(hypothesis(&explanation, "app"), "confirmed", "{text}");
    let timeline = scratch
        .gpuvet()
        .args(["timeline", "--job", "fr-hang", "--json"])
        .output()
        .unwrap();
    let timeline = json(&timeline);
    let collectives = timeline["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "collective")
        .count();
    assert!(collectives > 0, "{timeline:#}");
    insta::assert_snapshot!("flight_recorder_hang", for_snapshot(&text));
}

const XID_79: &str =
    "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.";

#[test]
fn xid_79_at_run_time_is_explained_as_the_gpus() {
    let scratch = Scratch::temp();
    let kmsg = scratch.path("kmsg.log");
    std::fs::write(&kmsg, "").unwrap();
    let config = config_with_secret(
        &scratch,
        "c4d.json",
        &format!(
            r#""backend": "sim", "watch": {{"kmsg": "{}", "nvml": false, "interval_ms": 200}}, "#,
            kmsg.display()
        ),
    );
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "{",
        r#"{"aimaster": {"runtime_check": {"fail_action": "retain", "micro_benchmarks": "c4d"},
                         "sanity_check": {"micro_benchmarks": "gemm_flops"}}, "#,
        1,
    );
    std::fs::write(&config, text).unwrap();
    let script = format!(
        "sleep 0.5; echo '{XID_79}' >> '{}'; sleep 3",
        kmsg.display()
    );
    let output = scratch
        .gpuvet()
        .env("GPUVET_JOB_ID", "xid-79")
        .env("GPUVET_TOKEN", GROUP_TOKEN)
        .env("GPUVET_REPORT_TOKEN", REPORT_TOKEN)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (explanation, text) = explain_everywhere(&scratch, &scratch.store(), "xid-79");
    assert_eq!(explanation["lane"], "host", "{text}");
    assert_eq!(explanation["first_error"]["xid"], 79, "{text}");
    assert_eq!(hypothesis(&explanation, "gpu"), "confirmed", "{text}");
    insta::assert_snapshot!("xid_79", for_snapshot(&text));
}

#[test]
fn a_bundle_that_does_not_match_its_manifest_is_refused() {
    let scratch = Scratch::temp();
    let output = local_nodes(&scratch, "tampered", "all_reduce_2", r#""local-0": 1.0"#);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let bundle = scratch.path("b.tar.gz");
    let made = scratch
        .gpuvet()
        .args(["bundle", "--job", "tampered", "-o"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    // Unpack, change one report, pack again with the old manifest.
    let dir = scratch.path("unpacked");
    std::fs::create_dir_all(&dir).unwrap();
    let run = |cmd: &mut Command| assert!(cmd.status().unwrap().success());
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&bundle)
        .arg("-C")
        .arg(&dir));
    let root = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let timeline = root.join("timeline.json");
    let mut changed = std::fs::read_to_string(&timeline).unwrap();
    changed.push('\n');
    std::fs::write(&timeline, changed).unwrap();
    let forged = scratch.path("forged.tar.gz");
    run(Command::new("tar")
        .arg("-czf")
        .arg(&forged)
        .arg("-C")
        .arg(&dir)
        .arg(root.file_name().unwrap()));
    let output = scratch
        .gpuvet()
        .arg("explain")
        .arg(&forged)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("`timeline.json` does not match the manifest"),
        "{message}"
    );
    assert!(message.contains("hint:"), "{message}");
}

#[test]
fn bad_input_or_an_unwritable_bundle_is_named_with_its_cause_and_a_hint() {
    let scratch = Scratch::temp();
    let output = local_nodes(&scratch, "inputs", "all_reduce_2", r#""local-0": 1.0"#);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    std::fs::write(scratch.path("not-a-bundle.tar.gz"), "hello").unwrap();
    // A bundle that cannot be written is the environment's problem (73), not a usage
    // error; the reason of each is on its own `caused by:` line.
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["explain", "missing.tar.gz"],
            2,
            "error: cannot read the bundle `missing.tar.gz`\n  caused by: ",
        ),
        (
            &["explain", "not-a-bundle.tar.gz"],
            2,
            "error: the bundle `not-a-bundle.tar.gz` is refused\n  caused by: not a gzip'd tar\n",
        ),
        (
            &["explain", "--job", "nosuch"],
            2,
            "the store has no attempt of job `nosuch`",
        ),
        (
            &["timeline", "--job", "inputs", "--attempt", "0"],
            2,
            "`--attempt 0` is out of range",
        ),
        (
            &["timeline", "--job", "inputs", "--attempt", "9"],
            2,
            "no report or event of attempt 9 of job `inputs`",
        ),
        (
            &["bundle", "--job", "inputs", "-o", "no/such/dir/b.tar.gz"],
            73,
            "error: cannot write the bundle `no/such/dir/b.tar.gz`\n  caused by: ",
        ),
    ];
    for (args, code, needle) in cases {
        let output = scratch.run(args);
        common::assert_exit(&output, code, needle);
        assert!(
            stderr(&output).contains("hint: "),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert!(!scratch.path("no").exists(), "nothing half written");
}

#[test]
fn the_runs_context_keeps_the_launchers_variables_and_leaves_out_one_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .args([
            "check",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops",
            "--json",
        ])
        .env("NCCL_IB_HCA", "mlx5_0")
        .env("GPUVET_TOKEN", GROUP_TOKEN)
        .env("UNRELATED_VARIABLE", "x")
        .env("GPUVET_NOT_UTF8", std::ffi::OsStr::from_bytes(b"\xff\xfe"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let environment = &json(&output)["context"]["environment"];
    assert_eq!(environment["NCCL_IB_HCA"], "mlx5_0", "{environment:#}");
    assert_eq!(environment["GPUVET_TOKEN"], "[redacted]", "{environment:#}");
    assert!(
        environment.get("UNRELATED_VARIABLE").is_none(),
        "{environment:#}"
    );
    assert!(
        environment.get("GPUVET_NOT_UTF8").is_none(),
        "{environment:#}"
    );
}
