//! Credentials in the command lines gpuvet keeps (a rebuild hook's, as a list and as a
//! shell string, and the app of `gpuvet run -- ...`) never reach the node's store, the
//! fleet server or a fault bundle: each form a secret takes (`curl -u user:PASS`,
//! `mysql -pPASS`, ...) with a generated secret, through the real processes. The
//! programs are stand-ins on `PATH` that note their arguments, which shows that the
//! secret did reach the command itself.

use std::path::Path;

use crate::common::serve::{Serve, TOKEN};
use crate::common::{Scratch, stderr};

/// The forms of a secret in a command line, `{S}` standing for it.
const FORMS: &[&[&str]] = &[
    &["curl", "-u", "admin:{S}", "https://h/x"],
    &["mysql", "-uroot", "-p{S}", "db"],
    &["sshpass", "-p", "{S}", "ssh", "host", "uptime"],
    &["psql", "host=db password={S} user=app", "-p", "5432"],
    &[
        "sh",
        "-c",
        "PGPASSWORD={S} psql -p 5432 && curl -U proxy:{S} h",
    ],
    &[
        "kubectl",
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=db={S}",
    ],
];

/// How many stand-ins each form runs.
const PROGRAMS_RUN: &[usize] = &[1, 1, 1, 1, 2, 1];

/// The programs the forms run, as stand-ins.
const PROGRAMS: &[&str] = &["curl", "mysql", "sshpass", "psql", "kubectl"];

/// A secret no fixed text holds: letters, digits and punctuation, from a fixed seed.
fn secret(round: u64) -> String {
    const CHARS: &[u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!%^*_+-.,~";
    let mut state = 0x2545_f491_4f6c_dd1d ^ (round + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let len = 12 + next(12);
    let mut secret = format!("Z{}", next(10));
    while secret.len() < len {
        secret.push(CHARS[next(CHARS.len())] as char);
    }
    secret
}

/// `argv` as one shell line, each word single-quoted.
fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every file under `dir` (the stores and their WAL) holds no `secret`.
fn assert_nowhere_in_files(dir: &Path, secret: &str, what: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.contains(".db") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes
                .windows(secret.len())
                .any(|window| window == secret.as_bytes()),
            "{what}: `{secret}` is in {}",
            path.display()
        );
    }
}

/// A bundle of attempt `attempt`, from the node's store or from `server`: it holds the
/// command's trace (`needle`), and no `secret` in any file.
fn assert_bundle_clean(
    scratch: &Scratch,
    server: Option<&Serve>,
    attempt: u32,
    secret: &str,
    needle: &str,
) {
    let out = scratch.path(&format!(
        "bundle-{attempt}-{}.tar.gz",
        if server.is_some() { "server" } else { "node" }
    ));
    let mut command = scratch.gpuvet();
    command
        .args([
            "bundle",
            "--job",
            "job-test",
            "--attempt",
            &attempt.to_string(),
            "-o",
        ])
        .arg(&out);
    if let Some(server) = server {
        command.args(["--server", &server.url("")]);
    }
    let made = command.output().unwrap();
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    let bundle = gpuvet_bundle::read(
        std::fs::File::open(&out).unwrap(),
        &gpuvet_bundle::Limits::default(),
    )
    .expect("a bundle that reads back");
    let mut seen = false;
    for file in &bundle.files {
        let text = String::from_utf8_lossy(&file.bytes);
        assert!(
            !text.contains(secret),
            "the bundle's `{}` holds `{secret}`",
            file.path
        );
        seen |= text.contains(needle);
    }
    assert!(seen, "the bundle of attempt {attempt} shows `{needle}`");
}

