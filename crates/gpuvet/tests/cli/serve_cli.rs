//! What the node binary adds to the fleet server: `gpuvet serve` runs `gpuvet-server`
//! (beside gpuvet, else on `PATH`) with its arguments, or says how to install it; and
//! `timeline`, `explain` and `bundle` read a fleet's attempt over the server's API
//! (`--server`), never with a database driver of the node's own, with the server's
//! read token from `GPUVET_READ_TOKEN` when it guards its reads.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::serve::{READ_TOKEN, Serve, TOKEN};
use crate::common::{Scratch, stderr, stdout};

/// A directory with a link to the gpuvet under test (so that it finds what is beside
/// it there), on the target's file system.
fn gpuvet_alone() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let gpuvet = dir.path().join("gpuvet");
    std::fs::hard_link(env!("CARGO_BIN_EXE_gpuvet"), &gpuvet)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_gpuvet"), &gpuvet).map(drop))
        .unwrap();
    (dir, gpuvet)
}

fn serve(gpuvet: &Path, path: &Path, args: &[&str]) -> std::process::Output {
    Command::new(gpuvet)
        .arg("serve")
        .args(args)
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn serve_without_the_server_says_where_it_looked_and_how_to_install_it() {
    let (dir, gpuvet) = gpuvet_alone();
    let empty = tempfile::tempdir().unwrap();
    let output = serve(&gpuvet, empty.path(), &["--listen", "127.0.0.1:0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.starts_with(
            "error: `gpuvet serve` runs the fleet server `gpuvet-server`, which is not installed:"
        ),
        "{said}"
    );
    assert!(said.contains(&dir.path().display().to_string()), "{said}");
    assert!(said.contains("\nhint: install it beside gpuvet"), "{said}");
}

#[test]
fn serve_runs_the_server_beside_gpuvet_with_its_arguments_and_exit_code() {
    let (dir, gpuvet) = gpuvet_alone();
    let server = dir.path().join("gpuvet-server");
    let said = dir.path().join("said");
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nexit 7\n",
            said.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let empty = tempfile::tempdir().unwrap();
    let output = serve(
        &gpuvet,
        empty.path(),
        &[
            "--listen",
            "0.0.0.0:1",
            "--store",
            "postgres://h/db",
            "--help",
        ],
    );
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&said).unwrap(),
        "--listen\n0.0.0.0:1\n--store\npostgres://h/db\n--help\n",
        "every argument, `--help` included, is the server's"
    );
}

#[test]
fn a_node_reads_no_postgresql_store_and_says_to_ask_the_server() {
    let scratch = Scratch::temp();
    let output = scratch.run(&[
        "timeline",
        "--store",
        "postgres://gpuvet:s3cret@db.internal:5432/gpuvet",
    ]);
    assert_eq!(output.status.code(), Some(74), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.starts_with("error: cannot open the store at `postgres://gpuvet:***@db.internal:5432/gpuvet`: this program reads no PostgreSQL store\n"),
        "{said}"
    );
    assert!(said.contains("--server URL"), "{said}");
    assert!(!said.contains("s3cret"), "{said}");
}

/// A failing sim run of `node-test` that pushed its report and events to `server`.
fn failed_run_on(scratch: &Scratch, server: &Serve) {
    let config = scratch.config(
        "slow.json",
        &format!(
            r#"{{"aimaster": {{"sanity_check": {{"fail_action": "fail", "micro_benchmarks": "gemm_flops", "timeout": 2}}}},
               "gpuvet": {{"backend": "sim", "report_to": "http://{}",
                           "sim": {{"devices": 4, "speed": {{"2": 0.5}}}}}}}}"#,
            server.addr
        ),
    );
    let check = scratch
        .gpuvet()
        .env("GPUVET_REPORT_TOKEN", TOKEN)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
    assert!(!stderr(&check).contains("push:"), "{}", stderr(&check));
}

