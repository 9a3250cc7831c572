//! The simulated network of a group in one process: what its data plane measures
//! instead of moving bytes, as the sim backend stands in for the GPUs.
//!
//! Every node is an IP address on the in-memory network. A link between two nodes and
//! a node's rail (its NIC) run at nominal speed unless the script slows them
//! (`gpuvet.sim.link_speed`, `gpuvet.sim.node_rail_speed`). A collective runs at the
//! pace of the slowest link a rank uses (its ring neighbours); the backends' own
//! collectives (NCCL on the sim) are slowed by the same links, since their traffic
//! crosses the same network. Probes always reach their target, in a round trip that
//! grows as the link slows.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use gpuvet_backend::Sample;
use gpuvet_backend::sim::SplitMix64;
use gpuvet_model::config::SimScript;
use gpuvet_model::stats::median;

use crate::wire::{CollectiveOrder, ProbeReply, ProbeTarget, ring_neighbours};

/// Host-network all-reduce busbw between two nodes over one 100 Gb/s NIC, GB/s.
const NOMINAL_HOST_BUSBW: f64 = 10.0;
/// A probe's round trip across one switch, µs.
const NOMINAL_RTT_US: f64 = 25.0;
const SAMPLES_PER_CALL: usize = 8;
/// Keeps a noisy sample above zero.
const MIN_NOISE_FACTOR: f64 = 0.05;
/// The probes each target gets, as the TCP data plane sends.
const PROBE_ATTEMPTS: u32 = 5;

/// The network of one group in one process.
#[derive(Debug)]
pub struct Fabric {
    seed: u64,
    noise: f64,
    links: HashMap<(IpAddr, IpAddr), f64>,
    rails: HashMap<(IpAddr, u32), f64>,
    /// Measurements so far, so each draws fresh noise.
    measured: AtomicU64,
}

impl Fabric {
    /// The network `script` describes, for nodes at `ips` (by node name). Links and
    /// rails of nodes not in the group are left out.
    pub fn new(script: &SimScript, ips: &BTreeMap<String, IpAddr>) -> Fabric {
        let links = script
            .link_speed
            .iter()
            .filter_map(|((a, b), &factor)| Some((ordered(*ips.get(a)?, *ips.get(b)?), factor)))
            .collect();
        let rails = script
            .node_rail_speed
            .iter()
            .filter_map(|(node, rails)| Some((*ips.get(node)?, rails)))
            .flat_map(|(ip, rails)| {
                rails
                    .iter()
                    .map(move |(&rail, &factor)| ((ip, rail), factor))
            })
            .collect();
        Fabric {
            seed: script.seed,
            noise: script.noise,
            links,
            rails,
            measured: AtomicU64::new(0),
        }
    }

    fn link(&self, a: IpAddr, b: IpAddr) -> f64 {
        self.links.get(&ordered(a, b)).copied().unwrap_or(1.0)
    }

    fn rail(&self, ip: IpAddr, rail: u32) -> f64 {
        self.rails.get(&(ip, rail)).copied().unwrap_or(1.0)
    }

    /// The pace of the links from `own` to its ring neighbours.
    fn ring_pace(&self, own: IpAddr, ring: &[IpAddr]) -> f64 {
        ring.iter()
            .map(|&peer| self.link(own, peer))
            .fold(1.0, f64::min)
    }

    /// The pace of rail `rail` for `own`: its own NIC and its neighbours' on that
    /// rail, and the links between them.
    fn rail_pace(&self, own: IpAddr, ring: &[IpAddr], rail: u32) -> f64 {
        ring.iter()
            .chain(std::iter::once(&own))
            .map(|&member| self.rail(member, rail))
            .fold(self.ring_pace(own, ring), f64::min)
    }

    /// A collective the backends ran (NCCL on the sim) by the node at `own`, slowed by
    /// the network it crossed: every busbw figure is scaled by the pace of the links
    /// to its ring neighbours (`order.ring`), and each rail's (`extra["railN"]`) by
    /// that rail's.
    pub(crate) fn pace_native(
        &self,
        own: IpAddr,
        order: &CollectiveOrder,
        mut sample: Sample,
    ) -> Sample {
        let ring: Vec<IpAddr> = if order.ring.is_empty() {
            match ring_of(order.rank, &order.peers) {
                Some((_, ring)) => ring,
                None => return sample,
            }
        } else {
            order.ring.iter().map(SocketAddr::ip).collect()
        };
        let pace = self.ring_pace(own, &ring);
        let mut rail_values = Vec::new();
        for (key, value) in &mut sample.extra {
            if let Some(rail) = key.strip_prefix("rail").and_then(|r| r.parse::<u32>().ok()) {
                *value *= self.rail_pace(own, &ring, rail);
                rail_values.push(*value);
            } else if key == "algbw" {
                *value *= pace;
            }
        }
        let new_value = match rail_values.iter().copied().reduce(f64::min) {
            Some(slowest_rail) => slowest_rail,
            None => sample.value * pace,
        };
        let scale = if sample.value > 0.0 {
            new_value / sample.value
        } else {
            1.0
        };
        for value in &mut sample.samples {
            *value *= scale;
        }
        sample.value = new_value;
        sample
    }

