//! Ranks in real child processes: the test binary re-runs itself with
//! `GPUVET_TCP_CHILD` set, and that child becomes one rank. The parent is rank 0, so it
//! can stop (SIGSTOP) or kill (SIGKILL) a rank mid-collective and see who gets named.
//!
//! The child announces its listener on stdout (`GPUVET_CHILD listen ADDR`), reads the
//! group's addresses from stdin, runs the work and reports one line per collective.

mod tcp_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpuvet_backend::CancelToken;
use gpuvet_dataplane::tcp::{CollectiveSpec, TcpGroup, Topology};
use tcp_support::{DEADLINE, assert_good, small_spec, spec_for};

const CHILD_ENV: &str = "GPUVET_TCP_CHILD";
const TAG: &str = "GPUVET_CHILD";

/// What a child rank runs, as `rank;collective,collective;long`.
fn child_work(rank: usize, collectives: &str, long: bool) -> String {
    format!("{rank};{collectives};{}", u8::from(long))
}

/// A collective that runs for a minute unless stopped: the one faults interrupt.
fn long_spec() -> CollectiveSpec {
    CollectiveSpec {
        min_seconds: 60.0,
        max_iterations: 1_000_000,
        stall_timeout: Duration::from_secs(2),
        ..small_spec(4 << 20)
    }
}

gpuvet_testkit::child_process_entry!(CHILD_ENV, child_rank);

/// The child's side: one rank, doing `work` (see [`child_work`]).
fn child_rank(work: String) {
    let mut fields = work.split(';');
    let rank: usize = fields.next().unwrap().parse().unwrap();
    let collectives: Vec<String> = fields
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let long = fields.next() == Some("1");

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "{TAG} listen {}", listener.local_addr().unwrap()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let peers: Vec<SocketAddr> = line.trim().split(',').map(|a| a.parse().unwrap()).collect();

    let cancel = CancelToken::new();
    let deadline = Instant::now() + DEADLINE;
    let spec = spec_for(rank, &peers, 1, Topology::Ring);
    let mut group = TcpGroup::establish(&spec, &listener, deadline, &cancel).unwrap();
    let collective_spec = if long {
        long_spec()
    } else {
        small_spec(1 << 20)
    };
    for collective in collectives {
        let result = match collective.as_str() {
            "all_reduce" => group.all_reduce(&collective_spec, deadline, &cancel),
            "all_gather" => group.all_gather(&collective_spec, deadline, &cancel),
            other => panic!("unknown collective {other}"),
        };
        match result {
            Ok(sample) => writeln!(
                out,
                "{TAG} ok {collective} busbw={} wrong={:?}",
                sample.value, sample.wrong_result
            ),
            Err(error) => writeln!(out, "{TAG} err {collective} {error}"),
        }
        .unwrap();
        out.flush().unwrap();
    }
}

/// A child rank and its tagged stdout lines.
struct ChildRank {
    child: Child,
    lines: mpsc::Receiver<String>,
    listen: SocketAddr,
}

impl ChildRank {
    fn spawn(rank: usize, collectives: &str, long: bool) -> ChildRank {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_ENV, child_work(rank, collectives, long))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Only tagged lines are the child's reports.
                if let Some(report) = line.strip_prefix(TAG) {
                    let _ = sender.send(report.trim().to_owned());
                }
            }
        });
        let first = lines
            .recv_timeout(DEADLINE)
            .expect("the child announces its listener");
        let listen = first.strip_prefix("listen ").unwrap().parse().unwrap();
        ChildRank {
            child,
            lines,
            listen,
        }
    }

    fn send_peers(&mut self, peers: &[SocketAddr]) {
        let list: Vec<String> = peers.iter().map(SocketAddr::to_string).collect();
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{}", list.join(",")).unwrap();
        stdin.flush().unwrap();
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("the child reports")
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for ChildRank {
    fn drop(&mut self) {
        // SIGKILL ends even a stopped child; reaping it keeps no zombie behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Rank 0 here, ranks 1.. as children; returns rank 0's group and the children.
fn group_with_children(
    children: usize,
    collectives: &str,
    long: bool,
) -> (TcpGroup, Vec<ChildRank>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut ranks: Vec<ChildRank> = (1..=children)
        .map(|rank| ChildRank::spawn(rank, collectives, long))
        .collect();
    let mut peers = vec![listener.local_addr().unwrap()];
    peers.extend(ranks.iter().map(|child| child.listen));
    for child in &mut ranks {
        child.send_peers(&peers);
    }
    let spec = spec_for(0, &peers, 1, Topology::Ring);
    let group = TcpGroup::establish(
        &spec,
        &listener,
        Instant::now() + DEADLINE,
        &CancelToken::new(),
    )
    .unwrap();
    (group, ranks)
}

#[test]
fn three_processes_reduce_and_gather_correctly() {
    let (mut group, children) = group_with_children(2, "all_reduce,all_gather", false);
    let cancel = CancelToken::new();
    let deadline = Instant::now() + DEADLINE;
    let reduced = group
        .all_reduce(&small_spec(1 << 20), deadline, &cancel)
        .unwrap();
    let gathered = group
        .all_gather(&small_spec(1 << 20), deadline, &cancel)
        .unwrap();
    assert_good(&reduced, 3);
    assert_good(&gathered, 3);
    for child in &children {
        for collective in ["all_reduce", "all_gather"] {
            let line = child.next_line();
            assert!(
                line.starts_with(&format!("ok {collective} busbw=")),
                "{line}"
            );
            assert!(line.ends_with("wrong=None"), "{line}");
        }
    }
}

/// Runs rank 0's long all-reduce against one child, does `fault` to the child once the
/// collective is under way, and returns rank 0's error and how long after the fault it
/// came.
fn fault_mid_collective(fault: impl FnOnce(&ChildRank)) -> (String, Duration, SocketAddr) {
    let (mut group, children) = group_with_children(1, "all_reduce", true);
    let child = &children[0];
    let (result, faulted_at) = thread::scope(|scope| {
        let running = scope.spawn(|| {
            group.all_reduce(&long_spec(), Instant::now() + DEADLINE, &CancelToken::new())
        });
        thread::sleep(Duration::from_millis(500));
        fault(child);
        let faulted_at = Instant::now();
        (running.join().unwrap(), faulted_at)
    });
    let error = result
        .expect_err("the collective cannot finish without its peer")
        .to_string();
    (error, faulted_at.elapsed(), child.listen)
}

#[test]
fn a_sigstopped_process_is_named_after_the_stall_timeout() {
    let (error, took, addr) = fault_mid_collective(|child| child.signal("-STOP"));
    assert!(error.contains(&format!("rank 1 (`{addr}`)")), "{error}");
    assert!(
        error.contains("sent nothing") || error.contains("stopped receiving"),
        "{error}"
    );
    // The stall timeout is 2 s; the deadline 30 s.
    assert!(
        took < Duration::from_secs(6),
        "named {took:?} after the stop"
    );
}

#[test]
fn a_killed_process_is_named_at_once() {
    let (error, took, addr) = fault_mid_collective(|child| child.signal("-KILL"));
    assert!(error.contains(&format!("rank 1 (`{addr}`)")), "{error}");
    assert!(
        took < Duration::from_secs(3),
        "named {took:?} after the kill"
    );
}