#[test]
fn timeline_explain_and_bundle_from_a_server_match_the_nodes_own() {
    let scratch = Scratch::temp();
    let server = Serve::start(&scratch.path("server.db"), "127.0.0.1:0");
    failed_run_on(&scratch, &server);
    let url = server.url("");
    for command in [["timeline", "--json"], ["explain", "--json"]] {
        let local = scratch.run(&command);
        let remote = scratch.run(&[command[0], command[1], "--server", &url]);
        assert_eq!(remote.status.code(), Some(0), "{}", stderr(&remote));
        assert_eq!(stdout(&remote), stdout(&local), "{command:?}");
    }
    let explained = scratch.run(&["explain", "--server", &url]);
    assert!(
        stdout(&explained).contains("node-test/dev2"),
        "{}",
        stdout(&explained)
    );

    let bundle = scratch.path("fault.tar.gz");
    let output = scratch
        .gpuvet()
        .args(["bundle", "--server", &url, "-o"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("job `job-test` attempt 1, downloaded "),
        "{}",
        stderr(&output)
    );
    let from_bundle = scratch
        .gpuvet()
        .arg("explain")
        .arg(&bundle)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        stdout(&from_bundle),
        stdout(&scratch.run(&["explain", "--json"]))
    );
}

#[test]
fn a_server_that_guards_its_reads_is_read_with_gpuvet_read_token_and_a_401_names_it() {
    let scratch = Scratch::temp();
    let server = Serve::start_guarded(&scratch.path("server.db"), "127.0.0.1:0");
    failed_run_on(&scratch, &server);
    let url = server.url("");
    let local = scratch.run(&["timeline", "--json"]);
    let remote = scratch
        .gpuvet()
        .env("GPUVET_READ_TOKEN", READ_TOKEN)
        .args(["timeline", "--json", "--server", &url])
        .output()
        .unwrap();
    assert_eq!(remote.status.code(), Some(0), "{}", stderr(&remote));
    assert_eq!(stdout(&remote), stdout(&local));

    // Without it, or with the push token only, or with a wrong one: the server's 401,
    // and what to set.
    for (read_token, hint) in [
        (
            None,
            "hint: this server's reads need its read token: set `GPUVET_READ_TOKEN` to it",
        ),
        (
            Some("wrong"),
            "hint: set `GPUVET_READ_TOKEN` to the read token the server was started with",
        ),
    ] {
        let mut command = scratch.gpuvet();
        command.env("GPUVET_REPORT_TOKEN", TOKEN);
        if let Some(token) = read_token {
            command.env("GPUVET_READ_TOKEN", token);
        }
        let output = command
            .args(["explain", "--server", &url])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let said = stderr(&output);
        assert!(
            said.starts_with(&format!(
                "error: `{url}/api/v1/jobs/job-test/explain` answered 401: "
            )),
            "{said}"
        );
        assert!(said.contains(hint), "{said}");
        assert!(!said.contains(TOKEN), "{said}");
    }
}

#[test]
fn a_job_the_server_does_not_have_is_the_servers_answer_with_its_hint() {
    let scratch = Scratch::temp();
    let server = Serve::start(&scratch.path("server.db"), "127.0.0.1:0");
    let output = scratch.run(&["timeline", "--server", &server.url(""), "--job", "nope"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.starts_with(&format!(
            "error: `{}/api/v1/jobs/nope/timeline` answered 404: ",
            server.url("")
        )),
        "{said}"
    );
    // Nothing is half written when the download fails.
    let bundle = scratch.path("none.tar.gz");
    let output = scratch
        .gpuvet()
        .args(["bundle", "--server", &server.url(""), "--job", "nope", "-o"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(!bundle.exists());
    let left: Vec<String> = std::fs::read_dir(scratch.dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with("server.db"))
        .collect();
    assert!(left.is_empty(), "only the server's store is left: {left:?}");
}
