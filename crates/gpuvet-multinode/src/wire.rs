//! What the coordinator asks of agents and what they answer: the bodies of the control
//! plane's `command` and `report` frames, in gpuvet's own vocabulary.
//!
//! The hot readers of the two tagged bodies, [`parse_directive`] and [`parse_stamped`],
//! are in `wire/read.rs`: they skip serde's buffering of tagged and flattened enums.

mod read;

pub use read::{parse_directive, parse_stamped};

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, DeviceInfo, RunReport};

/// What an agent tells the coordinator about itself when it joins (the hello's `info`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub backend: String,
    pub devices: Vec<DeviceInfo>,
    /// Identifies the machine (its boot id): agents that share one take turns at
    /// measurements, so they do not measure each other's load.
    pub host_id: String,
    /// One data-plane port per rail for `multi_all_reduce`, on the data address's IP.
    pub rail_ports: Vec<u16>,
    /// The port of the reachability responder, on the data address's IP.
    pub probe_port: u16,
    /// The data plane listens on every interface (this node reaches its coordinator
    /// over loopback), so any address of its host reaches it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_interface: bool,
    /// A reachability responder on each configured interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceProbe>,
    /// Whether the backend has its own transport between nodes (NCCL), which then
    /// runs the cross-node collectives instead of the TCP data plane.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spans_nodes: bool,
}

/// Where this node answers probes on one configured interface, or why it cannot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterfaceProbe {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<SocketAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One piece of work for one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Directive {
    /// Run a node-scope check with the local runner and answer with its result.
    Local { check: CheckName, budget_ms: u64 },
    /// Join a data-plane group and run one collective.
    Collective(CollectiveOrder),
    /// Probe the reachability of every target.
    Probe {
        targets: Vec<ProbeTarget>,
        budget_ms: u64,
    },
    /// Say whether this node's Python imports torch with Gloo, for `pytorch_gloo_2`.
    ProbeTorch { budget_ms: u64 },
    /// Make `count` tokens (NCCL's unique ids) of collectives spanning nodes, as the
    /// group's first member: one per collective (per rail for `multi_all_reduce`).
    GroupToken { count: usize },
    /// The group's verdict: the run is over.
    Finish { report: Box<RunReport> },
}

/// A collective for one rank of a data-plane group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveOrder {
    pub check: CheckName,
    /// New for every group formed, so a connection meant for another group is refused.
    pub round: u64,
    /// The run's data-plane session id (hex), chosen at random by the coordinator: each
    /// agent derives the run's data-plane key from it, the token and the job id.
    pub session: String,
    /// This agent's rank within the group.
    pub rank: usize,
    /// Every member's data-plane address, by rank within the group.
    pub peers: Vec<SocketAddr>,
    /// For `multi_all_reduce`: each rail's addresses, by rank within the group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<Vec<SocketAddr>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    pub budget_ms: u64,
    /// For `pytorch_gloo_2`: which engine runs it (the same on every node).
    #[serde(default, skip_serializing_if = "HostEngine::is_builtin")]
    pub engine: HostEngine,
    /// Set when the backends' own transport runs it (NCCL): this node's place in it.
    /// Such an order carries no `peers` or `rails` (the backends find each other, and
    /// a whole group's addresses sent to every member are N² bytes: 2.7 GB for
    /// `multi_all_reduce` at 4,096 nodes), only `ring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeGroup>,
    /// A native collective's ring neighbours on the data plane (next, previous): what
    /// a simulated network paces it by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ring: Vec<SocketAddr>,
}

/// A node's place in the collectives the backends run among themselves. Tokens come
/// from the group's first member, hex-encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ranks", rename_all = "snake_case")]
pub enum NativeGroup {
    /// One collective over every device of every member.
    Devices {
        token: String,
        /// Devices of every member together.
        world: usize,
        /// The rank of this node's first device.
        first_rank: usize,
    },
    /// One all-reduce per rail: device i of every member on rail i (`tokens[i]`),
    /// as rank `node` of `nodes`.
    Rails {
        tokens: Vec<String>,
        nodes: usize,
        node: usize,
    },
}

