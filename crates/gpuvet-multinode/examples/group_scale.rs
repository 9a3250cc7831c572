//! Benchmark, not a test: how the coordinator scales with the group's size.
//!
//! For each N (default 64, 256 and 1024) the coordinator runs in this process and N
//! agents run as threads of one child process, all on loopback over the real protocol
//! (HMAC handshake, clock pings, heartbeats every 500 ms). The group runs
//! `kernel_launch` and `gemm_flops` on the sim backend (two scripted devices per
//! node), so the figures are the control plane's: rendezvous, one directive round per
//! check, judging N nodes, and the verdict to every node. Printed per N: the time
//! from the coordinator's start to the verdict, and the coordinator process's peak
//! RSS (VmHWM; the agents live in the child, so they are not counted).
//!
//! Usage: `cargo run --release -p gpuvet-multinode --example group_scale [N ...]`

#![allow(clippy::print_stdout, clippy::print_stderr)] // a benchmark prints its figures

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuvet_backend::WorkSpec;
use gpuvet_backend::sim::SimBackend;
use gpuvet_control::{
    Agent, AgentIdentity, AgentOptions, Coordinator, CoordinatorOptions, Endpoint, Token,
};
use gpuvet_core::analysis::Tolerances;
use gpuvet_core::catalog::CheckName;
use gpuvet_core::config::SimScript;
use gpuvet_core::events::Attempt;
use gpuvet_core::pairing::PairingMode;
use gpuvet_multinode::{
    DataPlane, GroupEvent, GroupPlan, NodeSetup, run_group, serve, wait_for_goodbyes,
};

const DEFAULT_SIZES: [u32; 3] = [64, 256, 1024];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("agents") {
        let n: u32 = args[1].parse().expect("N");
        let port: u16 = args[2].parse().expect("port");
        run_agents(n, port, &args[3]);
        return;
    }
    raise_fd_limit();
    let sizes: Vec<u32> = if args.is_empty() {
        DEFAULT_SIZES.to_vec()
    } else {
        args.iter()
            .map(|a| a.parse().expect("a group size"))
            .collect()
    };
    println!("nodes  time_to_verdict_s  of_which_rendezvous_s  coordinator_peak_rss_mib  outcome");
    for n in sizes {
        let (elapsed, joined_after, outcome) = coordinate(n);
        println!(
            "{n:>5}  {elapsed:>17.2}  {joined_after:>21.2}  {:>24.1}  {outcome}",
            peak_rss_kib() as f64 / 1024.0
        );
    }
}

fn attempt(node: &str) -> Attempt {
    Attempt {
        job_id: "scale".to_owned(),
        attempt: 1,
        node: node.to_owned(),
        instance: node.to_owned(),
    }
}

fn coordinate(n: u32) -> (f64, f64, String) {
    let token = Token::random().expect("a token");
    let started = Instant::now();
    let coordinator = Coordinator::bind(
        (Ipv4Addr::LOCALHOST, 0),
        n,
        "scale",
        token.clone(),
        CoordinatorOptions::default(),
    )
    .expect("binding the coordinator");
    let port = coordinator.local_addr().port();
    let mut agents = Command::new(std::env::current_exe().expect("this example"))
        .args(["agents", &n.to_string(), &port.to_string(), token.reveal()])
        .stdout(Stdio::null())
        .spawn()
        .expect("starting the agents");
    let plan = GroupPlan {
        attempt: attempt("coordinator"),
        checks: vec![CheckName::KernelLaunch, CheckName::GemmFlops],
        timeout: Duration::from_secs(300),
        rendezvous_timeout: Duration::from_secs(300),
        tolerance: Tolerances::uniform(0.05),
        baselines: Default::default(),
        expected_inventory: Default::default(),
        pairing: PairingMode::Adaptive,
        collective_bytes: None,
        started_at_ms: 0,
    };
    let mut joined_after = 0.0;
    let report = run_group(&coordinator, &plan, &mut |event| {
        if let GroupEvent::Rendezvous { .. } = event {
            joined_after = started.elapsed().as_secs_f64();
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    // Every agent parses the verdict and says goodbye before the coordinator does.
    wait_for_goodbyes(&coordinator, Instant::now() + Duration::from_secs(120));
    coordinator.shutdown("done");
    let _ = agents.wait();
    let outcome = format!(
        "{} ({})",
        report.outcome.as_str(),
        report
            .group
            .as_ref()
            .and_then(|g| g.first_error.as_ref())
            .map_or_else(|| report.summary(), |e| e.detail.clone())
    );
    (elapsed, joined_after, outcome)
}

fn run_agents(n: u32, port: u16, secret: &str) {
    raise_fd_limit();
    let token = Token::new(secret).expect("the token");
    let endpoint = Endpoint {
        host: "127.0.0.1".to_owned(),
        port,
    };
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let (token, endpoint) = (token.clone(), endpoint.clone());
            std::thread::Builder::new()
                .stack_size(512 << 10)
                .spawn(move || agent(rank, n, &endpoint, &token))
                .expect("an agent thread")
        })
        .collect();
    for handle in handles {
        let _ = handle.join();
    }
}

fn agent(rank: u32, n: u32, endpoint: &Endpoint, token: &Token) {
    let node = format!("node-{rank}");
    let backend = Arc::new(SimBackend::new(SimScript {
        seed: u64::from(rank),
        devices: 2,
        noise: 0.01,
        ..SimScript::default()
    }));
    let plane = DataPlane::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 1, &[]).expect("a data plane");
    let info = plane
        // One machine per simulated node, as in a real group: nodes that share a
        // machine would take turns.
        .node_info(&*backend, format!("sim-host-{rank}"))
        .expect("node info");
    let identity = AgentIdentity {
        job_id: "scale".to_owned(),
        rank,
        nnodes: n,
        node: node.clone(),
        data_addr: Some(plane.addr().expect("an address")),
        info: serde_json::to_value(info).expect("node info as JSON"),
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    let agent = match Agent::connect(endpoint, identity, token, AgentOptions::default(), deadline) {
        Ok(agent) => agent,
        Err(err) => {
            eprintln!("rank {rank}: {err}");
            return;
        }
    };
    let setup = NodeSetup {
        backend,
        attempt: attempt(&node),
        nnodes: n as usize,
        tolerance: Tolerances::uniform(0.05),
        baselines: Default::default(),
        work: WorkSpec::default(),
        python: "python3".into(),
        // Thousands of simulated nodes in one process: no worker processes.
        worker: None,
    };
    let serving = Instant::now();
    if let Err(err) = serve(&agent, &setup, &plane, deadline) {
        eprintln!(
            "rank {rank}: {err} ({:.1}s after joining)",
            serving.elapsed().as_secs_f64()
        );
    }
    agent.leave("done");
}

/// Peak resident set of this process, KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A thousand agents need a few thousand sockets; the soft limit is often 1024.
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, initialized struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
