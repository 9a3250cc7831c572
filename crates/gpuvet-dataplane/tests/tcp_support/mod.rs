//! Helpers shared by the `tcp_*` integration tests: loopback listeners and one thread
//! per rank.

#![allow(dead_code)] // Each test file uses a different subset.

use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

use gpuvet_backend::{BackendError, CancelToken, Sample};
use gpuvet_dataplane::tcp::{CollectiveSpec, DataKey, GroupSpec, TcpGroup, Topology};

/// Generous: only a hang should ever reach it.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A quick spec: small buffers, few iterations, so the suite stays fast on 2 cores.
pub fn small_spec(bytes: u64) -> CollectiveSpec {
    CollectiveSpec {
        bytes: Some(bytes),
        min_iterations: 3,
        max_iterations: 20,
        min_seconds: 0.05,
        ..CollectiveSpec::default()
    }
}

/// `ranks` listeners on 127.0.0.1 with kernel-chosen ports, and their addresses.
pub fn listeners(ranks: usize) -> (Vec<TcpListener>, Vec<SocketAddr>) {
    let listeners: Vec<TcpListener> = (0..ranks)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    (listeners, addrs)
}

/// An address nothing listens on: bound, then released.
pub fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The data-plane key of the tests' groups (any fixed 32 bytes do).
pub fn test_key() -> DataKey {
    DataKey::from_bytes([0x5a; 32])
}

pub fn spec_for(rank: usize, peers: &[SocketAddr], round: u64, topology: Topology) -> GroupSpec {
    GroupSpec {
        rank,
        peers: peers.to_vec(),
        round,
        topology,
        key: test_key(),
    }
}

/// Establishes a group of `ranks` threads and runs `work` on every rank; results in
/// rank order.
pub fn run_ranks<T: Send>(
    ranks: usize,
    topology: Topology,
    work: impl Fn(usize, &mut TcpGroup) -> Result<T, BackendError> + Sync,
) -> Vec<Result<T, BackendError>> {
    let (listeners, addrs) = listeners(ranks);
    let cancel = CancelToken::new();
    let deadline = Instant::now() + DEADLINE;
    thread::scope(|scope| {
        let handles: Vec<_> = listeners
            .iter()
            .enumerate()
            .map(|(rank, listener)| {
                let (addrs, cancel, work) = (&addrs, &cancel, &work);
                scope.spawn(move || {
                    let spec = spec_for(rank, addrs, 1, topology);
                    let mut group = TcpGroup::establish(&spec, listener, deadline, cancel)?;
                    work(rank, &mut group)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Asserts a correct, positive, complete measurement.
pub fn assert_good(sample: &Sample, ranks: usize) {
    assert_eq!(sample.wrong_result, None, "{sample:?}");
    assert!(sample.value > 0.0 && sample.value.is_finite(), "{sample:?}");
    assert!(sample.extra["algbw"] > 0.0, "{sample:?}");
    assert!(!sample.samples.is_empty(), "{sample:?}");
    assert_eq!(sample.params["ranks"], ranks.to_string());
}

/// The error's message, for matching.
pub fn message(result: Result<impl std::fmt::Debug, BackendError>) -> String {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        // With its causes, as a report shows it.
        Err(error) => gpuvet_backend::with_causes(&error),
    }
}
