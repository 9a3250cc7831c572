//! Where the group meets: the coordinator's host, gpuvet's port, this node's rank, the
//! group's size and the shared token, from flags first and then the environment that
//! launchers already set.
//!
//! | what | flag | environment, first found wins |
//! |---|---|---|
//! | coordinator host | `--master-addr` | `MASTER_ADDR`, `LWS_LEADER_ADDRESS`, the first host of `SLURM_STEP_NODELIST`, else of `SLURM_JOB_NODELIST` |
//! | gpuvet's port | `--gpuvet-port` | `GPUVET_PORT`, else [`DEFAULT_PORT`] |
//! | node rank | `--node-rank` | `NODE_RANK`, `GROUP_RANK`, `LWS_WORKER_INDEX`, `SLURM_NODEID` |
//! | node count | `--nnodes` | `NNODES`, `LWS_GROUP_SIZE`, `SLURM_STEP_NUM_NODES`, `SLURM_NNODES`, else 1 |
//! | token | `--token` | `GPUVET_TOKEN` (at least 16 bytes) |
//! | coordinator's listen address | `--listen-addr` | `GPUVET_LISTEN_ADDR` (read by the binary's flag), else every interface |
//!
//! Slurm's variables come last, so a job script that sets torchrun's (or passes flags)
//! keeps them, and count only under `srun` (`SLURM_STEP_ID` is set): the batch script
//! itself also has `SLURM_NODEID=0` and the job's `SLURM_NNODES`, and a gpuvet there
//! would wait for peers that never come. A second task on a node (`SLURM_LOCALID` above
//! 0) would take its node's rank again, so it is refused.
//!
//! The group is the step's nodes, not the job's: a step may use a subset of the
//! allocation (`srun -N2` in an `sbatch -N4`, `srun -w gv-node3,gv-node4`). srun's
//! manual page (<https://slurm.schedmd.com/srun.html>, "OUTPUT ENVIRONMENT VARIABLES")
//! gives each task `SLURM_NODEID`, "the relative node ID of the current node",
//! `SLURM_STEP_NODELIST`, "list of nodes allocated to the step", and
//! `SLURM_STEP_NUM_NODES`, "number of nodes allocated to the step", while
//! `SLURM_JOB_NODELIST` stays the job's. On Slurm 22.05 (`scripts/slurm-cluster.sh`) a
//! step of `-w gv-node3,gv-node4` in a job of `gv-node[1-4]` had `SLURM_NODEID` 0 on
//! gv-node3 and 1 on gv-node4, `SLURM_STEP_NODELIST=gv-node[3-4]`,
//! `SLURM_STEP_NUM_NODES=2` and `SLURM_NNODES=2`, and `SLURM_JOB_NODELIST=gv-node[1-4]`,
//! whose first host is in no such step. So with one task per node the step's node list
//! (hostlist syntax, read by `gpuvet_model::node_list::expand_hostlist`) is in the order
//! of `SLURM_NODEID`, and its first host is node 0's: the coordinator's. The job's list
//! and `SLURM_NNODES` (which srun's manual page describes as the job's) are read only
//! where the step's are not set.
//!
//! torchrun's `WORLD_SIZE` counts processes, not nodes, so it is never read as the node
//! count; it only sharpens the hint when the count is missing. `MASTER_PORT` belongs to
//! the app and is only read to make sure gpuvet does not take it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use gpuvet_model::node_list::expand_hostlist;

use crate::auth::Token;
use crate::error::ClusterError;

/// gpuvet's control port when neither `--gpuvet-port` nor `GPUVET_PORT` names one.
///
/// A fixed port rather than `MASTER_PORT + 1`: firewall rules and Kubernetes network
/// policies need a port known in advance, and the ports next to `MASTER_PORT` are
/// often taken by the app itself (torchrun's store, vLLM's and SGLang's helpers). It
/// sits above torch's customary 29500 and the handful of ports jobs count up from it.
pub const DEFAULT_PORT: u16 = 29517;

/// Environment variables read by [`Rendezvous::resolve`].
pub mod env {
    pub const MASTER_ADDR: &str = "MASTER_ADDR";
    pub const MASTER_PORT: &str = "MASTER_PORT";
    pub const NODE_RANK: &str = "NODE_RANK";
    pub const GROUP_RANK: &str = "GROUP_RANK";
    pub const NNODES: &str = "NNODES";
    pub const WORLD_SIZE: &str = "WORLD_SIZE";
    pub const LWS_LEADER_ADDRESS: &str = "LWS_LEADER_ADDRESS";
    pub const LWS_GROUP_SIZE: &str = "LWS_GROUP_SIZE";
    pub const LWS_WORKER_INDEX: &str = "LWS_WORKER_INDEX";
    pub const GPUVET_PORT: &str = "GPUVET_PORT";
    pub const GPUVET_TOKEN: &str = "GPUVET_TOKEN";
    pub const SLURM_NODEID: &str = "SLURM_NODEID";
    pub const SLURM_NNODES: &str = "SLURM_NNODES";
    pub const SLURM_JOB_NODELIST: &str = "SLURM_JOB_NODELIST";
    pub const SLURM_STEP_NODELIST: &str = "SLURM_STEP_NODELIST";
    pub const SLURM_STEP_NUM_NODES: &str = "SLURM_STEP_NUM_NODES";
    pub const SLURM_STEP_ID: &str = "SLURM_STEP_ID";
    pub const SLURM_LOCALID: &str = "SLURM_LOCALID";
}

