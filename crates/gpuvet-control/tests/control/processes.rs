//! Real processes, really stopped and killed: this test binary re-executes itself as an
//! agent or a coordinator (see [`child_process`]), and the tests send it SIGSTOP
//! and SIGKILL.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gpuvet_control::{
    Agent, AgentOptions, ClusterError, CoordinatorEvent, CoordinatorOptions, Diagnosis, Endpoint,
    Incident, IncidentKind, MemberEventKind, diagnose,
};

use crate::{
    ANTI_HANG, coordinator, identity, in_, is_member_event, join_all, quick_options, token,
    wait_for_event,
};

const ROLE: &str = "GPUVET_CLUSTER_TEST_ROLE";
const PORT: &str = "GPUVET_CLUSTER_TEST_PORT";
const RANK: &str = "GPUVET_CLUSTER_TEST_RANK";
const NNODES: &str = "GPUVET_CLUSTER_TEST_NNODES";
const PORT_FILE: &str = "GPUVET_CLUSTER_TEST_PORT_FILE";
/// A child gives up on its own after this long, so none outlives a failed test.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
const CHILD_PHASE: &str = "child all_reduce_2 step 1";

gpuvet_testkit::child_process_entry!(ROLE, child_process);

/// The child processes: an agent or a coordinator, as `role` says.
fn child_process(role: String) {
    let var = |name| std::env::var(name).unwrap();
    match role.as_str() {
        "agent" => {
            let endpoint = Endpoint {
                host: "127.0.0.1".to_owned(),
                port: var(PORT).parse().unwrap(),
            };
            let identity = identity(var(RANK).parse().unwrap(), var(NNODES).parse().unwrap());
            let agent = Agent::connect(
                &endpoint,
                identity,
                &token(),
                AgentOptions::default(),
                in_(ANTI_HANG),
            )
            .unwrap();
            agent.set_phase(CHILD_PHASE);
            let stop = in_(CHILD_LIFETIME);
            while Instant::now() < stop {
                if agent.recv(in_(Duration::from_millis(200))).is_err() {
                    return;
                }
            }
        }
        "coordinator" => {
            let coordinator = coordinator(1, CoordinatorOptions::default());
            let file = PathBuf::from(var(PORT_FILE));
            let partial = file.with_extension("partial");
            std::fs::write(&partial, coordinator.local_addr().port().to_string()).unwrap();
            std::fs::rename(&partial, &file).unwrap();
            coordinator.wait_for_members(in_(ANTI_HANG));
            std::thread::sleep(CHILD_LIFETIME);
        }
        other => panic!("unknown child role `{other}`"),
    }
}

/// A child process, killed and reaped when dropped.
struct Child(std::process::Child);

impl Child {
    fn spawn(role: &str, vars: &[(&str, String)]) -> Child {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env(ROLE, role)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (name, value) in vars {
            command.env(name, value);
        }
        Child(command.spawn().unwrap())
    }

    fn agent(port: u16, rank: u32, nnodes: u32) -> Child {
        Child::spawn(
            "agent",
            &[
                (PORT, port.to_string()),
                (RANK, rank.to_string()),
                (NNODES, nnodes.to_string()),
            ],
        )
    }