    /// A collective over the host network (gpuvet's own TCP engine, or one per rail),
    /// measured on the simulated links.
    pub(crate) fn host_collective(&self, order: &CollectiveOrder) -> Sample {
        let pace = match ring_of(order.rank, &order.peers) {
            Some((own, ring)) if order.rails.is_empty() => self.ring_pace(own, &ring),
            Some((own, ring)) => (0..order.rails.len() as u32)
                .map(|rail| self.rail_pace(own, &ring, rail))
                .fold(1.0, f64::min),
            None => 1.0,
        };
        let mut noise = self.noise_source();
        let samples: Vec<f64> = (0..SAMPLES_PER_CALL)
            .map(|_| NOMINAL_HOST_BUSBW * pace * self.noise_factor(&mut noise))
            .collect();
        let mut sample = Sample {
            value: median(&samples).unwrap_or(NOMINAL_HOST_BUSBW * pace),
            samples,
            ..Sample::default()
        };
        sample
            .params
            .insert("transport".to_owned(), "simulated network".to_owned());
        if let Some(bytes) = order.bytes {
            sample.params.insert("bytes".to_owned(), bytes.to_string());
        }
        sample
    }

    /// Probes from `from` to every target: all reached, in a round trip that grows as
    /// the link between them slows.
    pub(crate) fn probe(&self, from: IpAddr, targets: &[ProbeTarget]) -> Vec<ProbeReply> {
        let mut noise = self.noise_source();
        targets
            .iter()
            .map(|target| ProbeReply {
                rank: target.rank,
                network: target.network.clone(),
                attempts: PROBE_ATTEMPTS,
                successes: PROBE_ATTEMPTS,
                rtt_us: Some(
                    NOMINAL_RTT_US / self.link(from, target.addr.ip())
                        * self.noise_factor(&mut noise),
                ),
                error: None,
            })
            .collect()
    }

    /// The generator for the next measurement: seeded, fresh for each one.
    fn noise_source(&self) -> SplitMix64 {
        let n = self.measured.fetch_add(1, Ordering::Relaxed);
        SplitMix64::keyed(self.seed, &[n])
    }

    /// `1 + noise × N(0, 1)`, kept above zero, as the sim backend draws it.
    fn noise_factor(&self, source: &mut SplitMix64) -> f64 {
        (1.0 + self.noise * source.next_normal()).max(MIN_NOISE_FACTOR)
    }
}

/// The address of rank `rank` of `peers`, and its ring neighbours'.
fn ring_of(rank: usize, peers: &[SocketAddr]) -> Option<(IpAddr, Vec<IpAddr>)> {
    let own = peers.get(rank)?.ip();
    let ring = ring_neighbours(rank, peers)
        .iter()
        .map(SocketAddr::ip)
        .collect();
    Some((own, ring))
}