/// The flag names errors refer to; the binary should declare its flags with these.
pub mod flag {
    pub const MASTER_ADDR: &str = "--master-addr";
    pub const GPUVET_PORT: &str = "--gpuvet-port";
    pub const NODE_RANK: &str = "--node-rank";
    pub const NNODES: &str = "--nnodes";
    pub const TOKEN: &str = "--token";
}

/// Rendezvous settings given on the command line; each overrides the environment.
#[derive(Debug, Clone, Default)]
pub struct RendezvousFlags {
    /// The coordinator's host name or IP address, without a port.
    pub master_addr: Option<String>,
    pub gpuvet_port: Option<u16>,
    pub node_rank: Option<u32>,
    pub nnodes: Option<u32>,
    pub token: Option<String>,
    /// The IP rank 0's coordinator listens on; `None`: every interface.
    pub listen_addr: Option<IpAddr>,
}

/// Where a setting came from, for messages such as "rank 1 (from `NODE_RANK`)".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag(&'static str),
    Env(&'static str),
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(name) | Source::Env(name) => write!(f, "`{name}`"),
            Source::Default => f.write_str("the default"),
        }
    }
}

/// The coordinator's host and port, resolved again on every connection attempt: a
/// Kubernetes service name may not resolve until its pod is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Self {
        Endpoint {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl Endpoint {
    /// The local IP this host's kernel picks to reach the endpoint: the address an
    /// agent's control connection comes from, found without sending anything (a UDP
    /// socket's `connect` only consults the routing table). The first resolved address
    /// that has a route wins, as the agent's first reachable address does.
    pub fn local_ip_toward(&self) -> Result<IpAddr, ClusterError> {
        let context = || format!("cannot find the route to the coordinator at `{self}`");
        let addrs = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|err| ClusterError::io(context(), err))?;
        let mut last = std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("`{}` resolves to no address", self.host),
        );
        for addr in addrs {
            let any: SocketAddr = match addr {
                SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
            };
            let routed = UdpSocket::bind(any)
                .and_then(|socket| socket.connect(addr).map(|()| socket))
                .and_then(|socket| socket.local_addr());
            match routed {
                Ok(local) => return Ok(local.ip()),
                Err(err) => last = err,
            }
        }
        Err(ClusterError::io(context(), last))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// This node's place in the group, resolved and validated.
#[derive(Debug, Clone)]
pub struct Rendezvous {
    pub rank: u32,
    pub nnodes: u32,
    /// The coordinator's host; `None` only where rank 0 can reach itself on loopback.
    pub coordinator_host: Option<String>,
    /// gpuvet's control port.
    pub port: u16,
    /// `None` only for a group of one node, which needs no network; the binary may use
    /// [`Token::random`] then.
    pub token: Option<Token>,
    /// The IP the coordinator listens on, when `--listen-addr` names one.
    pub listen_ip: Option<IpAddr>,
    pub sources: Sources,
}

/// Where each setting of a [`Rendezvous`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sources {
    pub rank: Source,
    pub nnodes: Source,
    pub coordinator_host: Source,
    pub port: Source,
}

