//! Why a group run could not go on, as seen from one node.

use std::net::IpAddr;

use gpuvet_control::ClusterError;

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("cannot listen for {what} on `{ip}`: {source}")]
    Bind {
        what: String,
        ip: IpAddr,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("lost the coordinator before the group's verdict: {source}")]
    CoordinatorLost { source: ClusterError },
    #[error("the coordinator ended the session before the group's verdict: {reason}")]
    Closed { reason: String },
    #[error("no verdict from the coordinator before this node's deadline")]
    NoVerdict,
    #[error("cannot start the coordinator: {source}")]
    Coordinator { source: ClusterError },
}
