//! The `gpuvet-server` program end to end: it says where it listens, serves, and exits
//! 0 on SIGTERM; and each way it cannot start is an error with its exit code and a
//! hint; with a read token, reads need it and a browser signs in by a one-time link,
//! while its log and the URLs it gives hold neither the token nor the session. (The
//! API itself is `api.rs`'s.)

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuvet-server"));
    command
        .env_remove("GPUVET_CONFIG")
        .env_remove("GPUVET_STORE")
        .env_remove("GPUVET_REPORT_TOKEN")
        .env_remove("GPUVET_READ_TOKEN");
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Waits for `child` to exit, killing it after `limit`.
fn wait(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn it_serves_its_store_until_sigterm_then_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = server()
        .args(["--listen", "127.0.0.1:0", "--store"])
        .arg(dir.path().join("server.db"))
        .env("GPUVET_REPORT_TOKEN", "a-token")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("gpuvet serve: listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    let mut health = ureq::get(&format!("http://{addr}/api/v1/health"))
        .call()
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let body = health.body_mut().read_to_string().unwrap();
    assert!(body.contains("ok"), "{body}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait(&mut child, Duration::from_secs(10)), Some(0));
}

#[test]
fn without_a_token_it_warns_that_it_takes_no_writes_and_that_others_can_read() {
    let dir = tempfile::tempdir().unwrap();
    // An address in use: the warnings come first, then the error.
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let output = server()
        .arg("--listen")
        .arg(taken.local_addr().unwrap().to_string())
        .arg("--store")
        .arg(dir.path().join("server.db"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stderr(&output);
    let lines: Vec<&str> = said.lines().collect();
    assert!(
        lines[0].starts_with("warning: serving plain HTTP on `0.0.0.0:"),
        "{said}"
    );
    assert!(
        lines[1].starts_with("warning: `GPUVET_REPORT_TOKEN` is not set"),
        "{said}"
    );
    assert!(
        lines[2].contains("`GPUVET_READ_TOKEN` is not set"),
        "{said}"
    );
    assert!(
        lines[3].starts_with("error: cannot listen on `0.0.0.0:"),
        "{said}"
    );
    assert!(said.contains("\nhint: pick another address"), "{said}");
}

#[test]
fn a_store_that_cannot_be_opened_is_a_store_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let output = server()
        .args(["--listen", "127.0.0.1:0", "--store"])
        .arg(file.join("server.db"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(74), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.contains("error: cannot open the store at"), "{said}");
    assert!(said.contains("is a file, not a directory"), "{said}");
    assert!(said.contains("\nhint: "), "{said}");
}

#[test]
fn a_config_it_cannot_read_is_a_usage_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let output = server().arg("--config").arg(&missing).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with(&format!(
            "error: cannot read the config file `{}`",
            missing.display()
        )),
        "{}",
        stderr(&output)
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"gpuvet": {"store": 7}}"#).unwrap();
    let output = server().arg("--config").arg(&bad).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with(&format!(
            "error: `{}`: invalid config at `gpuvet.store`",
            bad.display()
        )),
        "{}",
        stderr(&output)
    );
}

/// `method url` with `headers`: the status, the `Set-Cookie` header and the body.
fn call(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = ureq::http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = agent.run(request.body(()).unwrap()).unwrap();
    let cookie = response
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.body_mut().read_to_string().unwrap();
    (response.status().as_u16(), cookie, body)
}

#[test]
fn with_a_read_token_reads_need_it_and_its_log_holds_no_token_or_session() {
    const READ_TOKEN: &str = "program-read-token-s3cret";
    let dir = tempfile::tempdir().unwrap();
    let mut child = server()
        .args(["--listen", "127.0.0.1:0", "--store"])
        .arg(dir.path().join("server.db"))
        .env("GPUVET_REPORT_TOKEN", "a-token")
        .env("GPUVET_READ_TOKEN", READ_TOKEN)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    log.read_line(&mut first).unwrap();
    let addr = first
        .strip_prefix("gpuvet serve: listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no warning on loopback with both tokens: {first}"))
        .to_owned();
    let url = |path: &str| format!("http://{addr}{path}");
    let read = format!("Bearer {READ_TOKEN}");

    // A node pushes with the write token alone.
    let attempt =
        r#"{"job_id": "j", "attempt": 1, "node": "n", "instance": "p", "started_at_ms": 1}"#;
    let mut pushed = ureq::post(&url("/api/v1/attempts"))
        .header("authorization", "Bearer a-token")
        .header("content-type", "application/json")
        .send(attempt)
        .unwrap();
    assert_eq!(
        pushed.status().as_u16(),
        200,
        "{}",
        pushed.body_mut().read_to_string().unwrap()
    );

    for path in ["/api/v1/jobs", "/", "/metrics"] {
        assert_eq!(call("GET", &url(path), &[]).0, 401, "{path}");
        assert_eq!(
            call("GET", &url(path), &[("authorization", &read)]).0,
            200,
            "{path}"
        );
    }
    assert_eq!(call("GET", &url("/api/v1/health"), &[]).0, 200);

    let (status, _, body) = call("POST", &url("/api/v1/session"), &[("authorization", &read)]);
    assert_eq!(status, 200, "{body}");
    let link: serde_json::Value = serde_json::from_str(&body).unwrap();
    let path = link["path"].as_str().unwrap().to_owned();
    let (status, set_cookie, _) = call("GET", &url(&path), &[]);
    assert_eq!(status, 200);
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let session = cookie.strip_prefix("gpuvet_session=").unwrap().to_owned();
    assert_eq!(call("GET", &url(&path), &[]).0, 401, "a link signs in once");
    let (status, _, page) = call("GET", &url("/instances/j/n"), &[("cookie", &cookie)]);
    assert_eq!(status, 200, "{page}");

    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait(&mut child, Duration::from_secs(10)), Some(0));
    let mut said = first;
    std::io::Read::read_to_string(&mut log, &mut said).unwrap();
    for secret in [
        READ_TOKEN,
        path.trim_start_matches("/session/"),
        session.as_str(),
    ] {
        assert!(!said.contains(secret), "`{secret}` in the log: {said}");
    }
    for url in [path.as_str(), page.as_str()] {
        assert!(!url.contains(READ_TOKEN), "{url}");
    }
}
