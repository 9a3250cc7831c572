//! One rank of gpuvet's TCP data plane, for benchmarks by hand: run one process per
//! "node" (e.g. one per network namespace) and each prints what it measured.
//!
//! ```text
//! tcp_rank --rank 0 --peers 10.0.0.1:29600,10.0.0.2:29600 --key HEX
//!          [--collective all_reduce] [--bytes N] [--seconds 2] [--round 1] [--timeout 60]
//! tcp_rank --local 2 [--collective all_gather] ...   # every rank as a thread, loopback
//! ```
//!
//! Collectives: `all_reduce`, `all_gather`, `all_to_all`, `host` (the `pytorch_gloo_2`
//! fallback). The rank listens on its own entry of `--peers` (all interfaces' port when
//! the address is not local, e.g. behind NAT). `--bytes` defaults to gpuvet's own
//! sizing for the group. `--key` is the data-plane key every rank proves in its greeting
//! (64 hex digits, the same for every rank, e.g. from `openssl rand -hex 32`); `--local`
//! makes up one. Output: one `key=value` line per rank.

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use gpuvet_backend::{BackendError, CancelToken, Sample};
use gpuvet_dataplane::tcp::{CollectiveSpec, DataKey, GroupSpec, TcpGroup, Topology};

#[derive(Debug, Clone)]
struct Options {
    rank: Option<usize>,
    peers: Vec<SocketAddr>,
    local: Option<usize>,
    collective: String,
    bytes: Option<u64>,
    seconds: f64,
    round: u64,
    timeout: Duration,
    key: Option<DataKey>,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        rank: None,
        peers: Vec::new(),
        local: None,
        collective: "all_reduce".to_owned(),
        bytes: None,
        seconds: 2.0,
        round: 1,
        timeout: Duration::from_secs(60),
        key: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("`{flag}` needs a value"))?;
        let bad = |what: &str| format!("`{flag}`: `{value}` is not {what}");
        match flag.as_str() {
            "--rank" => options.rank = Some(value.parse().map_err(|_| bad("a rank"))?),
            "--local" => options.local = Some(value.parse().map_err(|_| bad("a rank count"))?),
            "--peers" => {
                options.peers = value
                    .split(',')
                    .map(|addr| addr.parse().map_err(|_| bad("a list of IP:port")))
                    .collect::<Result<_, _>>()?
            }
            "--collective" => options.collective = value,
            "--bytes" => options.bytes = Some(value.parse().map_err(|_| bad("a byte count"))?),
            "--seconds" => options.seconds = value.parse().map_err(|_| bad("seconds"))?,
            "--round" => options.round = value.parse().map_err(|_| bad("a round id"))?,
            "--key" => options.key = Some(parse_key(&value).ok_or_else(|| bad("64 hex digits"))?),
            "--timeout" => {
                options.timeout = Duration::from_secs(value.parse().map_err(|_| bad("seconds"))?)
            }
            _ => return Err(format!("unknown flag `{flag}`")),
        }
    }
    Ok(options)
}

fn parse_key(hex: &str) -> Option<DataKey> {
    let digits: Vec<u8> = hex
        .chars()
        .map(|c| c.to_digit(16).and_then(|d| u8::try_from(d).ok()))
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = digits
        .chunks(2)
        .map(|pair| (pair[0] << 4) | pair[1])
        .collect();
    let bytes: [u8; 32] = (digits.len() == 64).then_some(bytes)?.try_into().ok()?;
    Some(DataKey::from_bytes(bytes))
}

fn run_rank(
    options: &Options,
    rank: usize,
    peers: &[SocketAddr],
    listener: &TcpListener,
) -> Result<Sample, BackendError> {
    let cancel = CancelToken::new();
    let deadline = Instant::now() + options.timeout;
    let topology = if options.collective == "all_to_all" {
        Topology::FullMesh
    } else {
        Topology::Ring
    };
    let group_spec = GroupSpec {
        rank,
        peers: peers.to_vec(),
        round: options.round,
        topology,
        key: options.key.clone().expect("a key, checked in main"),
    };
    let mut group = TcpGroup::establish(&group_spec, listener, deadline, &cancel)?;
    let spec = CollectiveSpec {
        bytes: options.bytes,
        min_seconds: options.seconds,
        ..CollectiveSpec::default()
    };
    match options.collective.as_str() {
        "all_reduce" => group.all_reduce(&spec, deadline, &cancel),
        "all_gather" => group.all_gather(&spec, deadline, &cancel),
        "all_to_all" => group.all_to_all(&spec, deadline, &cancel),
        "host" => group.host_network_collective(&spec, deadline, &cancel),
        other => Err(BackendError::Unsupported(format!(
            "unknown collective `{other}`"
        ))),
    }
}

fn report(options: &Options, rank: usize, result: &Result<Sample, BackendError>) -> String {
    match result {
        Ok(sample) => {
            let mut line = format!(
                "collective={} rank={rank} busbw_gbps={:.3} algbw_gbps={:.3}",
                options.collective, sample.value, sample.extra["algbw"]
            );
            for (key, value) in &sample.extra {
                if key != "algbw" {
                    line.push_str(&format!(" {key}={value:.4}"));
                }
            }
            for key in ["ranks", "bytes", "iterations"] {
                line.push_str(&format!(" {key}={}", sample.params[key]));
            }
            line.push_str(&format!(" wrong_result={:?}", sample.wrong_result));
            line
        }
        Err(error) => format!(
            "collective={} rank={rank} error={error:?}",
            options.collective
        ),
    }
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
fn main() -> ExitCode {
    let mut options = match parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("tcp_rank: {message}");
            return ExitCode::from(2);
        }
    };
    if options.key.is_none() {
        if options.local.is_none() {
            eprintln!(
                "tcp_rank: `--rank` needs `--key`: 64 hex digits, the same for every rank (e.g. `openssl rand -hex 32`)"
            );
            return ExitCode::from(2);
        }
        options.key = Some(DataKey::random().expect("the system's random source"));
    }
    let results: Vec<(usize, Result<Sample, BackendError>)> = if let Some(ranks) = options.local {
        let listeners: Vec<TcpListener> = (0..ranks)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"))
            .collect();
        let peers: Vec<SocketAddr> = listeners
            .iter()
            .map(|listener| listener.local_addr().expect("a bound address"))
            .collect();
        thread::scope(|scope| {
            let handles: Vec<_> = listeners
                .iter()
                .enumerate()
                .map(|(rank, listener)| {
                    let (options, peers) = (&options, &peers);
                    scope.spawn(move || (rank, run_rank(options, rank, peers, listener)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a rank thread"))
                .collect()
        })
    } else {
        let Some(rank) = options.rank.filter(|&rank| rank < options.peers.len()) else {
            eprintln!(
                "tcp_rank: give `--local N`, or `--rank R` and `--peers` with an entry for R"
            );
            return ExitCode::from(2);
        };
        let own = options.peers[rank];
        let listener = TcpListener::bind(own)
            .or_else(|_| TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], own.port()))))
            .expect("bind the data-plane port");
        vec![(rank, run_rank(&options, rank, &options.peers, &listener))]
    };
    let mut failed = false;
    for (rank, result) in &results {
        println!("{}", report(&options, *rank, result));
        failed |= result
            .as_ref()
            .map_or(true, |sample| sample.wrong_result.is_some());
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
