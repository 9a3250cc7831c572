//! The NCCL RAS client against a fake RAS server that speaks the text protocol: dead,
//! mismatched and stuck ranks, a server that never answers, a refused connection,
//! garbage and a server too old for JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpuvet_model::results::Lane;
use gpuvet_watch::ras::{
    CommFindingKind, RasAnalyzer, RasClient, RasError, analyze_status, parse_status,
};

/// What the fake server does on one connection.
enum Behavior {
    /// Handshake, accept JSON, answer `STATUS` with this document, then hang up.
    Status(String),
    /// Like `Status`, but keep the connection open after the document.
    StatusNoHangUp(String),
    /// Accept the connection and never say a word.
    Silent,
    /// Answer `SET FORMAT json` the way NCCL before 2.28.7 does.
    NoJson,
}

/// A fake RAS server on 127.0.0.1; `join` returns the command lines it received, per
/// connection.
struct FakeRas {
    addr: String,
    handle: JoinHandle<Vec<Vec<String>>>,
}

impl FakeRas {
    fn start(connections: Vec<Behavior>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = thread::spawn(move || {
            connections
                .into_iter()
                .map(|behavior| {
                    let (stream, _) = listener.accept().unwrap();
                    serve(stream, behavior)
                })
                .collect()
        });
        Self { addr, handle }
    }

    fn client(&self) -> RasClient {
        // Generous: a slow CI machine must not fail these tests.
        RasClient::new(self.addr.clone()).with_timeout(Duration::from_secs(30))
    }

    fn join(self) -> Vec<Vec<String>> {
        self.handle.join().unwrap()
    }
}

fn serve(stream: TcpStream, behavior: Behavior) -> Vec<String> {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut received = Vec::new();
    if let Behavior::Silent = behavior {
        // Wait until the client gives up and closes its end.
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
        return received;
    }
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let command = line.trim_end().to_string();
        line.clear();
        received.push(command.clone());
        let upper = command.to_ascii_uppercase();
        if upper.starts_with("CLIENT PROTOCOL ") {
            writer.write_all(b"SERVER PROTOCOL 2\n").unwrap();
        } else if upper.starts_with("TIMEOUT ") {
            writer.write_all(b"OK\n").unwrap();
        } else if upper.starts_with("SET FORMAT ") {
            match behavior {
                Behavior::NoJson => writer
                    .write_all(format!("ERROR: Unknown command {command}\n").as_bytes())
                    .unwrap(),
                _ => writer.write_all(b"OK\n").unwrap(),
            }
        } else if upper == "STATUS" || upper == "VERBOSE STATUS" {
            match &behavior {
                Behavior::Status(document) => {
                    writer.write_all(document.as_bytes()).unwrap();
                    return received;
                }
                Behavior::StatusNoHangUp(document) => {
                    writer.write_all(document.as_bytes()).unwrap();
                    let mut sink = Vec::new();
                    let _ = reader.read_to_end(&mut sink);
                    return received;
                }
                _ => return received,
            }
        } else {
            writer
                .write_all(format!("ERROR: Unknown command {command}\n").as_bytes())
                .unwrap();
        }
    }
    received
}

/// A RAS JSON document for one 4-rank communicator: `all_reduce[rank]` is each rank's
/// AllReduce count; `missing` lists (rank, unresponsive, considered_dead).
fn document(all_reduce: [u64; 4], missing: &[(u32, bool, bool)]) -> String {
    let ranks: Vec<String> = (0..4u32)
        .filter(|rank| !missing.iter().any(|(gone, _, _)| gone == rank))
        .map(|rank| {
            format!(
                r#"{{"rank": {rank}, "host": "10.0.0.{host}", "pid": {pid}, "cuda_dev": {rank},
                    "nvml_dev": {rank},
                    "status": {{"init_state": 0, "async_error": 0, "finalize_called": false,
                               "destroy_flag": false, "abort_flag": false}},
                    "collective_counts": {{"Broadcast": 1, "Reduce": 0, "AllGather": 2,
                                           "ReduceScatter": 0, "AllReduce": {count}}}}}"#,
                host = rank / 2 + 1,
                pid = 5000 + rank,
                count = all_reduce[rank as usize],
            )
        })
        .collect();
    let missing: Vec<String> = missing
        .iter()
        .map(|(rank, unresponsive, dead)| {
            format!(
                r#"{{"rank": {rank}, "host": "10.0.0.{host}", "pid": {pid}, "cuda_dev": {rank},
                    "nvml_dev": {rank},
                    "status": {{"unresponsive": {unresponsive}, "considered_dead": {dead}}}}}"#,
                host = rank / 2 + 1,
                pid = 5000 + rank,
            )
        })
        .collect();
    format!(
        r#"{{
  "nccl_version": "2.29.1",
  "cuda_runtime_version": 13000,
  "cuda_driver_version": 13000,
  "timestamp": "2026-11-02 10:00:00",
  "communicators_count": 1,
  "communicators": [
    {{
      "hash": "0x5eed",
      "secondary_hash": "0x1:0x2",
      "size": 4,
      "ranks_count": {ranks_count},
      "missing_ranks_count": {missing_count},
      "ranks": [{ranks}],
      "missing_ranks": [{missing}]
    }}
  ],
  "ras": {{"collection_time_sec": 0.012, "timeouts_count": 0}}
}}
"#,
        ranks_count = ranks.len(),
        missing_count = missing.len(),
        ranks = ranks.join(","),
        missing = missing.join(","),
    )
}

