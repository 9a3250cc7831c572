//! Helpers shared by the integration tests: run the real binary in a scratch
//! directory with its own store.

#![allow(dead_code)]

pub mod explained;
pub mod group;
pub mod netns;
pub mod serve;

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A test's turn from [`one_at_a_time`], until dropped.
#[derive(Debug)]
pub struct Turn {
    /// Closing it releases the lock.
    _locked: File,
}

/// Tests that run groups measure bandwidth and judge it against peers: they take
/// turns, so that none measures another's load on a small machine.
///
/// The turn is an exclusive `flock` on one file in the temp dir, so it holds across
/// processes too: nextest runs each test in a process of its own (and
/// `.config/nextest.toml` puts these tests in one test group besides, so that none
/// waits here in a slot another test could use).
pub fn one_at_a_time() -> Turn {
    let path = std::env::temp_dir().join("gpuvet-tests-one-at-a-time.lock");
    // Each call opens the file anew: threads of one process then hold separate locks
    // and exclude each other too. Read access is enough to lock, and lets a file
    // another user created serve.
    let file = File::open(&path)
        .or_else(|_| OpenOptions::new().append(true).create(true).open(&path))
        .unwrap_or_else(|err| panic!("opening {}: {err}", path.display()));
    loop {
        // SAFETY: flock(2) on a descriptor `file` owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Turn { _locked: file };
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.kind(),
            ErrorKind::Interrupted,
            "flock {}: {err}",
            path.display()
        );
    }
}

#[derive(Debug)]
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn temp() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn store(&self) -> PathBuf {
        self.path("gpuvet.db")
    }

    /// Writes a config file and returns its path.
    pub fn config(&self, name: &str, json: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, json).expect("writing a config");
        path
    }

    /// `gpuvet ARGS` with this scratch's store and a fixed identity.
    pub fn gpuvet(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpuvet"));
        command
            .current_dir(self.dir.path())
            .env("GPUVET_STORE", self.store())
            .env("GPUVET_JOB_ID", "job-test")
            .env("GPUVET_NODE", "node-test")
            .env("GPUVET_INSTANCE", "instance-test")
            .env_remove("GPUVET_CONFIG")
            .env_remove("GPUVET_PYTHON")
            .env_remove("GPUVET_READ_TOKEN");
        command
    }

    /// Runs `gpuvet ARGS` (as [`Scratch::gpuvet`]) to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.gpuvet().args(args).output().expect("running gpuvet")
    }

    /// The events of this scratch's store, as JSON.
    pub fn events(&self) -> Vec<serde_json::Value> {
        let output = self
            .gpuvet()
            .args(["events", "--json"])
            .output()
            .expect("running gpuvet events");
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).expect("events JSON")
    }

    pub fn event_kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// PAI's own sample config, verbatim: all 13 checks (the file core's config tests read).
pub const PAI_SAMPLE: &str =
    include_str!("../../../../gpuvet-model/tests/fixtures/pai_sample.json");

/// Asserts that the command exited with `code` and said `needle` on stderr.
#[track_caller]
pub fn assert_exit(output: &Output, code: i32, needle: &str) {
    assert_eq!(output.status.code(), Some(code), "{}", stderr(output));
    assert!(stderr(output).contains(needle), "{}", stderr(output));
}

/// The error gpuvet ended with: the lines of stderr from its `error:` line on (its
/// `caused by:` lines and its `hint:`), after whatever notes came before.
#[track_caller]
pub fn error_lines(output: &Output) -> Vec<String> {
    let text = stderr(output);
    let lines: Vec<String> = text
        .lines()
        .skip_while(|line| !line.starts_with("error: "))
        .map(str::to_owned)
        .collect();
    assert!(!lines.is_empty(), "no `error:` line: {text}");
    lines
}

/// The OS's text for `errno`, as a `caused by:` line shows it.
pub fn os_error(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not JSON ({err}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Live processes whose environment has `var=value`: pid and arguments. A test marks
/// the gpuvet it starts, and every process gpuvet starts inherits the mark. Zombies
/// have no environment left, so they are not counted.
pub fn marked_processes(var: &str, value: &str) -> Vec<(u32, Vec<String>)> {
    let wanted = format!("{var}={value}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end while it is read: then it is not there.
        let (Ok(environ), Ok(cmdline)) = (
            std::fs::read(entry.path().join("environ")),
            std::fs::read(entry.path().join("cmdline")),
        ) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == wanted.as_bytes())
        {
            let args = cmdline
                .split(|&b| b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect();
            found.push((pid, args));
        }
    }
    found
}

pub fn exists(path: &Path) -> bool {
    path.exists()
}

/// A Python that imports torch, for the tests of `pytorch_gloo_2`'s torch engine
/// (`.ci/run` installs one). Those tests are ignored by default; run with
/// `--include-ignored` and without the variable they fail here, saying what is missing.
pub fn torch_python() -> String {
    std::env::var("GPUVET_TEST_TORCH_PYTHON").unwrap_or_else(|_| {
        panic!(
            "this test needs GPUVET_TEST_TORCH_PYTHON set to a Python that imports torch \
             (.ci/run installs one)"
        )
    })
}

/// The measured values of a check's entities in a JSON report.
pub fn entity_values(check: &serde_json::Value) -> Vec<f64> {
    check["entities"]
        .as_array()
        .map(|entities| {
            entities
                .iter()
                .filter_map(|e| e["measurement"]["value"].as_f64())
                .collect()
        })
        .unwrap_or_default()
}