impl Rendezvous {
    /// Resolves the rendezvous from flags and an environment (pass [`process_env`] in
    /// the binary, a map in tests). Empty variables count as unset.
    pub fn resolve(
        flags: &RendezvousFlags,
        env_vars: &BTreeMap<String, String>,
    ) -> Result<Rendezvous, ClusterError> {
        let lookup = |names: &[&'static str]| {
            names.iter().find_map(|name| {
                let value = env_vars.get(*name)?.trim();
                (!value.is_empty()).then(|| (Source::Env(name), value.to_owned()))
            })
        };

        // Slurm's variables, only under `srun`.
        let under_srun = lookup(&[env::SLURM_STEP_ID]).is_some();
        let slurm = |names: &[&'static str], slurm: &[&'static str]| {
            let mut names = names.to_vec();
            if under_srun {
                names.extend_from_slice(slurm);
            }
            names
        };

        let nnodes_expected =
            "a positive whole number of nodes (elastic ranges such as `1:4` are not supported)";
        let (nnodes, nnodes_source) = match flags.nnodes {
            Some(n) => (
                check_nnodes(
                    n,
                    Source::Flag(flag::NNODES),
                    &n.to_string(),
                    nnodes_expected,
                )?,
                Source::Flag(flag::NNODES),
            ),
            None => match lookup(&slurm(
                &[env::NNODES, env::LWS_GROUP_SIZE],
                &[env::SLURM_STEP_NUM_NODES, env::SLURM_NNODES],
            )) {
                Some((source, text)) => (parse_nnodes(&text, source, nnodes_expected)?, source),
                None => (1, Source::Default),
            },
        };

        let (rank, rank_source) = match flags.node_rank {
            Some(rank) => (rank, Source::Flag(flag::NODE_RANK)),
            None => match lookup(&slurm(
                &[env::NODE_RANK, env::GROUP_RANK, env::LWS_WORKER_INDEX],
                &[env::SLURM_NODEID],
            )) {
                Some((source, text)) => (
                    parse_u32(&text, source, "a non-negative whole number")?,
                    source,
                ),
                None => (0, Source::Default),
            },
        };
        if rank_source == Source::Env(env::SLURM_NODEID) {
            let local = lookup(&[env::SLURM_LOCALID]);
            if let Some((source, text)) = local.filter(|(_, text)| text != "0") {
                return Err(invalid(
                    source,
                    &text,
                    "`0`: gpuvet runs once per node, so start it with `srun --ntasks-per-node=1`",
                ));
            }
        }
        if rank >= nnodes {
            let hint = match (nnodes_source, lookup(&[env::WORLD_SIZE])) {
                (Source::Default, Some(_)) => "; `WORLD_SIZE` counts processes, not nodes: set `NNODES` or `LWS_GROUP_SIZE` to the number of nodes".to_owned(),
                (Source::Default, None) => "; set `NNODES` or `LWS_GROUP_SIZE` to the number of nodes".to_owned(),
                _ => String::new(),
            };
            return Err(ClusterError::RankOutOfRange {
                rank,
                nnodes,
                rank_source: rank_source.to_string(),
                nnodes_source: nnodes_source.to_string(),
                hint,
            });
        }

        let host = match &flags.master_addr {
            Some(host) => Some((Source::Flag(flag::MASTER_ADDR), host.trim().to_owned())),
            None => match lookup(&[env::MASTER_ADDR, env::LWS_LEADER_ADDRESS]) {
                Some(found) => Some(found),
                None => lookup(&slurm(
                    &[],
                    &[env::SLURM_STEP_NODELIST, env::SLURM_JOB_NODELIST],
                ))
                .map(|(source, list)| Ok::<_, ClusterError>((source, first_host(&list, source)?)))
                .transpose()?,
            },
        };
        let (coordinator_host, host_source) = match host {
            Some((source, host)) => (Some(check_host(&host, source)?), source),
            None => (None, Source::Default),
        };
        if coordinator_host.is_none() && rank > 0 {
            return Err(ClusterError::MissingCoordinatorAddress { rank, nnodes });
        }

        let port_expected = "a TCP port from 1 to 65535";
        let (port, port_source) = match flags.gpuvet_port {
            Some(port) => (
                check_port(port, Source::Flag(flag::GPUVET_PORT), port_expected)?,
                Source::Flag(flag::GPUVET_PORT),
            ),
            None => match lookup(&[env::GPUVET_PORT]) {
                Some((source, text)) => {
                    let port = parse_u32(&text, source, port_expected)?;
                    let port =
                        u16::try_from(port).map_err(|_| invalid(source, &text, port_expected))?;
                    (check_port(port, source, port_expected)?, source)
                }
                None => (DEFAULT_PORT, Source::Default),
            },
        };
        // The app's port is its business; only a clash with it is ours.
        let app_port = lookup(&[env::MASTER_PORT]).and_then(|(_, text)| text.parse::<u16>().ok());
        if app_port == Some(port) {
            return Err(ClusterError::PortClash {
                port,
                port_source: port_source.to_string(),
            });
        }

        let token = match &flags.token {
            Some(secret) => Some(Token::from_setting(
                secret,
                &Source::Flag(flag::TOKEN).to_string(),
            )?),
            None => lookup(&[env::GPUVET_TOKEN])
                .map(|(_, secret)| Token::new(secret))
                .transpose()?,
        };
        if token.is_none() && nnodes > 1 {
            return Err(ClusterError::MissingToken { nnodes });
        }

        Ok(Rendezvous {
            rank,
            nnodes,
            coordinator_host,
            port,
            token,
            listen_ip: flags.listen_addr,
            sources: Sources {
                rank: rank_source,
                nnodes: nnodes_source,
                coordinator_host: host_source,
                port: port_source,
            },
        })
    }

    /// Rank 0 runs the coordinator as well as its agent.
    pub fn is_coordinator(&self) -> bool {
        self.rank == 0
    }

