//! The data plane between nodes for the cpu backend and the host-network checks:
//! rank-addressed collectives over plain TCP, one process per node.
//!
//! The coordinator hands every rank the data-plane address of each rank (its own
//! included, indexed by rank) and a round id. Each rank binds its listener first,
//! publishes the address, then calls [`TcpGroup::establish`]: it opens one connection
//! to each rank it sends to and accepts one from each rank it receives from (one-way
//! connections, so sending and receiving never contend for a socket), with a handshake
//! that carries both ranks and the round and proves on both sides that the peer holds
//! the run's [`DataKey`], so a stray connection (an earlier round, another group, a
//! port scanner, a stranger without the group's token) is refused without disturbing
//! the group. What this does not protect: the traffic itself is neither encrypted nor
//! authenticated after the greeting, so whoever can see or alter packets on the path
//! can read or corrupt a collective's data.
//!
//! On an established group:
//! - [`TcpGroup::all_reduce`] (pipelined ring), [`TcpGroup::all_gather`] (ring) and
//!   [`TcpGroup::all_to_all`] (pairwise exchange) measure busbw as nccl-tests defines
//!   it and check their output;
//! - [`multi_all_reduce`] runs one all-reduce per rail at the same time, each on its
//!   own group;
//! - [`TcpGroup::host_network_collective`] is the built-in fallback of
//!   `pytorch_gloo_2`: a small-message latency and an all-reduce bandwidth;
//! - [`probe`] measures reachability and round-trip time for `network_connectivity`.
//!
//! Nothing here hangs: every socket call is bounded by the deadline, a stall timeout
//! and the cancel token, and every error names the peer rank and address involved
//! (as `rank 2 (`10.0.0.3:29400`)`).

mod collectives;
mod engine;
mod establish;
mod handshake;
mod link;
pub mod probe;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::{Duration, Instant};

pub use handshake::{DataKey, Refusal};
pub use probe::{ProbeResponder, ProbeResult, ProbeSpec, RttStats, probe_connectivity};

use self::collectives::Kind;
pub(crate) use self::collectives::windowed_rates;
use self::link::{Links, Stop, Traffic, Watch};
use crate::{BackendError, CancelToken, Sample, WorkSpec};

/// Which connections a group opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Each rank to its two ring neighbours: enough for all-reduce and all-gather, and
    /// only two connections per rank however large the group.
    Ring,
    /// Every pair of ranks: needed by all-to-all.
    FullMesh,
}

/// Who a rank is in a group, and where its peers listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub rank: usize,
    /// The data-plane address of every rank, this one's included, indexed by rank.
    pub peers: Vec<SocketAddr>,
    /// Changes whenever the coordinator forms a new group (a pairing round, a re-test),
    /// so a connection meant for another round is refused.
    pub round: u64,
    pub topology: Topology,
    /// The run's data-plane key: a connection whose greeting does not prove it is
    /// refused, and this rank proves it to every peer in turn.
    pub key: DataKey,
}

/// How much work a collective does and how long a silent link is tolerated.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveSpec {
    /// S as nccl-tests defines it: the all-reduce buffer, or per-rank count × ranks ×
    /// 4 bytes for all-gather and all-to-all (rounded up to a multiple of the ranks).
    /// `None` sizes it by the group: [`CollectiveSpec::default_bytes`].
    pub bytes: Option<u64>,
    /// Untimed iterations first; the later ones estimate an iteration's time.
    pub warmup_iterations: usize,
    /// Timed iterations run for `min_seconds`, at least `min_iterations` and at most
    /// `max_iterations` of them.
    pub min_iterations: usize,
    pub max_iterations: usize,
    pub min_seconds: f64,
    /// How long a link may move no byte while data is due before its peer is named
    /// stalled. Entering a collective waits for the deadline instead, since peers may
    /// arrive late.
    pub stall_timeout: Duration,
}

