//! A group of real `gpuvet check` processes, one per rank, joined over real sockets:
//! on loopback, or each in its own network namespace.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuvet_testkit::free_port;

use super::Scratch;

/// The group's token (long enough to be accepted).
pub const GROUP_TOKEN: &str = "group-secret-for-tests";

/// How to start the group.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    pub nodes: u32,
    pub checks: String,
    /// The coordinator's address as agents reach it.
    pub master_addr: String,
    pub port: u16,
    pub rendezvous_secs: f64,
    /// Per rank: the data-plane IP to bind, if any.
    pub data_addrs: Vec<Option<String>>,
    /// Per rank: the network namespace to run in, if any.
    pub namespaces: Vec<Option<String>>,
    /// Per rank: the coordinator's address as that rank reaches it, when not
    /// `master_addr` (rank 0 may reach its own coordinator on loopback).
    pub master_addrs: Vec<Option<String>>,
    /// Per rank: a token other than the group's.
    pub tokens: Vec<Option<String>>,
    /// Per rank: the backend flags (`--backend cpu --cpu-devices 1` unless set).
    pub backend_args: Vec<Vec<String>>,
    /// Ranks not to start at all.
    pub absent: Vec<u32>,
    pub extra_args: Vec<String>,
    /// Run `gpuvet run -- APP` instead of `gpuvet check --json`.
    pub app: Option<Vec<String>>,
    /// `gpuvet check` keeps its report in `rank{R}.db` instead of `--no-store`.
    pub keep_store: bool,
    /// More environment for every rank.
    pub env: Vec<(String, String)>,
}

impl GroupSpec {
    pub fn loopback(nodes: u32, checks: &str) -> Self {
        GroupSpec {
            nodes,
            checks: checks.to_owned(),
            master_addr: "127.0.0.1".to_owned(),
            port: free_port(),
            rendezvous_secs: 20.0,
            data_addrs: vec![None; nodes as usize],
            namespaces: vec![None; nodes as usize],
            master_addrs: vec![None; nodes as usize],
            tokens: vec![None; nodes as usize],
            backend_args: vec![
                ["--backend", "cpu", "--cpu-devices", "1"]
                    .map(str::to_owned)
                    .to_vec();
                nodes as usize
            ],
            absent: Vec::new(),
            extra_args: Vec::new(),
            app: None,
            keep_store: false,
            env: Vec::new(),
        }
    }
}

#[derive(Debug)]
pub struct Rank {
    pub rank: u32,
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Rank {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a pid")
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// What one rank left behind.
#[derive(Debug)]
pub struct Finished {
    pub rank: u32,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Seconds from the start of the group until this rank exited.
    pub exited_after: f64,
}

impl Finished {
    pub fn report(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|err| {
            panic!(
                "rank {} printed no JSON report ({err}); stdout: {}\nstderr: {}",
                self.rank, self.stdout, self.stderr
            )
        })
    }
}

#[derive(Debug)]
pub struct Group {
    pub ranks: Vec<Rank>,
    started: Instant,
}

impl Group {
    pub fn start(scratch: &Scratch, spec: &GroupSpec) -> Group {
        let mut group = Group {
            ranks: Vec::new(),
            started: Instant::now(),
        };
        for rank in 0..spec.nodes {
            if !spec.absent.contains(&rank) {
                group.start_rank(scratch, spec, rank);
            }
        }
        group
    }

    /// Starts `rank` of `spec` (one left out by `absent`, or a second process with the
    /// same rank); its output goes to files named after the rank and a counter.
    pub fn start_rank(&mut self, scratch: &Scratch, spec: &GroupSpec, rank: u32) {
        let ranks = &mut self.ranks;
        {
            let i = rank as usize;
            let nth = ranks.iter().filter(|r| r.rank == rank).count();
            let stdout = scratch.path(&format!("rank{rank}.{nth}.out"));
            let stderr = scratch.path(&format!("rank{rank}.{nth}.err"));
            let mut command = match &spec.namespaces[i] {
                Some(ns) => {
                    let mut command = Command::new("ip");
                    command.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_gpuvet")]);
                    command
                }
                None => Command::new(env!("CARGO_BIN_EXE_gpuvet")),
            };
            match &spec.app {
                None if spec.keep_store => command.args(["check", "--json"]),
                None => command.args(["check", "--json", "--no-store"]),
                Some(_) => command.arg("run"),
            };
            command
                .current_dir(scratch.dir.path())
                .env("GPUVET_STORE", scratch.path(&format!("rank{rank}.db")))
                .args(&spec.backend_args[i])
                .args(["--checks", &spec.checks])
                .args(["--rendezvous-timeout", &spec.rendezvous_secs.to_string()])
                .args(&spec.extra_args);
            if let Some(ip) = &spec.data_addrs[i] {
                command.args(["--data-addr", ip]);
            }
            if let Some(app) = &spec.app {
                command.arg("--").args(app);
            }
            for var in [
                "GPUVET_CONFIG",
                "GPUVET_DATA_ADDR",
                "GPUVET_LISTEN_ADDR",
                "GPUVET_PYTHON",
                "LWS_LEADER_ADDRESS",
                "LWS_GROUP_SIZE",
                "LWS_WORKER_INDEX",
                "GROUP_RANK",
                "MASTER_PORT",
            ] {
                command.env_remove(var);
            }
            command
                .env("NNODES", spec.nodes.to_string())
                .env("NODE_RANK", rank.to_string())
                .env(
                    "MASTER_ADDR",
                    spec.master_addrs[i].as_ref().unwrap_or(&spec.master_addr),
                )
                .env("GPUVET_PORT", spec.port.to_string())
                .env(
                    "GPUVET_TOKEN",
                    spec.tokens[i].as_deref().unwrap_or(GROUP_TOKEN),
                )
                .env("GPUVET_JOB_ID", "job-group")
                .env("GPUVET_NODE", format!("n{rank}"))
                .env("GPUVET_INSTANCE", format!("i{rank}"))
                .envs(spec.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&stdout).expect("stdout file"))
                .stderr(std::fs::File::create(&stderr).expect("stderr file"));
            let child = command.spawn().expect("starting gpuvet");
            ranks.push(Rank {
                rank,
                child,
                stdout,
                stderr,
            });
        }
    }

