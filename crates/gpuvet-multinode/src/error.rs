//! Why a group run could not go on, as seen from one node, and why a member or one of
//! its addresses cannot take part. Messages leave a source's text out; where an error
//! becomes text (a reply to the coordinator, a check's result) it is written with its
//! causes ([`gpuvet_backend::with_causes`]).

use std::net::{IpAddr, Ipv4Addr};

use gpuvet_control::ClusterError;

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("cannot listen for {what} on `{ip}`")]
    Bind {
        what: String,
        ip: IpAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lost the coordinator before the group's verdict")]
    CoordinatorLost {
        #[source]
        source: ClusterError,
    },
    #[error("the coordinator ended the session before the group's verdict: {reason}")]
    Closed { reason: String },
    #[error("no verdict from the coordinator before this node's deadline")]
    NoVerdict,
    #[error("cannot start the coordinator")]
    Coordinator {
        #[source]
        source: ClusterError,
    },

    /// The interfaces of `gpuvet.interfaces` could not be looked up.
    #[error("cannot list network interfaces")]
    ListInterfaces {
        #[source]
        source: std::io::Error,
    },
    #[error("this node has no interface `{name}`")]
    NoSuchInterface { name: String },
    #[error("interface `{name}` has no IPv4 address")]
    NoIpv4 { name: String },
    /// The reachability responder of an interface in `gpuvet.interfaces`.
    #[error("cannot listen on `{name}` ({ip})")]
    InterfaceListen {
        name: String,
        ip: Ipv4Addr,
        #[source]
        source: std::io::Error,
    },

    /// A joined member's hello lacks what the plan needs.
    #[error("its hello carries no usable node info")]
    BadNodeInfo {
        #[source]
        source: serde_json::Error,
    },
    #[error("its hello names no data-plane address")]
    NoDataAddress,
    /// A member cannot be probed on a network it was not told to listen on.
    #[error("`{network}` is not in its `gpuvet.interfaces`")]
    NotProbed { network: String },
    #[error("no address on `{network}`")]
    NoAddressOn { network: String },
    /// What a member reported about itself: it crossed the wire as text.
    #[error("{message}")]
    Remote { message: String },

    /// The coordinator's order names a data-plane session this agent cannot read.
    #[error(
        "the coordinator's data-plane session `{session}` is not {digits} hex digits (a bug \
         in gpuvet)"
    )]
    BadSession { session: String, digits: usize },
}
