//! NCCL RAS: ask the running NCCL job which ranks are dead, unreachable or behind.
//!
//! NCCL (2.24 and newer) runs a RAS thread in every process and answers text commands on
//! a local TCP port (`localhost:28028`, `NCCL_RAS_ADDR` to move it). Since 2.28.7 it can
//! answer in JSON. This module has three parts:
//!
//! - [`RasClient`] speaks the text protocol (`CLIENT PROTOCOL 2`, `SET FORMAT json`,
//!   `STATUS`) with a connect timeout and one deadline for the whole exchange, so a hung
//!   RAS thread can never hang the watcher;
//! - [`RasStatus`] models the JSON document, lenient to unknown fields and versions;
//! - [`RasAnalyzer`] turns one poll, and the difference to the previous poll, into typed
//!   [`CommFinding`]s: dead and unreachable ranks, missing ranks, ranks behind on their
//!   collective counts, NCCL errors, and ranks whose counts stopped moving.
//!
//! The JSON document is a raw dump: unlike the text report it carries no INCOMPLETE,
//! DEAD, TIMEOUT or MISMATCH sections, so the analyzer derives them the way NCCL's own
//! text report does (`src/ras/client_support.cc`).

mod analyzer;
mod client;
mod source;
mod status;

use std::io;
use std::time::Duration;

pub use analyzer::{CommFinding, CommFindingKind, RasAnalyzer, analyze_status};
pub use client::{
    DEFAULT_RAS_ADDR, MAX_RESPONSE_BYTES, RAS_ADDR_ENV, RAS_CLIENT_PROTOCOL, RasClient,
    RasExchange, ras_addr_from,
};
pub use source::{RasSource, comm_to_runtime};
pub use status::{
    MAX_STATUS_VALUES, RasCollection, RasCommunicator, RasMissingRank, RasMissingStatus, RasRank,
    RasRankStatus, RasStatus, parse_status,
};

/// Why a RAS query failed. Every message names the address it talked to.
#[derive(Debug, thiserror::Error)]
pub enum RasError {
    #[error("invalid nccl ras address `{addr}`: expected `host:port`")]
    InvalidAddress { addr: String },
    #[error("cannot resolve nccl ras address `{addr}`: {source}")]
    Resolve {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot connect to nccl ras at `{addr}`: {source}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("nccl ras at `{addr}` did not answer `{stage}` within {after:?}")]
    Timeout {
        addr: String,
        stage: &'static str,
        after: Duration,
    },
    #[error("nccl ras at `{addr}` closed the connection during `{stage}`")]
    Closed { addr: String, stage: &'static str },
    #[error("i/o error talking to nccl ras at `{addr}` during `{stage}`: {source}")]
    Io {
        addr: String,
        stage: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("unexpected handshake reply from nccl ras at `{addr}`: `{reply}`")]
    Handshake { addr: String, reply: String },
    #[error("nccl ras at `{addr}` rejected `{command}`: `{reply}`{hint}")]
    Rejected {
        addr: String,
        command: String,
        reply: String,
        /// Extra advice, e.g. the NCCL version that JSON output needs; empty when none.
        hint: &'static str,
    },
    #[error("nccl ras at `{addr}` sent more than {limit} bytes during `{stage}`")]
    TooLarge {
        addr: String,
        stage: &'static str,
        limit: usize,
    },
    #[error("invalid json status from nccl ras at `{addr}`: {source} (starts with `{excerpt}`)")]
    InvalidStatus {
        addr: String,
        excerpt: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the status from nccl ras at `{addr}` holds more than `{limit}` json values")]
    TooManyValues { addr: String, limit: usize },
}