impl CollectiveSpec {
    /// S for a group of `ranks` when none is given: 512 KiB per rank (each rank's
    /// chunk is then one pipelining segment, so the ring streams without partial
    /// segments), at least 1 MiB and at most 64 MiB.
    ///
    /// Small on purpose: iterations run back to back like one long transfer (see the
    /// engine), so a larger buffer adds no accuracy, only host memory traffic, which is
    /// not what a network check should measure, and memory (`multi_all_reduce` over 8
    /// rails holds 8 groups' buffers). Between two namespaces joined by veth on a 2-core
    /// VM, 1 MiB ran at least as fast as 4–64 MiB.
    pub fn default_bytes(ranks: usize) -> u64 {
        (ranks as u64 * DEFAULT_BYTES_PER_RANK).clamp(MIN_DEFAULT_BYTES, MAX_DEFAULT_BYTES)
    }

    /// The default sizing, with the work spec's byte count when it sets one.
    pub fn from_work(work: &WorkSpec) -> CollectiveSpec {
        CollectiveSpec {
            bytes: work.collective_bytes,
            ..CollectiveSpec::default()
        }
    }
}

const DEFAULT_BYTES_PER_RANK: u64 = 512 << 10;
const MIN_DEFAULT_BYTES: u64 = 1 << 20;
const MAX_DEFAULT_BYTES: u64 = 64 << 20;

impl Default for CollectiveSpec {
    fn default() -> Self {
        CollectiveSpec {
            bytes: None,
            warmup_iterations: 5,
            min_iterations: 5,
            max_iterations: 100_000,
            min_seconds: 0.5,
            stall_timeout: Duration::from_secs(5),
        }
    }
}

/// What one link did during the timed iterations of the last collective: where the
/// time went, to attribute slowness to a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkStats {
    pub rank: usize,
    pub addr: SocketAddr,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Time inside `write` calls to this peer: long when it receives slowly.
    pub send_blocked: Duration,
    /// Time inside `read` calls from this peer: long when it sends slowly.
    pub receive_blocked: Duration,
}

/// An established data-plane group, as seen by one rank.
#[derive(Debug)]
pub struct TcpGroup {
    rank: usize,
    round: u64,
    topology: Topology,
    /// One-way connections, indexed by rank; `None` for this rank and for peers the
    /// topology skips.
    links: Links,
    refused: Vec<String>,
    /// Collectives started on this group, carried in each header so ranks that skipped
    /// or repeated one are caught.
    sequence: u64,
    /// Set after a failed collective: the streams may hold half a message, so the group
    /// cannot be used again.
    broken: Option<String>,
    last_link_stats: Vec<LinkStats>,
}