    /// The first process started as `rank`.
    pub fn rank(&self, rank: u32) -> &Rank {
        self.ranks
            .iter()
            .find(|r| r.rank == rank)
            .expect("a started rank")
    }

    /// Waits until `rank`'s stderr contains `needle`; panics after `limit`.
    pub fn wait_for_stderr(&self, rank: u32, needle: &str, limit: Duration) {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if self.rank(rank).stderr().contains(needle) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "rank {rank} never wrote `{needle}`; stderr: {}",
            self.rank(rank).stderr()
        );
    }

    /// Waits for `rank`'s process to exit (the coordinator's, so that a stopped rank can
    /// be resumed once the verdict is out); panics after `limit`.
    pub fn wait_for_exit(&mut self, rank: u32, limit: Duration) {
        let until = Instant::now() + limit;
        let child = &mut self
            .ranks
            .iter_mut()
            .find(|r| r.rank == rank)
            .expect("a rank")
            .child;
        while Instant::now() < until {
            if child.try_wait().expect("polling").is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("rank {rank} did not exit within {limit:?}");
    }

    pub fn signal(&self, rank: u32, signal: i32) {
        // SAFETY: kill(2) on a child we started and have not reaped.
        let rc = unsafe { libc::kill(self.rank(rank).pid(), signal) };
        assert_eq!(rc, 0, "kill({signal}) on rank {rank}");
    }

    /// Waits for every rank to exit; any still running after `limit` is killed and the
    /// test fails, since a hang is the one outcome gpuvet must never have.
    pub fn finish(mut self, limit: Duration) -> Vec<Finished> {
        let until = self.started + limit;
        let mut finished = Vec::new();
        let mut hung = Vec::new();
        for rank in &mut self.ranks {
            let code = loop {
                match rank.child.try_wait().expect("polling a rank") {
                    Some(status) => break Some(status),
                    None if Instant::now() >= until => {
                        // SIGCONT first, in case the test stopped it.
                        // SAFETY: signals to a child we started and have not reaped.
                        unsafe {
                            libc::kill(rank.pid(), libc::SIGCONT);
                        }
                        let _ = rank.child.kill();
                        let _ = rank.child.wait();
                        hung.push(rank.rank);
                        break None;
                    }
                    None => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            finished.push(Finished {
                rank: rank.rank,
                code: code.and_then(|status| status.code()),
                stdout: std::fs::read_to_string(&rank.stdout).unwrap_or_default(),
                stderr: rank.stderr(),
                exited_after: self.started.elapsed().as_secs_f64(),
            });
        }
        assert!(
            hung.is_empty(),
            "ranks {hung:?} were still running after {limit:?}: {finished:#?}"
        );
        finished
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for rank in &mut self.ranks {
            if matches!(rank.child.try_wait(), Ok(None)) {
                // SAFETY: signals to a child we started and have not reaped.
                unsafe {
                    libc::kill(rank.pid(), libc::SIGCONT);
                }
                let _ = rank.child.kill();
                let _ = rank.child.wait();
            }
        }
    }
}

/// The names of the entities a check's report calls slow or faulty.
pub fn findings(report: &serde_json::Value, check: &str) -> Vec<String> {
    let check = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == check)
        .unwrap_or_else(|| panic!("no `{check}` in {report:#}"));
    check["entities"]
        .as_array()
        .map(|entities| {
            entities
                .iter()
                .filter(|e| e["verdict"] == "slow" || e["verdict"] == "faulty")
                .map(|e| entity_name(&e["entity"]))
                .collect()
        })
        .unwrap_or_default()
}

pub fn entity_name(entity: &serde_json::Value) -> String {
    match entity["kind"].as_str() {
        Some("node_pair") => format!(
            "{}<->{}",
            entity["a"].as_str().unwrap(),
            entity["b"].as_str().unwrap()
        ),
        Some("device") => format!(
            "{}/dev{}",
            entity["node"].as_str().unwrap(),
            entity["index"]
        ),
        _ => entity["node"].as_str().unwrap_or("?").to_owned(),
    }
}