#[test]
fn speaks_the_protocol_and_finds_a_dead_rank() {
    let server = FakeRas::start(vec![Behavior::Status(document(
        [7, 7, 7, 7],
        &[(3, true, true)],
    ))]);
    let status = server.client().status().unwrap();
    let findings = analyze_status(&status);

    assert_eq!(findings.len(), 1, "{findings:#?}");
    let dead = &findings[0];
    assert_eq!(dead.kind, CommFindingKind::Dead);
    assert_eq!(dead.communicator.as_deref(), Some("0x5eed"));
    assert_eq!(dead.ranks, vec![3]);
    assert_eq!(dead.hosts, vec!["10.0.0.2".to_string()]);
    assert_eq!(dead.pids, vec![5003]);
    assert_eq!(dead.waiting_ranks, vec![0, 1, 2]);
    assert_eq!(dead.lane, Lane::Network);
    assert!(dead.first_error);
    assert!(dead.message.contains("rank 3"), "{}", dead.message);

    let received = server.join();
    assert_eq!(
        received,
        vec![vec![
            "CLIENT PROTOCOL 2".to_string(),
            "SET FORMAT json".to_string(),
            "STATUS".to_string(),
        ]]
    );
}

#[test]
fn unresponsive_rank_is_a_timeout() {
    let server = FakeRas::start(vec![Behavior::Status(document(
        [7, 7, 7, 7],
        &[(1, true, false)],
    ))]);
    let findings = analyze_status(&server.client().status().unwrap());
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].kind, CommFindingKind::Timeout);
    assert_eq!(findings[0].ranks, vec![1]);
    assert!(findings[0].first_error);
    server.join();
}

#[test]
fn mismatched_counts_name_the_ranks_behind() {
    let server = FakeRas::start(vec![Behavior::Status(document(
        [6650, 6650, 6649, 6650],
        &[],
    ))]);
    let findings = analyze_status(&server.client().status().unwrap());

    assert_eq!(findings.len(), 1, "{findings:#?}");
    let mismatch = &findings[0];
    assert_eq!(mismatch.kind, CommFindingKind::Mismatch);
    assert_eq!(mismatch.ranks, vec![2]);
    assert_eq!(mismatch.waiting_ranks, vec![0, 1, 3]);
    assert_eq!(mismatch.lane, Lane::App);
    // One report cannot tell a hang from collectives in flight.
    assert!(!mismatch.first_error);
    assert!(
        mismatch.message.contains("AllReduce 6649 vs 6650"),
        "{}",
        mismatch.message
    );
    server.join();
}

#[test]
fn counter_that_stops_while_others_advance_is_stuck() {
    let server = FakeRas::start(vec![
        Behavior::Status(document([100, 100, 100, 100], &[])),
        Behavior::Status(document([101, 101, 100, 101], &[])),
    ]);
    let client = server.client();
    let mut analyzer = RasAnalyzer::new();

    assert!(analyzer.observe(&client.status().unwrap()).is_empty());
    let findings = analyzer.observe(&client.status().unwrap());
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let stuck = &findings[0];
    assert_eq!(stuck.kind, CommFindingKind::Stuck);
    assert_eq!(stuck.ranks, vec![2]);
    assert_eq!(stuck.hosts, vec!["10.0.0.2".to_string()]);
    assert_eq!(stuck.waiting_ranks, vec![0, 1, 3]);
    assert!(stuck.first_error);
    assert_eq!(server.join().len(), 2);
}