#[test]
fn a_generated_secret_in_a_command_line_reaches_no_store_server_or_bundle() {
    for (round, form) in FORMS.iter().enumerate() {
        let secret = secret(round as u64);
        let argv: Vec<String> = form.iter().map(|w| w.replace("{S}", &secret)).collect();
        let scratch = Scratch::temp();
        let bin = scratch.path("bin");
        std::fs::create_dir(&bin).unwrap();
        let ran = scratch.path("ran");
        for program in PROGRAMS {
            let path = bin.join(program);
            std::fs::write(
                &path,
                format!("#!/bin/sh\necho \"$@\" >> '{}'\n", ran.display()),
            )
            .unwrap();
            let mut permissions = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
            std::fs::set_permissions(&path, permissions).unwrap();
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let server_dir = scratch.path("server");
        std::fs::create_dir(&server_dir).unwrap();
        let server = Serve::start(&server_dir.join("server.db"), "127.0.0.1:0");
        // The hook as a list in even rounds, as a shell string in odd ones.
        let hook = if round % 2 == 0 {
            serde_json::json!(argv)
        } else {
            serde_json::json!(shell_line(&argv))
        };
        let gpuvet = serde_json::json!({
            "backend": "cpu", "cpu_devices": 1, "gemm": {"size": 256},
            "baselines": {"gemm_flops": {"floor": 1_000_000}},
            "report_to": format!("http://{}", server.addr),
            "rebuild_hook": hook,
        });
        // Attempt 1: a check that cannot pass asks for the rebuild, and the hook runs.
        let rebuild = scratch.config(
            "rebuild.json",
            &serde_json::json!({
                "aimaster": {"sanity_check": {"fail_action": "rebuild", "micro_benchmarks": "gemm_flops", "timeout": 2}},
                "gpuvet": gpuvet,
            })
            .to_string(),
        );
        // Attempt 2: no checks; the app is the command.
        let app = scratch.config(
            "app.json",
            &serde_json::json!({
                "aimaster": {"runtime_check": {"micro_benchmarks": "c4d"}},
                "gpuvet": {"report_to": format!("http://{}", server.addr)},
            })
            .to_string(),
        );
        let run = |config: &Path, tail: &[String]| {
            scratch
                .gpuvet()
                .env("PATH", &path)
                .env("GPUVET_REPORT_TOKEN", TOKEN)
                .arg("run")
                .arg("--config")
                .arg(config)
                .arg("--")
                .args(tail)
                .output()
                .unwrap()
        };
        let hooked = run(&rebuild, &["true".to_owned()]);
        assert_eq!(hooked.status.code(), Some(75), "{}", stderr(&hooked));
        let started = run(&app, &argv);
        assert_eq!(started.status.code(), Some(0), "{}", stderr(&started));
        let pushed = scratch
            .gpuvet()
            .env("GPUVET_REPORT_TOKEN", TOKEN)
            .args(["push", "--config"])
            .arg(&app)
            .output()
            .unwrap();
        assert_eq!(pushed.status.code(), Some(0), "{}", stderr(&pushed));

        // The premise: the commands ran with the secret.
        let ran = std::fs::read_to_string(&ran).unwrap_or_default();
        assert!(ran.contains(&secret), "{form:?}: {ran}");
        assert_eq!(
            ran.lines().count(),
            2 * PROGRAMS_RUN[round],
            "{form:?}: {ran}"
        );
        // What was kept: the node's store, its events, the server's store and API.
        assert_nowhere_in_files(scratch.dir.path(), &secret, "the node's store");
        let events = scratch.events();
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
        assert!(kinds.contains(&"InstanceRebuildRequested"), "{kinds:?}");
        assert!(kinds.contains(&"InstanceStarted"), "{kinds:?}");
        assert!(!serde_json::to_string(&events).unwrap().contains(&secret));
        assert_nowhere_in_files(&server_dir, &secret, "the server's store");
        let served = server.get_json("/api/v1/events").to_string();
        assert!(served.contains("InstanceStarted"), "{served}");
        assert!(!served.contains(&secret), "the server's events: {served}");
        // The bundles: the config with the hook (attempt 1), the app's start (2).
        for server in [None, Some(&server)] {
            assert_bundle_clean(&scratch, server, 1, &secret, "rebuild_hook");
            assert_bundle_clean(&scratch, server, 2, &secret, "InstanceStarted");
        }
        server.stop();
    }
}