    /// Where rank 0's coordinator listens: `--listen-addr` when given; else every
    /// interface when other nodes must reach it (IPv6 when the coordinator's address is
    /// IPv6), since rank 0 cannot know by which of its addresses they will call; loopback
    /// for a group of one.
    pub fn bind_addr(&self) -> SocketAddr {
        if let Some(ip) = self.listen_ip {
            return SocketAddr::new(ip, self.port);
        }
        if self.nnodes == 1 {
            return SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port);
        }
        let ipv6 = self
            .coordinator_host
            .as_deref()
            .is_some_and(|host| host.parse::<Ipv6Addr>().is_ok());
        let any = if ipv6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        SocketAddr::new(any, self.port)
    }

    /// Where this node's agent connects. Rank 0 uses the coordinator's public address
    /// when it has one, so that its connection comes from the IP its peers can reach;
    /// and the address its coordinator listens on when `--listen-addr` names one, since
    /// it may listen nowhere else.
    pub fn coordinator_endpoint(&self) -> Endpoint {
        let listen_ip = self
            .listen_ip
            .filter(|ip| self.is_coordinator() && !ip.is_unspecified());
        let host = match (listen_ip, &self.coordinator_host) {
            (Some(ip), _) => ip.to_string(),
            (None, Some(host)) => host.clone(),
            (None, None) => Ipv4Addr::LOCALHOST.to_string(),
        };
        Endpoint {
            host,
            port: self.port,
        }
    }

    /// Where this node's place came from, e.g. "rank 1 of 4 (from `NODE_RANK`,
    /// `NNODES`)".
    pub fn describe_rank(&self) -> String {
        format!(
            "rank {} of {} (from {}, {})",
            self.rank, self.nnodes, self.sources.rank, self.sources.nnodes
        )
    }

    /// Where the coordinator's address came from, e.g. "coordinator `node-0:29517`
    /// (from `MASTER_ADDR`, the default)".
    pub fn describe_coordinator(&self) -> String {
        format!(
            "coordinator `{}` (from {}, {})",
            self.coordinator_endpoint(),
            self.sources.coordinator_host,
            self.sources.port
        )
    }
}

/// The process environment as a map, skipping variables that are not UTF-8.
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

fn invalid(source: Source, value: &str, expected: &str) -> ClusterError {
    ClusterError::InvalidSetting {
        name: source.to_string(),
        value: value.to_owned(),
        expected: expected.to_owned(),
    }
}

/// The first host of a Slurm hostlist (`SLURM_STEP_NODELIST`, `SLURM_JOB_NODELIST`):
/// node 0's.
fn first_host(list: &str, source: Source) -> Result<String, ClusterError> {
    let expected = |why: &str| format!("a Slurm hostlist such as `gpu-[01-04,07]` ({why})");
    let names =
        expand_hostlist(list).map_err(|err| invalid(source, list, &expected(&err.reason)))?;
    names
        .into_iter()
        .next()
        .ok_or_else(|| invalid(source, list, &expected("it names no host")))
}

fn parse_u32(text: &str, source: Source, expected: &str) -> Result<u32, ClusterError> {
    text.parse::<u32>()
        .map_err(|_| invalid(source, text, expected))
}

fn parse_nnodes(text: &str, source: Source, expected: &str) -> Result<u32, ClusterError> {
    check_nnodes(parse_u32(text, source, expected)?, source, text, expected)
}

fn check_nnodes(
    nnodes: u32,
    source: Source,
    text: &str,
    expected: &str,
) -> Result<u32, ClusterError> {
    if nnodes == 0 {
        Err(invalid(source, text, expected))
    } else {
        Ok(nnodes)
    }
}

fn check_port(port: u16, source: Source, expected: &str) -> Result<u16, ClusterError> {
    if port == 0 {
        Err(invalid(source, "0", expected))
    } else {
        Ok(port)
    }
}