#[test]
fn nobody_moving_with_a_rank_behind_is_a_hang() {
    let stopped = document([101, 101, 100, 101], &[]);
    let server = FakeRas::start(vec![
        Behavior::Status(stopped.clone()),
        Behavior::Status(stopped),
    ]);
    let client = server.client();
    let mut analyzer = RasAnalyzer::new();

    let first = analyzer.observe(&client.status().unwrap());
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].kind, CommFindingKind::Mismatch);
    let second = analyzer.observe(&client.status().unwrap());
    assert_eq!(second.len(), 1, "{second:#?}");
    assert_eq!(second[0].kind, CommFindingKind::Hang);
    assert_eq!(second[0].ranks, vec![2]);
    assert_eq!(second[0].waiting_ranks, vec![0, 1, 3]);
    assert!(second[0].first_error);
    server.join();
}

#[test]
fn sends_verbose_status_and_the_ras_timeout() {
    let server = FakeRas::start(vec![Behavior::Status(document([1, 1, 1, 1], &[]))]);
    server
        .client()
        .with_verbose(true)
        .with_ras_timeout(Duration::from_secs(5))
        .status()
        .unwrap();
    assert_eq!(
        server.join(),
        vec![vec![
            "CLIENT PROTOCOL 2".to_string(),
            "TIMEOUT 5".to_string(),
            "SET FORMAT json".to_string(),
            "VERBOSE STATUS".to_string(),
        ]]
    );
}

#[test]
fn document_is_complete_without_waiting_for_the_server_to_hang_up() {
    let server = FakeRas::start(vec![Behavior::StatusNoHangUp(document([3, 3, 3, 3], &[]))]);
    // The whole exchange must finish well inside this; were the client to wait for the
    // server to hang up, it would time out instead.
    let client = RasClient::new(server.addr.clone()).with_timeout(Duration::from_secs(30));
    let status = client.status().unwrap();
    assert_eq!(status.communicators[0].ranks.len(), 4);
    server.join();
}

#[test]
fn server_that_never_answers_times_out_with_a_clear_error() {
    let server = FakeRas::start(vec![Behavior::Silent]);
    let error = RasClient::new(server.addr.clone())
        .with_timeout(Duration::from_millis(300))
        .query()
        .unwrap_err();
    assert!(
        matches!(
            error,
            RasError::Timeout {
                stage: "CLIENT PROTOCOL",
                ..
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(&format!("`{}`", server.addr)), "{message}");
    assert!(
        message.contains("did not answer `CLIENT PROTOCOL`"),
        "{message}"
    );
    server.join();
}

#[test]
fn refused_connection_names_the_address() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let error = RasClient::new(addr.clone()).query().unwrap_err();
    let RasError::Connect { source, .. } = &error else {
        panic!("expected a connect error, got {error:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(
        error
            .to_string()
            .starts_with(&format!("cannot connect to nccl ras at `{addr}`")),
        "{error}"
    );
}

#[test]
fn garbage_json_is_an_invalid_status() {
    let server = FakeRas::start(vec![
        Behavior::Status("{\"communicators\": [ {\"hash\": \"0x1\", \"ranks\": [{".to_string()),
        Behavior::Status("Job summary\n===========\n".to_string()),
    ]);
    let client = server.client();
    for _ in 0..2 {
        let error = client.status().unwrap_err();
        assert!(matches!(error, RasError::InvalidStatus { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .contains("invalid json status from nccl ras"),
            "{error}"
        );
    }
    server.join();
}

#[test]
fn old_nccl_without_json_is_rejected_with_a_hint() {
    let server = FakeRas::start(vec![Behavior::NoJson]);
    let error = server.client().query().unwrap_err();
    assert!(matches!(error, RasError::Rejected { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("rejected `SET FORMAT json`"), "{message}");
    assert!(message.contains("2.28.7"), "{message}");
    server.join();
}

#[test]
fn parse_status_accepts_what_the_client_returns() {
    let server = FakeRas::start(vec![Behavior::Status(document([2, 2, 2, 2], &[]))]);
    let exchange = server.client().query().unwrap();
    assert_eq!(exchange.server_protocol, Some(2));
    let status = parse_status(&exchange.document, &server.addr).unwrap();
    assert_eq!(status.nccl_version.as_deref(), Some("2.29.1"));
    server.join();
}
