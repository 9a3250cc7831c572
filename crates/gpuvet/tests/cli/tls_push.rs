//! Pushing to and reading from an `https://` fleet server, with a CA made in the test:
//! a node sends nothing to a server whose certificate another CA signed or that names
//! another host, keeps it all in the outbox and says why, and sends it once the right
//! CA is trusted; `timeline --server` reads over HTTPS with `GPUVET_REPORT_CA`.

use std::path::Path;

use gpuvet_server::TlsFiles;
use gpuvet_testkit::tls::TestCa;

use crate::common::serve::{Serve, TOKEN};
use crate::common::{Scratch, stderr, stdout};

/// A sim node pushing to `url`, trusting the CA in `ca`.
fn config(scratch: &Scratch, name: &str, url: &str, ca: &Path) -> std::path::PathBuf {
    scratch.config(
        name,
        &format!(
            r#"{{"aimaster": {{"sanity_check": {{"fail_action": "fail", "micro_benchmarks": "gemm_flops", "timeout": 2}}}},
               "gpuvet": {{"backend": "sim", "report_to": "{url}", "report_ca": "{}", "sim": {{"devices": 2}}}}}}"#,
            ca.display()
        ),
    )
}

fn push(scratch: &Scratch, config: &Path) -> std::process::Output {
    scratch
        .gpuvet()
        .env("GPUVET_REPORT_TOKEN", TOKEN)
        .args(["push", "--config"])
        .arg(config)
        .arg("--store")
        .arg(scratch.store())
        .output()
        .unwrap()
}

fn reports_on(server: &Serve) -> usize {
    server.get_json("/api/v1/runs").as_array().unwrap().len()
}

#[test]
fn a_node_pushes_only_to_a_server_whose_certificate_checks_out() {
    let scratch = Scratch::temp();
    let fleet_ca = TestCa::new("fleet CA");
    let stranger = TestCa::new("another CA");
    let files = fleet_ca.server_files(&scratch.path(""), "server", &["localhost"]);
    let server = Serve::start_tls(
        &scratch.path("server.db"),
        "127.0.0.1:0",
        TlsFiles {
            cert: files.cert,
            key: files.key,
        },
    );
    let port = server.addr.port();
    let fleet_ca_file = fleet_ca.write_cert(&scratch.path(""), "fleet-ca.pem");
    let stranger_file = stranger.write_cert(&scratch.path(""), "stranger.pem");
    let by_name = format!("https://localhost:{port}");

    // Another CA: the check runs and passes; nothing leaves, and it says why.
    let wrong_ca = config(&scratch, "wrong-ca.json", &by_name, &stranger_file);
    let check = scratch
        .gpuvet()
        .env("GPUVET_REPORT_TOKEN", TOKEN)
        .args(["check", "--config"])
        .arg(&wrong_ca)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(
        stderr(&check).contains("push: cannot send to") && stderr(&check).contains("UnknownIssuer"),
        "{}",
        stderr(&check)
    );
    let pending = push(&scratch, &wrong_ca);
    assert_eq!(pending.status.code(), Some(76), "{}", stderr(&pending));
    assert!(
        stdout(&pending).contains("sent 0 to"),
        "{}",
        stdout(&pending)
    );
    assert_eq!(reports_on(&server), 0);

    // The right CA, but the address is not a name the certificate names.
    let wrong_name = config(
        &scratch,
        "wrong-name.json",
        &format!("https://127.0.0.1:{port}"),
        &fleet_ca_file,
    );
    let pending = push(&scratch, &wrong_name);
    assert_eq!(pending.status.code(), Some(76), "{}", stderr(&pending));
    assert!(
        stdout(&pending).contains("not valid for name"),
        "{}",
        stdout(&pending)
    );
    assert_eq!(reports_on(&server), 0);

    // The right CA and name: everything that waited arrives, once.
    let right = config(&scratch, "right.json", &by_name, &fleet_ca_file);
    let sent = push(&scratch, &right);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    assert!(stdout(&sent).contains("; 0 waiting"), "{}", stdout(&sent));
    assert_eq!(reports_on(&server), 1);
    assert!(!stderr(&sent).contains("plain HTTP"), "{}", stderr(&sent));

    // The timeline read back over HTTPS, trusting the CA from the environment.
    let timeline = scratch
        .gpuvet()
        .env("GPUVET_REPORT_CA", &fleet_ca_file)
        .args(["timeline", "--server", &by_name])
        .output()
        .unwrap();
    assert_eq!(timeline.status.code(), Some(0), "{}", stderr(&timeline));
    assert!(
        stdout(&timeline).contains("timeline of job `job-test` attempt 1"),
        "{}",
        stdout(&timeline)
    );
    // Without it, the system's CAs do not know the test's: refused, with the hint.
    let untrusted = scratch
        .gpuvet()
        .env_remove("GPUVET_REPORT_CA")
        .args(["timeline", "--server", &by_name])
        .output()
        .unwrap();
    assert_eq!(untrusted.status.code(), Some(2), "{}", stderr(&untrusted));
    assert!(
        stderr(&untrusted)
            .contains("hint: the server's certificate is not signed by a CA this node trusts"),
        "{}",
        stderr(&untrusted)
    );
}

#[test]
fn a_ca_file_that_cannot_be_read_stops_the_check_before_it_runs() {
    let scratch = Scratch::temp();
    let missing = scratch.path("missing-ca.pem");
    let config = config(&scratch, "missing.json", "https://localhost:9", &missing);
    let check = scratch
        .gpuvet()
        .env("GPUVET_REPORT_TOKEN", TOKEN)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2), "{}", stderr(&check));
    let said = stderr(&check);
    assert!(said.contains("error: cannot trust the CA file `"), "{said}");
    assert!(said.contains("missing-ca.pem"), "{said}");
    assert!(said.contains("hint: set `gpuvet.report_ca`"), "{said}");
}

#[test]
fn plain_http_to_another_machine_is_warned_about_and_loopback_is_not() {
    let scratch = Scratch::temp();
    let check = |name: &str, url: &str| {
        let config = scratch.config(
            name,
            &format!(
                r#"{{"aimaster": {{"sanity_check": {{"micro_benchmarks": "kernel_launch", "timeout": 2}}}},
                   "gpuvet": {{"backend": "sim", "report_to": "{url}", "sim": {{"devices": 1}}}}}}"#
            ),
        );
        scratch
            .gpuvet()
            .env("GPUVET_REPORT_TOKEN", TOKEN)
            .args(["check", "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let remote = check("remote.json", "http://192.0.2.1:9");
    assert!(
        stderr(&remote).contains("`http://192.0.2.1:9` is plain HTTP: the token and every report cross the network in clear"),
        "{}",
        stderr(&remote)
    );
    let local = check("local.json", "http://127.0.0.1:9");
    assert!(!stderr(&local).contains("plain HTTP"), "{}", stderr(&local));
}