/// A host name or IP address without a port; IPv6 may come in brackets.
fn check_host(host: &str, source: Source) -> Result<String, ClusterError> {
    let expected = "a host name or IP address without a port or scheme (gpuvet's port comes from `GPUVET_PORT`)";
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(bare.to_owned());
    }
    let name_like = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if name_like {
        Ok(bare.to_owned())
    } else {
        Err(invalid(source, host, expected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token long enough to be accepted.
    const TOKEN: &str = "0123456789abcdef";

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn resolve(pairs: &[(&str, &str)]) -> Result<Rendezvous, ClusterError> {
        Rendezvous::resolve(&RendezvousFlags::default(), &vars(pairs))
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        resolve(pairs).unwrap_err().to_string()
    }

    #[test]
    fn nothing_set_is_a_group_of_one_on_loopback() {
        let r = resolve(&[]).unwrap();
        assert_eq!((r.rank, r.nnodes, r.port), (0, 1, DEFAULT_PORT));
        assert!(r.is_coordinator());
        assert!(r.token.is_none());
        assert_eq!(r.bind_addr(), "127.0.0.1:29517".parse().unwrap());
        assert_eq!(r.coordinator_endpoint().to_string(), "127.0.0.1:29517");
        assert_eq!(r.sources.nnodes, Source::Default);
    }

    #[test]
    fn torchrun_variables_give_rank_size_and_host() {
        let r = resolve(&[
            ("MASTER_ADDR", "node-0.svc"),
            ("MASTER_PORT", "29500"),
            ("NODE_RANK", "2"),
            ("NNODES", "4"),
            ("WORLD_SIZE", "32"),
            ("GPUVET_TOKEN", "s3cret-s3cret-s3cret"),
        ])
        .unwrap();
        assert_eq!((r.rank, r.nnodes, r.port), (2, 4, DEFAULT_PORT));
        assert_eq!(r.coordinator_endpoint().to_string(), "node-0.svc:29517");
        assert_eq!(r.sources.rank, Source::Env("NODE_RANK"));
        assert_eq!(r.token.unwrap().reveal(), "s3cret-s3cret-s3cret");
        assert_eq!(
            resolve(&[
                ("GROUP_RANK", "1"),
                ("NNODES", "2"),
                ("MASTER_ADDR", "h"),
                ("GPUVET_TOKEN", TOKEN)
            ])
            .unwrap()
            .sources
            .rank,
            Source::Env("GROUP_RANK")
        );
    }

    #[test]
    fn leaderworkerset_variables_work_alone() {
        let r = resolve(&[
            ("LWS_LEADER_ADDRESS", "vllm-0.vllm.default"),
            ("LWS_GROUP_SIZE", "2"),
            ("LWS_WORKER_INDEX", "1"),
            ("GPUVET_TOKEN", TOKEN),
        ])
        .unwrap();
        assert_eq!((r.rank, r.nnodes), (1, 2));
        assert_eq!(r.coordinator_host.as_deref(), Some("vllm-0.vllm.default"));
        assert_eq!(r.bind_addr(), "0.0.0.0:29517".parse().unwrap());
        assert_eq!(
            r.sources.coordinator_host,
            Source::Env("LWS_LEADER_ADDRESS")
        );
    }

    #[test]
    fn torchrun_variables_win_over_lws_and_flags_win_over_both() {
        let env = vars(&[
            ("MASTER_ADDR", "a"),
            ("LWS_LEADER_ADDRESS", "b"),
            ("NODE_RANK", "1"),
            ("LWS_WORKER_INDEX", "2"),
            ("NNODES", "3"),
            ("LWS_GROUP_SIZE", "4"),
            ("GPUVET_PORT", "4000"),
            ("GPUVET_TOKEN", "env-token-env-token"),
        ]);
        let r = Rendezvous::resolve(&RendezvousFlags::default(), &env).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref(), r.port),
            (1, 3, Some("a"), 4000)
        );
        let flags = RendezvousFlags {
            master_addr: Some("c".into()),
            gpuvet_port: Some(5000),
            node_rank: Some(4),
            nnodes: Some(5),
            token: Some("flag-token-flag-token".into()),
            ..Default::default()
        };
        let r = Rendezvous::resolve(&flags, &env).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref(), r.port),
            (4, 5, Some("c"), 5000)
        );
        assert_eq!(r.token.unwrap().reveal(), "flag-token-flag-token");
        assert_eq!(r.sources.rank, Source::Flag("--node-rank"));
    }

    #[test]
    fn slurm_variables_give_rank_size_and_the_first_host() {
        let slurm = [
            ("SLURM_STEP_ID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_NODELIST", "gpu-[01-04,07]"),
            ("SLURM_NODEID", "2"),
            ("SLURM_NNODES", "5"),
            ("SLURM_JOB_ID", "4242"),
            ("GPUVET_TOKEN", TOKEN),
        ];
        let r = resolve(&slurm).unwrap();
        assert_eq!((r.rank, r.nnodes), (2, 5));
        assert_eq!(r.coordinator_host.as_deref(), Some("gpu-01"));
        assert_eq!(
            r.describe_rank(),
            "rank 2 of 5 (from `SLURM_NODEID`, `SLURM_NNODES`)"
        );
        assert_eq!(
            r.describe_coordinator(),
            "coordinator `gpu-01:29517` (from `SLURM_JOB_NODELIST`, the default)"
        );
        // Node 0 is the coordinator and calls its own public name.
        let mut first = slurm.to_vec();
        first[3] = ("SLURM_NODEID", "0");
        let r = resolve(&first).unwrap();
        assert!(r.is_coordinator());
        assert_eq!(r.coordinator_endpoint().to_string(), "gpu-01:29517");
    }

    /// What srun gave gv-node4 in a step of `-w gv-node3,gv-node4` inside a job of
    /// `gv-node[1-4]` (Slurm 22.05, `scripts/slurm-cluster.sh`).
    const SUBSET_STEP: [(&str, &str); 8] = [
        ("SLURM_STEP_ID", "2"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "1"),
        ("SLURM_NNODES", "2"),
        ("SLURM_STEP_NUM_NODES", "2"),
        ("SLURM_STEP_NODELIST", "gv-node[3-4]"),
        ("SLURM_JOB_NODELIST", "gv-node[1-4]"),
        ("GPUVET_TOKEN", TOKEN),
    ];

    #[test]
    fn a_step_on_part_of_the_job_meets_at_the_steps_first_host() {
        let r = resolve(&SUBSET_STEP).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref()),
            (1, 2, Some("gv-node3"))
        );
        assert_eq!(
            r.describe_rank(),
            "rank 1 of 2 (from `SLURM_NODEID`, `SLURM_STEP_NUM_NODES`)"
        );
        assert_eq!(
            r.describe_coordinator(),
            "coordinator `gv-node3:29517` (from `SLURM_STEP_NODELIST`, the default)"
        );
        // srun's manual page calls `SLURM_NNODES` the job's count: the step's wins.
        let mut job_count = SUBSET_STEP.to_vec();
        job_count[3] = ("SLURM_NNODES", "4");
        assert_eq!(resolve(&job_count).unwrap().nnodes, 2);
        // Without the step's variables, the job's (a whole-allocation step, as before).
        let job_only: Vec<_> = SUBSET_STEP
            .iter()
            .copied()
            .filter(|(name, _)| !name.starts_with("SLURM_STEP_N"))
            .collect();
        let r = resolve(&job_only).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref()),
            (1, 2, Some("gv-node1"))
        );
        assert_eq!(r.sources.nnodes, Source::Env("SLURM_NNODES"));
        assert_eq!(
            r.sources.coordinator_host,
            Source::Env("SLURM_JOB_NODELIST")
        );
        // Outside a step (the batch script) neither list counts.
        let batch: Vec<_> = SUBSET_STEP
            .iter()
            .copied()
            .filter(|(name, _)| *name != "SLURM_STEP_ID")
            .collect();
        let r = resolve(&batch).unwrap();
        assert_eq!((r.nnodes, r.coordinator_host.as_deref()), (1, None));
    }

    #[test]
    fn a_bad_step_nodelist_or_count_names_the_steps_variable() {
        let mut bad = SUBSET_STEP.to_vec();
        bad[5] = ("SLURM_STEP_NODELIST", "gv-node[4-3]");
        assert_eq!(
            error(&bad),
            "`SLURM_STEP_NODELIST` is `gv-node[4-3]`; expected a Slurm hostlist such as \
             `gpu-[01-04,07]` (the range `4-3` runs backwards)"
        );
        let mut bad = SUBSET_STEP.to_vec();
        bad[4] = ("SLURM_STEP_NUM_NODES", "0");
        assert!(
            error(&bad).starts_with("`SLURM_STEP_NUM_NODES` is `0`; expected a positive"),
            "{}",
            error(&bad)
        );
    }

    #[test]
    fn torchrun_and_lws_variables_and_flags_win_over_slurms() {
        let env = vars(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "gpu-[01-02]"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NNODES", "2"),
            ("MASTER_ADDR", "head"),
            ("NODE_RANK", "3"),
            ("LWS_GROUP_SIZE", "4"),
            ("GPUVET_TOKEN", TOKEN),
        ]);
        let r = Rendezvous::resolve(&RendezvousFlags::default(), &env).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref()),
            (3, 4, Some("head"))
        );
        let flags = RendezvousFlags {
            master_addr: Some("flagged".into()),
            node_rank: Some(0),
            nnodes: Some(2),
            ..Default::default()
        };
        let r = Rendezvous::resolve(&flags, &env).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref()),
            (0, 2, Some("flagged"))
        );
        // Each setting on its own: Slurm fills only what the others leave unset.
        let r = resolve(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "gpu-[01-02]"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NNODES", "2"),
            ("MASTER_ADDR", "head"),
            ("GPUVET_TOKEN", TOKEN),
        ])
        .unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref()),
            (1, 2, Some("head"))
        );
        assert_eq!(r.sources.rank, Source::Env("SLURM_NODEID"));
    }

    #[test]
    fn a_bad_slurm_nodelist_names_the_variable_and_the_reason() {
        let err = error(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "gpu-[04-01]"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NNODES", "2"),
            ("GPUVET_TOKEN", TOKEN),
        ]);
        assert_eq!(
            err,
            "`SLURM_JOB_NODELIST` is `gpu-[04-01]`; expected a Slurm hostlist such as \
             `gpu-[01-04,07]` (the range `04-01` runs backwards)"
        );
        let err = error(&[("SLURM_STEP_ID", "0"), ("SLURM_JOB_NODELIST", ",")]);
        assert!(err.ends_with("(it names no host)"), "{err}");
        let err = error(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NODEID", "x"),
            ("SLURM_NNODES", "2"),
        ]);
        assert_eq!(
            err,
            "`SLURM_NODEID` is `x`; expected a non-negative whole number"
        );
    }

    #[test]
    fn slurms_variables_count_only_under_srun_and_once_per_node() {
        // The batch script has the job's node count and node 0's id, but no step: a
        // gpuvet there is a group of one, not a coordinator waiting for three more.
        let batch = [
            ("SLURM_JOB_NODELIST", "gpu-[01-04]"),
            ("SLURM_NODEID", "0"),
            ("SLURM_NNODES", "4"),
            ("SLURM_LOCALID", "0"),
        ];
        let r = resolve(&batch).unwrap();
        assert_eq!(
            (r.rank, r.nnodes, r.coordinator_host.as_deref()),
            (0, 1, None)
        );
        // A second task on a node would be its rank again.
        let mut second_task = batch.to_vec();
        second_task.extend([("SLURM_STEP_ID", "0"), ("SLURM_LOCALID", "1")]);
        second_task.push(("GPUVET_TOKEN", TOKEN));
        assert_eq!(
            error(&second_task),
            "`SLURM_LOCALID` is `1`; expected `0`: gpuvet runs once per node, so start it \
             with `srun --ntasks-per-node=1`"
        );
        // With the rank from elsewhere, the task's local id is not Slurm's to judge.
        second_task.push(("NODE_RANK", "1"));
        assert_eq!(resolve(&second_task).unwrap().rank, 1);
    }

    #[test]
    fn world_size_is_never_the_node_count() {
        let err = error(&[
            ("WORLD_SIZE", "16"),
            ("NODE_RANK", "1"),
            ("MASTER_ADDR", "h"),
        ]);
        assert!(err.contains("rank `1` (from `NODE_RANK`) is out of range for a group of `1` node(s) (from the default)"), "{err}");
        assert!(
            err.contains("`WORLD_SIZE` counts processes, not nodes"),
            "{err}"
        );
        let r = resolve(&[("WORLD_SIZE", "8")]).unwrap();
        assert_eq!(r.nnodes, 1);
    }

    #[test]
    fn out_of_range_ranks_name_both_sources() {
        let err = error(&[
            ("NODE_RANK", "4"),
            ("NNODES", "4"),
            ("MASTER_ADDR", "h"),
            ("GPUVET_TOKEN", TOKEN),
        ]);
        assert_eq!(
            err,
            "rank `4` (from `NODE_RANK`) is out of range for a group of `4` node(s) (from `NNODES`); ranks run from 0 to 3"
        );
        let err = error(&[("NODE_RANK", "1")]);
        assert!(
            err.ends_with("set `NNODES` or `LWS_GROUP_SIZE` to the number of nodes"),
            "{err}"
        );
    }

    #[test]
    fn bad_numbers_name_the_variable_and_the_accepted_form() {
        assert_eq!(
            error(&[("NODE_RANK", "-1")]),
            "`NODE_RANK` is `-1`; expected a non-negative whole number"
        );
        assert!(error(&[("NNODES", "1:4")]).starts_with(
            "`NNODES` is `1:4`; expected a positive whole number of nodes (elastic ranges"
        ));
        assert!(
            error(&[("LWS_GROUP_SIZE", "0")])
                .starts_with("`LWS_GROUP_SIZE` is `0`; expected a positive whole number")
        );
        assert_eq!(
            error(&[("GPUVET_PORT", "70000")]),
            "`GPUVET_PORT` is `70000`; expected a TCP port from 1 to 65535"
        );
        assert_eq!(
            error(&[("GPUVET_PORT", "0")]),
            "`GPUVET_PORT` is `0`; expected a TCP port from 1 to 65535"
        );
        assert_eq!(
            error(&[("GPUVET_PORT", "http")]),
            "`GPUVET_PORT` is `http`; expected a TCP port from 1 to 65535"
        );
        let flags = RendezvousFlags {
            nnodes: Some(0),
            ..Default::default()
        };
        let err = Rendezvous::resolve(&flags, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("`--nnodes` is `0`; expected a positive whole number"),
            "{err}"
        );
        let flags = RendezvousFlags {
            gpuvet_port: Some(0),
            ..Default::default()
        };
        let err = Rendezvous::resolve(&flags, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "`--gpuvet-port` is `0`; expected a TCP port from 1 to 65535"
        );
    }

    #[test]
    fn workers_need_the_coordinator_address() {
        let err = error(&[("NODE_RANK", "1"), ("NNODES", "2"), ("GPUVET_TOKEN", TOKEN)]);
        assert_eq!(
            err,
            "rank `1` of a group of `2` nodes needs the coordinator's address: set `MASTER_ADDR` \
             or `LWS_LEADER_ADDRESS`, pass `--master-addr`, or run under Slurm's `srun` \
             (`SLURM_STEP_NODELIST`)"
        );
        // Rank 0 is the coordinator and can reach itself.
        let r = resolve(&[("NODE_RANK", "0"), ("NNODES", "2"), ("GPUVET_TOKEN", TOKEN)]).unwrap();
        assert_eq!(r.coordinator_endpoint().host, "127.0.0.1");
    }

    #[test]
    fn addresses_with_ports_or_schemes_are_refused_and_ipv6_is_understood() {
        let err = error(&[("MASTER_ADDR", "10.0.0.1:29500")]);
        assert!(err.starts_with("`MASTER_ADDR` is `10.0.0.1:29500`; expected a host name or IP address without a port"), "{err}");
        assert!(
            error(&[("LWS_LEADER_ADDRESS", "tcp://x")])
                .starts_with("`LWS_LEADER_ADDRESS` is `tcp://x`")
        );
        let r = resolve(&[
            ("MASTER_ADDR", "[fd00::1]"),
            ("NNODES", "2"),
            ("GPUVET_TOKEN", TOKEN),
        ])
        .unwrap();
        assert_eq!(r.coordinator_host.as_deref(), Some("fd00::1"));
        assert_eq!(r.bind_addr(), "[::]:29517".parse().unwrap());
        assert_eq!(r.coordinator_endpoint().to_string(), "[fd00::1]:29517");
    }

    #[test]
    fn the_apps_master_port_is_never_taken() {
        let err = error(&[("MASTER_PORT", "29517")]);
        assert_eq!(
            err,
            "gpuvet's port `29517` (from the default) is the app's `MASTER_PORT`; the app needs it, so set `GPUVET_PORT` to another port"
        );
        let err = error(&[("MASTER_PORT", "4000"), ("GPUVET_PORT", "4000")]);
        assert!(
            err.starts_with("gpuvet's port `4000` (from `GPUVET_PORT`)"),
            "{err}"
        );
        // An unreadable MASTER_PORT is the app's problem, not gpuvet's.
        assert!(resolve(&[("MASTER_PORT", "x")]).is_ok());
    }

    #[test]
    fn a_group_needs_a_token_and_empty_variables_are_unset() {
        let err = error(&[("NNODES", "2"), ("MASTER_ADDR", "h")]);
        assert!(
            err.starts_with("a group of `2` nodes needs a shared secret: set `GPUVET_TOKEN`"),
            "{err}"
        );
        let err = error(&[
            ("NNODES", "2"),
            ("MASTER_ADDR", "h"),
            ("GPUVET_TOKEN", "  "),
        ]);
        assert!(
            err.starts_with("a group of `2` nodes needs a shared secret"),
            "{err}"
        );
        let r = resolve(&[("NNODES", ""), ("NODE_RANK", " ")]).unwrap();
        assert_eq!((r.rank, r.nnodes), (0, 1));
        let flags = RendezvousFlags {
            token: Some(" ".into()),
            ..Default::default()
        };
        let err = Rendezvous::resolve(&flags, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("`--token` is ``; expected a non-empty secret"),
            "{err}"
        );
    }

    #[test]
    fn the_control_port_listens_on_every_interface_unless_told() {
        let group = [
            ("MASTER_ADDR", "10.0.0.1"),
            ("NNODES", "2"),
            ("GPUVET_TOKEN", TOKEN),
        ];
        let r = resolve(&group).unwrap();
        assert_eq!(r.bind_addr(), "0.0.0.0:29517".parse().unwrap());
        assert_eq!(r.coordinator_endpoint().to_string(), "10.0.0.1:29517");
        let flags = RendezvousFlags {
            listen_addr: Some("10.0.0.9".parse().unwrap()),
            ..Default::default()
        };
        let r = Rendezvous::resolve(&flags, &vars(&group)).unwrap();
        assert_eq!(r.bind_addr(), "10.0.0.9:29517".parse().unwrap());
        // Rank 0's own agent calls where its coordinator listens.
        assert_eq!(r.coordinator_endpoint().to_string(), "10.0.0.9:29517");
        // Other ranks still call the coordinator's address.
        let mut worker = group.to_vec();
        worker.push(("NODE_RANK", "1"));
        let r = Rendezvous::resolve(&flags, &vars(&worker)).unwrap();
        assert_eq!(r.coordinator_endpoint().to_string(), "10.0.0.1:29517");
        // Every interface, said out loud, changes nothing.
        let flags = RendezvousFlags {
            listen_addr: Some("0.0.0.0".parse().unwrap()),
            ..Default::default()
        };
        let r = Rendezvous::resolve(&flags, &vars(&group)).unwrap();
        assert_eq!(r.bind_addr(), "0.0.0.0:29517".parse().unwrap());
        assert_eq!(r.coordinator_endpoint().to_string(), "10.0.0.1:29517");
    }

    #[test]
    fn the_route_toward_the_coordinator_names_a_local_ip() {
        let endpoint = Endpoint {
            host: "127.0.0.1".to_owned(),
            port: 29517,
        };
        assert_eq!(
            endpoint.local_ip_toward().unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        let nowhere = Endpoint {
            host: "no-such-host.invalid".to_owned(),
            port: 1,
        };
        let err = nowhere.local_ip_toward().unwrap_err().to_string();
        assert!(
            err.starts_with("cannot find the route to the coordinator at `no-such-host.invalid:1`"),
            "{err}"
        );
    }

    #[test]
    fn short_tokens_are_refused_with_a_hint_and_never_shown() {
        let err =
            resolve(&[("NNODES", "2"), ("MASTER_ADDR", "h"), ("GPUVET_TOKEN", "x")]).unwrap_err();
        assert!(
            err.to_string().starts_with("`GPUVET_TOKEN` is 1 byte long"),
            "{err}"
        );
        assert!(err.hint().unwrap().contains("openssl rand -hex 32"));
        let flags = RendezvousFlags {
            token: Some("tiny-secret".into()),
            ..Default::default()
        };
        let err = Rendezvous::resolve(&flags, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("`--token` is 11 bytes long"), "{err}");
        assert!(!err.contains("tiny-secret"), "{err}");
    }

    #[test]
    fn describe_says_where_each_setting_came_from() {
        let r = resolve(&[
            ("MASTER_ADDR", "n0"),
            ("NODE_RANK", "1"),
            ("NNODES", "4"),
            ("GPUVET_TOKEN", TOKEN),
        ])
        .unwrap();
        assert_eq!(
            r.describe_rank(),
            "rank 1 of 4 (from `NODE_RANK`, `NNODES`)"
        );
        assert_eq!(
            r.describe_coordinator(),
            "coordinator `n0:29517` (from `MASTER_ADDR`, the default)"
        );
    }
}