    /// A coordinator for one node, and the port it listens on.
    fn coordinator() -> (Child, u16) {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let file = std::env::temp_dir().join(format!(
            "gpuvet-control-test-{}-{}.port",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let child = Child::spawn("coordinator", &[(PORT_FILE, file.display().to_string())]);
        let deadline = in_(ANTI_HANG);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                break text.parse().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "the child coordinator never wrote its port"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_file(&file);
        (child, port)
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.0.id()).unwrap();
        // SAFETY: kill(2) with a pid this test spawned and has not yet reaped.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn peer_timeouts(ranks: &[u32], waiting_on: u32) -> Vec<Incident> {
    let now = gpuvet_control::clock::unix_now_ms();
    ranks
        .iter()
        .map(|&rank| Incident {
            rank,
            node: Some(format!("node-{rank}")),
            time_ms: now,
            kind: IncidentKind::TimedOut {
                waiting_on: Some(waiting_on),
            },
            detail: "the collective timed out".to_owned(),
        })
        .collect()
}

fn member_incidents(events: &[CoordinatorEvent]) -> Vec<Incident> {
    events
        .iter()
        .filter_map(|event| match event {
            CoordinatorEvent::Member(member) => Incident::from_member_event(member),
            _ => None,
        })
        .collect()
}

#[test]
fn a_stopped_agent_process_is_named_unresponsive_first_then_crashed_when_killed() {
    let coordinator = coordinator(3, quick_options());
    let _agents = join_all(&coordinator, [0, 2]);
    let child = Child::agent(coordinator.local_addr().port(), 1, 3);
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
    wait_for_event(
        &coordinator,
        |e| matches!(e, CoordinatorEvent::Phase { rank: 1, phase, .. } if phase == CHILD_PHASE),
    );

    child.signal(libc::SIGSTOP);
    let (unresponsive, mut events) = wait_for_event(&coordinator, |e| {
        is_member_event(e, 1, |k| matches!(k, MemberEventKind::Unresponsive { .. }))
    });
    let CoordinatorEvent::Member(hung) = &unresponsive else {
        unreachable!()
    };
    let MemberEventKind::Unresponsive { last_phase, .. } = &hung.kind else {
        unreachable!()
    };
    assert_eq!(last_phase, CHILD_PHASE);
    events.push(unresponsive.clone());

    // A killed process's sockets close even when it was stopped.
    child.signal(libc::SIGKILL);
    let (crashed, before) = wait_for_event(&coordinator, |e| {
        is_member_event(e, 1, |k| matches!(k, MemberEventKind::Crashed { .. }))
    });
    events.extend(before);
    events.push(crashed);

    let mut incidents = member_incidents(&events);
    incidents.extend(peer_timeouts(&[0, 2], 1));
    let Diagnosis::FirstError {
        first,
        secondary,
        other_failures,
    } = diagnose(&incidents)
    else {
        panic!("{incidents:#?}")
    };
    assert_eq!((first.rank, first.kind), (1, IncidentKind::Unresponsive));
    assert_eq!(
        secondary.iter().map(|i| i.rank).collect::<Vec<_>>(),
        vec![0, 2]
    );
    // The same node's crash afterwards is reported, not named first.
    assert_eq!(
        other_failures
            .iter()
            .map(|i| (i.rank, i.kind.clone()))
            .collect::<Vec<_>>(),
        vec![(1, IncidentKind::Crashed)]
    );
}

#[test]
fn a_killed_agent_process_is_named_crashed_and_the_first_error() {
    let coordinator = coordinator(3, quick_options());
    let _agents = join_all(&coordinator, [0, 1]);
    let child = Child::agent(coordinator.local_addr().port(), 2, 3);
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
    wait_for_event(
        &coordinator,
        |e| matches!(e, CoordinatorEvent::Phase { rank: 2, phase, .. } if phase == CHILD_PHASE),
    );

    child.signal(libc::SIGKILL);
    let (crashed, before) = wait_for_event(&coordinator, |e| {
        is_member_event(e, 2, |k| matches!(k, MemberEventKind::Crashed { .. }))
    });
    let CoordinatorEvent::Member(member) = &crashed else {
        unreachable!()
    };
    assert!(
        member.describe().starts_with(&format!(
            "rank 2 (node-2) crashed in phase `{CHILD_PHASE}`: "
        )),
        "{}",
        member.describe()
    );

    let mut events = before;
    events.push(crashed);
    let mut incidents = member_incidents(&events);
    incidents.extend(peer_timeouts(&[0, 1], 2));
    let Diagnosis::FirstError {
        first, secondary, ..
    } = diagnose(&incidents)
    else {
        panic!("{incidents:#?}")
    };
    assert_eq!((first.rank, first.kind), (2, IncidentKind::Crashed));
    assert_eq!(secondary.len(), 2);
}

#[test]
fn an_agent_whose_coordinator_is_killed_returns_an_error() {
    let (child, port) = Child::coordinator();
    let endpoint = Endpoint {
        host: "127.0.0.1".to_owned(),
        port,
    };
    let agent = Agent::connect(
        &endpoint,
        identity(0, 1),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap();
    child.signal(libc::SIGKILL);
    let err = agent.recv(in_(ANTI_HANG)).unwrap_err();
    assert!(matches!(err, ClusterError::CoordinatorLost { .. }), "{err}");
    assert!(agent.link_status().is_err());
}

#[test]
fn an_agent_whose_coordinator_is_stopped_gives_up_after_its_deadline() {
    let (child, port) = Child::coordinator();
    let endpoint = Endpoint {
        host: "127.0.0.1".to_owned(),
        port,
    };
    let options = AgentOptions {
        coordinator_deadline: Duration::from_secs(1),
        ..AgentOptions::default()
    };
    let agent =
        Agent::connect(&endpoint, identity(0, 1), &token(), options, in_(ANTI_HANG)).unwrap();
    // A hook that cancels the node's work, and one whose work ended before the link.
    let (fired_tx, fired) = std::sync::mpsc::channel();
    let _cancel = agent.on_link_end({
        let fired = fired_tx.clone();
        move || fired.send("cancel").unwrap()
    });
    drop(agent.on_link_end(move || fired_tx.send("forgotten").unwrap()));
    // A watcher thread, as the binary would run beside the node's work.
    let watched = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| agent.wait_for_link_end(in_(ANTI_HANG)));
        child.signal(libc::SIGSTOP);
        watcher.join().unwrap()
    });
    assert_eq!(fired.recv_timeout(ANTI_HANG), Ok("cancel"));
    assert!(
        fired.try_recv().is_err(),
        "a dropped guard's hook never runs"
    );
    // Registered after the end, a hook runs at once.
    let (late_tx, late) = std::sync::mpsc::channel();
    let _late = agent.on_link_end(move || late_tx.send(()).unwrap());
    assert_eq!(late.try_recv(), Ok(()));
    let Some(ClusterError::CoordinatorUnresponsive {
        silent_for,
        deadline,
    }) = watched
    else {
        panic!("{watched:?}")
    };
    assert!(silent_for > deadline);
    assert!(matches!(
        agent.recv(in_(ANTI_HANG)),
        Err(ClusterError::CoordinatorUnresponsive { .. })
    ));
}