impl TcpGroup {
    /// Connects this rank to the peers `spec.topology` needs, before `deadline`.
    ///
    /// `listener` is this rank's data-plane listener, bound at `spec.peers[spec.rank]`
    /// (or any address that reaches it); it is only borrowed, so the same listener can
    /// serve the next round. A peer that never answers, refuses, or is stopped ends in
    /// an error that names its rank and address, no later than the deadline.
    pub fn establish(
        spec: &GroupSpec,
        listener: &TcpListener,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<TcpGroup, BackendError> {
        let world = spec.peers.len();
        if world < 2 {
            return Err(BackendError::Unsupported(format!(
                "a data-plane group needs at least 2 ranks, got {world}"
            )));
        }
        if spec.rank >= world {
            return Err(BackendError::Failed(format!(
                "rank {} is outside the group of {world} ranks",
                spec.rank
            )));
        }
        let (sends_to, receives_from) = directions(spec.rank, world, spec.topology);
        let plan = establish::Plan {
            rank: spec.rank,
            round: spec.round,
            peers: &spec.peers,
            sends_to: &sends_to,
            receives_from: &receives_from,
            key: &spec.key,
        };
        let established = establish::establish(&plan, listener, deadline, cancel)?;
        Ok(TcpGroup {
            rank: spec.rank,
            round: spec.round,
            topology: spec.topology,
            links: Links {
                outgoing: established.outgoing,
                incoming: established.incoming,
            },
            refused: established.refused,
            sequence: 0,
            broken: None,
            last_link_stats: Vec::new(),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.links.world()
    }

    pub fn round(&self) -> u64 {
        self.round
    }

    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// Connections turned away while establishing (stray callers, wrong rounds), as
    /// lines for the agent's log.
    pub fn refused_connections(&self) -> &[String] {
        &self.refused
    }

    /// Per-link figures of the last successful collective's timed iterations.
    pub fn last_link_stats(&self) -> &[LinkStats] {
        &self.last_link_stats
    }

    /// The first peer whose connection has closed (it left, or its process died),
    /// without waiting: for an engine that runs outside the group while the group
    /// stays connected, to learn that the other side gave up.
    pub fn peer_gone(&self) -> Option<String> {
        let links = self.links.incoming.iter().chain(&self.links.outgoing);
        links.flatten().find_map(|link| {
            let _ = link.stream.set_nonblocking(true);
            let closed = match link.stream.peek(&mut [0u8; 1]) {
                Ok(0) => true,
                Ok(_) => false,
                Err(error) => !matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ),
            };
            let _ = link.stream.set_nonblocking(false);
            closed.then(|| link.name())
        })
    }

    /// Passes one word from rank 0 along the ring to every rank, and returns it (rank
    /// 0 gets its own back): how a rank tells the others something only it knows, such
    /// as the port an outside engine's store listens on. The ranks may arrive at
    /// different times; each waits for its left neighbour until the deadline.
    pub fn share_from_first(
        &mut self,
        word: u64,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<u64, BackendError> {
        if let Some(cause) = &self.broken {
            return Err(BackendError::Failed(format!(
                "this data-plane group failed earlier: {cause}"
            )));
        }
        let world = self.world();
        let (left, right) = ((self.rank + world - 1) % world, (self.rank + 1) % world);
        let abort = AtomicBool::new(false);
        let watch = Watch {
            deadline,
            cancel,
            abort: &abort,
            stall_timeout: None,
            context: "exchange of the engine's address",
        };
        let mut traffic = Traffic::default();
        let result = (|| {
            let mut word = word;
            if self.rank != 0 {
                let mut bytes = [0u8; 8];
                link::receive_exact(self.links.from(left)?, &mut bytes, &watch, &mut traffic)?;
                word = u64::from_le_bytes(bytes);
            }
            if right != 0 {
                let bytes = word.to_le_bytes();
                link::send_all(self.links.to(right)?, &bytes, &watch, &mut traffic)?;
            }
            Ok(word)
        })();
        result.map_err(|stop: Stop| {
            let error = match stop {
                Stop::Failed(error) => error,
                Stop::Aborted => BackendError::Failed("the exchange was aborted".to_owned()),
            };
            self.broken = Some(error.to_string());
            error
        })
    }

    /// Ring all-reduce (sum) of S bytes of f32: busbw = algbw × 2(n−1)/n.
    pub fn all_reduce(
        &mut self,
        spec: &CollectiveSpec,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.measure(Kind::AllReduce, spec, deadline, cancel)
    }

    /// Ring all-gather, S = per-rank count × n × 4 bytes: busbw = algbw × (n−1)/n.
    pub fn all_gather(
        &mut self,
        spec: &CollectiveSpec,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.measure(Kind::AllGather, spec, deadline, cancel)
    }

    /// Pairwise all-to-all, S = per-rank buffer: busbw = algbw × (n−1)/n. Needs a
    /// [`Topology::FullMesh`] group (any group of 2 ranks will do).
    pub fn all_to_all(
        &mut self,
        spec: &CollectiveSpec,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        if !self.links.is_full_mesh(self.rank) {
            return Err(BackendError::Unsupported(format!(
                "all-to-all needs a full-mesh group, and rank {} is in a ring of {}",
                self.rank,
                self.world()
            )));
        }
        self.measure(Kind::AllToAll, spec, deadline, cancel)
    }

    /// The built-in stand-in for `pytorch_gloo_2` when torch is missing: what Gloo's
    /// host-network all-reduce would show, measured with the same ring.
    ///
    /// First a small all-reduce (4 KiB, ≥ 20 iterations) whose median time is the
    /// latency (`extra.latency_us`), then a bandwidth all-reduce sized by `spec`, whose
    /// busbw is the value. `params.engine` says which engine ran.
    pub fn host_network_collective(
        &mut self,
        spec: &CollectiveSpec,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        let latency_spec = CollectiveSpec {
            bytes: Some(HOST_LATENCY_BYTES),
            min_iterations: 20,
            max_iterations: 1000,
            min_seconds: 0.1,
            ..spec.clone()
        };
        let latency = self.run(Kind::AllReduce, &latency_spec, deadline, cancel)?;
        let mut sample = self.measure(Kind::AllReduce, spec, deadline, cancel)?;
        let latency_us = gpuvet_model::stats::median(&latency.seconds).unwrap_or(0.0) * 1e6;
        sample.extra.insert("latency_us".to_owned(), latency_us);
        sample
            .params
            .insert("engine".to_owned(), HOST_ENGINE.to_owned());
        sample
            .params
            .insert("latency_bytes".to_owned(), latency.bytes.to_string());
        if sample.wrong_result.is_none() {
            sample.wrong_result = latency.wrong_result;
        }
        Ok(sample)
    }

    fn measure(
        &mut self,
        kind: Kind,
        spec: &CollectiveSpec,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        let run = self.run(kind, spec, deadline, cancel)?;
        Ok(run.to_sample())
    }

    fn run(
        &mut self,
        kind: Kind,
        spec: &CollectiveSpec,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<collectives::Run, BackendError> {
        if let Some(cause) = &self.broken {
            return Err(BackendError::Failed(format!(
                "this data-plane group failed earlier and cannot run the {}: {cause}",
                kind.label()
            )));
        }
        self.sequence += 1;
        let result = collectives::run(
            &self.links,
            self.rank,
            kind,
            self.sequence,
            spec,
            deadline,
            cancel,
        );
        match &result {
            Ok(run) => self.last_link_stats = self.link_stats(run),
            Err(error) => self.broken = Some(error.to_string()),
        }
        result
    }

    fn link_stats(&self, run: &collectives::Run) -> Vec<LinkStats> {
        (0..self.world())
            .filter_map(|peer| {
                let link = self.links.outgoing[peer]
                    .as_ref()
                    .or(self.links.incoming[peer].as_ref())?;
                let traffic = &run.traffic[peer];
                Some(LinkStats {
                    rank: peer,
                    addr: link.addr,
                    bytes_sent: traffic.sent.bytes,
                    bytes_received: traffic.received.bytes,
                    send_blocked: traffic.sent.blocked,
                    receive_blocked: traffic.received.blocked,
                })
            })
            .collect()
    }
}

/// Small enough to measure latency, not bandwidth, yet one segment per rank.
const HOST_LATENCY_BYTES: u64 = 4 << 10;
const HOST_ENGINE: &str = "gpuvet-tcp";

/// The ranks a rank sends to and receives from: its ring neighbours, or everyone.
fn directions(rank: usize, world: usize, topology: Topology) -> (Vec<usize>, Vec<usize>) {
    match topology {
        Topology::FullMesh => {
            let others: Vec<usize> = (0..world).filter(|&peer| peer != rank).collect();
            (others.clone(), others)
        }
        Topology::Ring => (vec![(rank + 1) % world], vec![(rank + world - 1) % world]),
    }
}

/// Runs one all-reduce per rail at the same time (rail i = `rails[i]`, a group over
/// that rail's addresses, its listener bound to the rail's local IP), so every NIC is
/// busy at once. Returns each rail's sample (params `rail` = its index) or error, in
/// rail order: one bad rail does not hide the others' figures.
///
/// Outgoing connections take the source address the routing table gives for the
/// peer's rail address; with one subnet per rail (the usual layout) that is the rail's
/// own NIC.
pub fn multi_all_reduce(
    rails: &mut [TcpGroup],
    spec: &CollectiveSpec,
    deadline: Instant,
    cancel: &CancelToken,
) -> Vec<Result<Sample, BackendError>> {
    thread::scope(|scope| {
        let running: Vec<_> = rails
            .iter_mut()
            .enumerate()
            .map(|(rail, group)| {
                thread::Builder::new()
                    .name(format!("gpuvet-rail-{rail}"))
                    .spawn_scoped(scope, move || group.all_reduce(spec, deadline, cancel))
            })
            .collect();
        running
            .into_iter()
            .enumerate()
            .map(|(rail, spawned)| {
                let result = match spawned {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Err(BackendError::Failed(
                            "the all-reduce thread panicked".to_owned(),
                        ))
                    }),
                    Err(error) => Err(BackendError::io(
                        "could not start the all-reduce thread",
                        error,
                    )),
                };
                result
                    .map(|mut sample| {
                        sample.params.insert("rail".to_owned(), rail.to_string());
                        sample
                    })
                    .map_err(|error| error.on_rail(rail))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests;
