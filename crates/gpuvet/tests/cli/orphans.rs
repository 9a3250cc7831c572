//! Killing the parent of `gpuvet check --local-nodes 3` with SIGKILL leaves nothing
//! behind: 2 s later no agent, nor any process an agent started, is alive, whatever
//! the moment of the kill (before the agents exist, while they start, while they
//! rendezvous, in the middle of a check). Processes are found by an environment mark
//! that only this test's gpuvet, and so everything it starts, carries.

use std::process::Stdio;
use std::time::Duration;

use crate::common::{self, Scratch};

const MARK: &str = "GPUVET_TEST_ORPHAN_MARK";
const MOMENTS: u32 = 20;
/// The last moment: well into the suite's checks on this machine.
const LATEST: Duration = Duration::from_secs(3);
/// The promise: 2 s after the parent dies, no agent is alive.
const GRACE: Duration = Duration::from_secs(2);
/// Kills under way at once.
const LANES: u32 = 4;
const CHECKS: &str = "all_reduce_2,all_gather_2,network_connectivity,all_to_all_2,gemm_flops";

/// The `index`th moment, denser early, where the agents start and join.
fn moment(index: u32) -> Duration {
    let share = f64::from(index) / f64::from(MOMENTS - 1);
    LATEST.mul_f64(share * share)
}

/// What one kill found.
struct Kill {
    after: Duration,
    /// Processes gpuvet had started when it was killed.
    children_before: usize,
    /// Processes still alive `GRACE` later: pid and arguments.
    left: Vec<(u32, Vec<String>)>,
}

/// Starts `gpuvet check --local-nodes 3`, SIGKILLs it at moment `index`, and looks
/// for what it started `GRACE` later.
fn kill_at(index: u32) -> Kill {
    let after = moment(index);
    let mark = format!("{}-{index}", std::process::id());
    let scratch = Scratch::temp();
    let mut gpuvet = scratch
        .gpuvet()
        .env(MARK, &mark)
        .args(["check", "--json", "--no-store", "--local-nodes", "3"])
        .args(["--backend", "cpu", "--cpu-devices", "1", "--checks", CHECKS])
        // Not pipes: an agent left alive would hold them, and the test would hang
        // instead of failing.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting gpuvet");
    std::thread::sleep(after);
    let before = common::marked_processes(MARK, &mark);
    gpuvet.kill().expect("SIGKILL to gpuvet");
    gpuvet.wait().expect("reaping gpuvet");
    std::thread::sleep(GRACE);
    let left = common::marked_processes(MARK, &mark);
    for (pid, _) in &left {
        // SAFETY: kill(2) on a process this test's gpuvet started; clean up.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    Kill {
        after,
        children_before: before.iter().filter(|(pid, _)| *pid != gpuvet.id()).count(),
        left,
    }
}

#[test]
#[allow(clippy::print_stderr)] // what each kill found is worth seeing in the test log
fn killing_the_local_nodes_parent_leaves_no_agent_at_any_moment() {
    let _turn = common::one_at_a_time();
    // Kills at the same time, a few at once, to keep the test short.
    let outcomes: Vec<Kill> = std::thread::scope(|scope| {
        let lanes: Vec<_> = (0..LANES)
            .map(|lane| {
                scope.spawn(move || {
                    (lane..MOMENTS)
                        .step_by(LANES as usize)
                        .map(kill_at)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        lanes
            .into_iter()
            .flat_map(|lane| lane.join().expect("a kill lane panicked"))
            .collect()
    });
    let mut left_behind = Vec::new();
    let mut kills_with_agents = 0;
    for kill in &outcomes {
        eprintln!(
            "kill after {:?}: {} processes besides the parent, {} left",
            kill.after,
            kill.children_before,
            kill.left.len()
        );
        if kill.children_before > 0 {
            kills_with_agents += 1;
        }
        for (pid, args) in &kill.left {
            left_behind.push(format!("{:?}: pid {pid} `{}`", kill.after, args.join(" ")));
        }
    }
    assert!(
        left_behind.is_empty(),
        "processes outlived their killed parent by {GRACE:?}:\n{}",
        left_behind.join("\n")
    );
    // Otherwise the moments all fell before any agent started and proved nothing.
    assert!(
        kills_with_agents >= MOMENTS / 2,
        "only {kills_with_agents} of {MOMENTS} kills found agents running"
    );
}