fn ordered(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    if a <= b { (a, b) } else { (b, a) }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use gpuvet_model::catalog::CheckName;

    use super::*;
    use crate::wire::HostEngine;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn fabric() -> Fabric {
        let script = SimScript {
            link_speed: BTreeMap::from([(("a".to_owned(), "b".to_owned()), 0.5)]),
            node_rail_speed: BTreeMap::from([("c".to_owned(), BTreeMap::from([(1, 0.25)]))]),
            ..SimScript::default()
        };
        let ips = BTreeMap::from([
            ("a".to_owned(), ip(1)),
            ("b".to_owned(), ip(2)),
            ("c".to_owned(), ip(3)),
            ("d".to_owned(), ip(4)),
        ]);
        Fabric::new(&script, &ips)
    }

    fn order(rank: usize, peers: &[u8], rails: usize) -> CollectiveOrder {
        let peers: Vec<SocketAddr> = peers.iter().map(|&n| SocketAddr::new(ip(n), 1)).collect();
        CollectiveOrder {
            check: CheckName::AllReduce2,
            round: 1,
            session: String::new(),
            rank,
            rails: vec![peers.clone(); rails],
            peers,
            bytes: None,
            budget_ms: 1000,
            engine: HostEngine::default(),
            native: None,
            ring: Vec::new(),
        }
    }

    /// Rank `rank`'s address, and its order as a native collective gets it: its ring
    /// neighbours, not every member.
    fn native_order(rank: usize, peers: &[u8]) -> (IpAddr, CollectiveOrder) {
        let mut order = order(rank, peers, 0);
        order.ring = ring_neighbours(rank, &order.peers);
        let own = order.peers[rank].ip();
        order.peers.clear();
        (own, order)
    }

    /// Paces `sample` for rank `rank` of `peers` both ways (a native order's ring, and
    /// every member's address), which must agree.
    fn pace(fabric: &Fabric, rank: usize, peers: &[u8], sample: Sample) -> Sample {
        let (own, lean) = native_order(rank, peers);
        let paced = fabric.pace_native(own, &lean, sample.clone());
        let full = fabric.pace_native(own, &order(rank, peers, 0), sample);
        assert_eq!(paced, full);
        paced
    }

    fn native(value: f64, rails: &[f64]) -> Sample {
        let mut sample = Sample {
            value,
            samples: vec![value; 4],
            ..Sample::default()
        };
        sample.extra.insert("algbw".to_owned(), value / 2.0);
        for (rail, busbw) in rails.iter().enumerate() {
            sample.extra.insert(format!("rail{rail}"), *busbw);
        }
        sample
    }

    #[test]
    fn a_slow_link_slows_the_ranks_on_either_end_of_it_only() {
        let fabric = fabric();
        // The pair a-b crosses the slow link, in either rank order.
        for rank in 0..2 {
            let paced = pace(&fabric, rank, &[1, 2], native(40.0, &[]));
            assert_eq!((paced.value, paced.samples[0]), (20.0, 20.0));
            assert_eq!(paced.extra["algbw"], 10.0);
        }
        assert_eq!(pace(&fabric, 0, &[1, 3], native(40.0, &[])).value, 40.0);
        // In a ring a-b-c-d, only a and b use the link.
        let ring = [1, 2, 3, 4];
        let paces: Vec<f64> = (0..4)
            .map(|rank| fabric.host_collective(&order(rank, &ring, 0)).value)
            .collect();
        assert_eq!(paces, [5.0, 5.0, 10.0, 10.0]);
    }

    #[test]
    fn a_slow_rail_slows_that_rail_of_its_node_and_its_neighbours() {
        let fabric = fabric();
        let paced = pace(&fabric, 0, &[3, 4], native(40.0, &[40.0, 44.0]));
        assert_eq!(paced.extra["rail0"], 40.0);
        assert_eq!(paced.extra["rail1"], 11.0);
        assert_eq!(paced.value, 11.0, "the value is the slowest rail's");
        assert_eq!(paced.samples[0], 11.0);
        let elsewhere = pace(&fabric, 0, &[1, 4], native(40.0, &[40.0, 44.0]));
        assert_eq!(elsewhere.value, 40.0);
    }

    #[test]
    fn probes_reach_every_target_slower_over_a_slow_link() {
        let fabric = fabric();
        let targets: Vec<ProbeTarget> = [(1, 2), (2, 3)]
            .into_iter()
            .map(|(rank, last)| ProbeTarget {
                rank,
                addr: SocketAddr::new(ip(last), 9),
                network: "data".to_owned(),
            })
            .collect();
        let replies = fabric.probe(ip(1), &targets);
        assert!(
            replies
                .iter()
                .all(|r| r.successes == r.attempts && r.error.is_none())
        );
        assert_eq!(replies[0].rtt_us, Some(2.0 * NOMINAL_RTT_US));
        assert_eq!(replies[1].rtt_us, Some(NOMINAL_RTT_US));
    }

    #[test]
    fn links_of_nodes_outside_the_group_are_left_out() {
        let script = SimScript {
            link_speed: BTreeMap::from([(("a".to_owned(), "z".to_owned()), 0.5)]),
            ..SimScript::default()
        };
        let fabric = Fabric::new(&script, &BTreeMap::from([("a".to_owned(), ip(1))]));
        assert!(fabric.links.is_empty());
    }

    #[test]
    fn noise_varies_each_measurement_around_the_nominal_figure() {
        let script = SimScript {
            noise: 0.02,
            ..SimScript::default()
        };
        let fabric = Fabric::new(&script, &BTreeMap::new());
        let first = fabric.host_collective(&order(0, &[1, 2], 0));
        let second = fabric.host_collective(&order(0, &[1, 2], 0));
        assert_ne!(first.samples, second.samples);
        assert!((first.value / NOMINAL_HOST_BUSBW - 1.0).abs() < 0.1);
    }
}