/// The engine of `pytorch_gloo_2`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostEngine {
    /// gpuvet's own TCP all-reduce, when some node cannot import torch.
    #[default]
    GpuvetTcp,
    /// `torch.distributed` with Gloo, run by each node's own Python.
    TorchGloo,
}

impl HostEngine {
    fn is_builtin(&self) -> bool {
        *self == HostEngine::GpuvetTcp
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTarget {
    pub rank: u32,
    pub addr: SocketAddr,
    /// The network the address is on: `data` or an interface name.
    pub network: String,
}

/// A reply with when the agent began and ended the work, on its own clock (Unix ms):
/// the group's timeline places each node's part of each check by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    #[serde(flatten)]
    pub reply: Reply,
}

/// An agent's answer to a directive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Local {
        result: Box<CheckResult>,
    },
    Collective(CollectiveReply),
    Probe {
        results: Vec<ProbeReply>,
    },
    /// The torch version this node's Python imports, or why it cannot run Gloo.
    Torch {
        python: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A collective's token (hex), or why none could be made.
    GroupToken {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tokens: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The directive could not be understood or carried out at all.
    Refused {
        reason: String,
    },
}

/// What one rank measured in a collective, or why it failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the error happened, Unix milliseconds on the agent's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong_result: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    /// Per-link figures of the timed iterations, for finding a ring's bottleneck.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkReply>,
}

/// Where one link's time went, as the rank that owns it saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkReply {
    /// The peer's rank within the group.
    pub rank: usize,
    pub bytes_sent: u64,
    /// Seconds spent in writes to the peer: long when the link or the peer is slow.
    pub send_blocked_s: f64,
    /// Seconds spent in reads from the peer: long when data arrives slowly.
    pub receive_blocked_s: f64,
}

/// Reachability of one target from the probing agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReply {
    pub rank: u32,
    pub network: String,
    pub attempts: u32,
    pub successes: u32,
    /// Mean round trip of a 16-byte echo, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The ring neighbours (next, previous) of rank `rank` of `peers`: what a native
/// collective's order carries (`CollectiveOrder::ring`) instead of every member's
/// address.
pub(crate) fn ring_neighbours(rank: usize, peers: &[SocketAddr]) -> Vec<SocketAddr> {
    let size = peers.len().max(1);
    [(rank + 1) % size, (rank + size - 1) % size]
        .into_iter()
        .filter(|&peer| peer != rank && peer < peers.len())
        .map(|peer| peers[peer])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_round_trip_as_tagged_json() {
        let directive = Directive::Collective(CollectiveOrder {
            check: CheckName::AllReduce2,
            round: 7,
            session: "00112233445566778899aabbccddeeff".to_owned(),
            rank: 1,
            peers: vec![
                "10.0.0.1:4000".parse().unwrap(),
                "10.0.0.2:4000".parse().unwrap(),
            ],
            rails: Vec::new(),
            ring: Vec::new(),
            bytes: None,
            budget_ms: 5000,
            engine: HostEngine::TorchGloo,
            native: Some(NativeGroup::Devices {
                token: "00ff".to_owned(),
                world: 16,
                first_rank: 8,
            }),
        });
        let json = serde_json::to_value(&directive).unwrap();
        assert_eq!(json["op"], "collective");
        assert_eq!(json["check"], "all_reduce_2");
        assert_eq!(json["engine"], "torch_gloo");
        assert_eq!(json["native"]["ranks"], "devices");
        let back: Directive = serde_json::from_value(json).unwrap();
        assert_eq!(back, directive);

        let rails = NativeGroup::Rails {
            tokens: vec!["00".to_owned(), "01".to_owned()],
            nodes: 4,
            node: 3,
        };
        let json = serde_json::to_value(&rails).unwrap();
        assert_eq!(json["ranks"], "rails");
        assert_eq!(serde_json::from_value::<NativeGroup>(json).unwrap(), rails);
    }

    #[test]
    fn an_unknown_op_is_an_error_not_a_default() {
        let err = serde_json::from_str::<Directive>(r#"{"op":"format_disk"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
    }
}
