//! Groups whose "nodes" are network namespaces joined by veth links through two
//! bridges (control and data networks): a slowed data link is named slow in the
//! network lane, a cut link is named unreachable, and an odd group still localizes.
//! Needs root and iproute2, so the tests are ignored by default; `.ci/run` (as root,
//! with iproute2) runs them with `--include-ignored`, where a missing one fails them.

use std::time::Duration;

use crate::common::explained::{explain_everywhere, first_error, for_snapshot, hypothesis};
use crate::common::group::{Group, GroupSpec, findings};
use crate::common::netns::{Netns, control_ip, data_ip};
use crate::common::{self, Scratch};

const LIMIT: Duration = Duration::from_secs(120);

fn spec(netns: &Netns, nodes: u32, checks: &str) -> GroupSpec {
    let mut spec = GroupSpec::loopback(nodes, checks);
    spec.master_addr = control_ip(0);
    spec.data_addrs = (0..nodes).map(|n| Some(data_ip(n))).collect();
    spec.namespaces = (0..nodes).map(|n| Some(netns.namespace(n))).collect();
    spec
}

fn run(netns: &Netns, nodes: u32, checks: &str) -> serde_json::Value {
    run_with(netns, nodes, checks, &[])
}

fn run_with(netns: &Netns, nodes: u32, checks: &str, args: &[&str]) -> serde_json::Value {
    let scratch = Scratch::temp();
    let mut spec = spec(netns, nodes, checks);
    spec.extra_args = args.iter().map(|a| (*a).to_owned()).collect();
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    let coordinator = &finished[0];
    for rank in &finished[1..] {
        assert_eq!(
            rank.code, coordinator.code,
            "every node applies the group's verdict; rank {}: {}",
            rank.rank, rank.stderr
        );
    }
    coordinator.report()
}

fn lane_of(report: &serde_json::Value, check: &str, entity: &str) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == check)
        .and_then(|c| {
            c["entities"]
                .as_array()?
                .iter()
                .find(|e| common::group::entity_name(&e["entity"]) == entity)
        })
        .map(|e| e["lane"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs root and iproute2"]
fn a_rate_limited_link_names_its_node_slow_in_the_network_lane() {
    let _turn = common::one_at_a_time();
    let netns = Netns::create("s", 4);
    netns.limit_rate(2, "200mbit");
    let scratch = Scratch::temp();
    let mut spec = spec(&netns, 4, "all_reduce_2,all_reduce");
    // The coordinator keeps its report, whose bundle `explain` reads below.
    spec.keep_store = true;
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    let report = finished[0].report();
    assert_eq!(report["outcome"], "failed");
    for check in ["all_reduce_2", "all_reduce"] {
        assert_eq!(findings(&report, check), ["n2"], "{check}: {report:#}");
        assert_eq!(lane_of(&report, check, "n2"), "network");
    }
    assert!(report["group"]["first_error"].is_null(), "nobody crashed");

    let (explanation, text) = explain_everywhere(&scratch, &scratch.path("rank0.db"), "job-group");
    assert_eq!(first_error(&explanation), ("n2", "network"), "{text}");
    assert_eq!(
        hypothesis(&explanation, "network_link"),
        "confirmed",
        "{text}"
    );
    insta::assert_snapshot!("slow_link", for_snapshot(&text));
}

#[test]
#[ignore = "needs root and iproute2"]
fn a_cut_link_names_the_unreachable_pair() {
    let _turn = common::one_at_a_time();
    let netns = Netns::create("c", 4);
    netns.cut(1, 3);
    // Both networks are probed: the control one (c0) stays up, the data one (d0, where
    // the data plane listens too) is cut between n1 and n3.
    let scratch = Scratch::temp();
    let config = scratch.config("net.json", r#"{"gpuvet": {"interfaces": ["c0", "d0"]}}"#);
    let report = run_with(
        &netns,
        4,
        "network_connectivity",
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(
        findings(&report, "network_connectivity"),
        ["n1<->n3", "n1<->n3"],
        "the data plane and d0: {report:#}"
    );
    let check = &report["checks"][0];
    let reasons: Vec<&str> = check["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["verdict"] == "faulty")
        .map(|e| {
            assert_eq!(e["lane"], "network");
            e["reason"].as_str().unwrap()
        })
        .collect();
    assert!(
        reasons[0].starts_with("unreachable: n1→n3 0/"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].starts_with("on `d0`: unreachable: n1→n3 0/"),
        "{reasons:?}"
    );
    // 6 pairs on each of 3 networks.
    assert_eq!(check["entities"].as_array().unwrap().len(), 18);
}

#[test]
#[ignore = "needs root and iproute2"]
fn an_odd_group_of_five_localizes_its_slow_node() {
    let _turn = common::one_at_a_time();
    let netns = Netns::create("o", 5);
    // The fifth node is the one round one leaves over and pairs in a second round.
    netns.limit_rate(4, "200mbit");
    let report = run(&netns, 5, "all_reduce_2");
    assert_eq!(findings(&report, "all_reduce_2"), ["n4"], "{report:#}");
    assert_eq!(lane_of(&report, "all_reduce_2", "n4"), "network");
}

#[test]
#[ignore = "needs root and iproute2"]
fn a_healthy_namespace_group_passes() {
    let _turn = common::one_at_a_time();
    let netns = Netns::create("h", 4);
    let report = run(
        &netns,
        4,
        "all_reduce_2,all_to_all_2,all_reduce,all_gather,network_connectivity",
    );
    assert_eq!(report["outcome"], "passed", "{report:#}");
}

#[test]
#[ignore = "needs root, iproute2 and GPUVET_TEST_TORCH_PYTHON"]
fn gloo_through_torch_runs_on_the_data_network() {
    let _turn = common::one_at_a_time();
    let python = common::torch_python();
    let netns = Netns::create("t", 2);
    let report = run_with(&netns, 2, "pytorch_gloo_2", &["--python", &python]);
    assert_eq!(report["outcome"], "passed", "{report:#}");
    let params = &report["checks"][0]["params"];
    assert_eq!(params["engine"], "torch-gloo", "{report:#}");
    // Gloo is pointed at the interface of the data-plane address, not the control one.
    assert_eq!(params["GLOO_SOCKET_IFNAME"], "d0", "{report:#}");
}

/// The IPv4 TCP listeners in namespace `ns`, from its `/proc/net/tcp`.
fn listeners_in(ns: &str) -> Vec<std::net::SocketAddr> {
    let output = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/tcp"])
        .output()
        .expect("reading /proc/net/tcp in the namespace");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&"0A") {
                return None; // not LISTEN
            }
            let (ip, port) = fields[1].split_once(':')?;
            // The kernel prints the address as a host-order word of network-order bytes.
            let ip = u32::from_str_radix(ip, 16).ok()?;
            let port = u16::from_str_radix(port, 16).ok()?;
            Some((std::net::Ipv4Addr::from(ip.to_le_bytes()), port).into())
        })
        .collect()
}

/// Waits until namespace `ns` has `count` listeners, `port` among them when given (the
/// node has bound them all).
fn wait_for_listeners(ns: &str, count: usize, port: Option<u16>) -> Vec<std::net::SocketAddr> {
    let until = std::time::Instant::now() + LIMIT;
    loop {
        let found = listeners_in(ns);
        let complete = found.len() >= count
            && port.is_none_or(|port| found.iter().any(|addr| addr.port() == port));
        if complete || std::time::Instant::now() >= until {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs root and iproute2"]
fn every_listener_binds_where_the_control_connection_comes_from() {
    let _turn = common::one_at_a_time();
    let netns = Netns::create("l", 3);
    for listen_addr in [None, Some(control_ip(0))] {
        let scratch = Scratch::temp();
        let mut spec = spec(&netns, 3, "all_reduce_2");
        // No `--data-addr`: the default is under test. Rank 2 stays away, so ranks 0
        // and 1 hold their listeners while the coordinator waits for it.
        spec.data_addrs = vec![None; 3];
        spec.absent = vec![2];
        spec.rendezvous_secs = 10.0;
        if let Some(ip) = &listen_addr {
            spec.extra_args = vec!["--listen-addr".to_owned(), ip.clone()];
        }
        let group = Group::start(&scratch, &spec);
        // Rank 0: the coordinator, the data plane, one rail, the probe responder.
        let rank0 = wait_for_listeners(&netns.namespace(0), 4, Some(spec.port));
        // Rank 1: the data plane, one rail, the probe responder.
        let rank1 = wait_for_listeners(&netns.namespace(1), 3, None);
        drop(group);

        let control = format!(
            "{}:{}",
            listen_addr.as_deref().unwrap_or("0.0.0.0"),
            spec.port
        );
        assert_eq!(rank0.len(), 4, "{rank0:?}");
        assert!(rank0.contains(&control.parse().unwrap()), "{rank0:?}");
        for addr in rank0.iter().filter(|a| a.port() != spec.port) {
            assert_eq!(addr.ip().to_string(), control_ip(0), "{rank0:?}");
        }
        assert_eq!(rank1.len(), 3, "{rank1:?}");
        for addr in &rank1 {
            assert_eq!(addr.ip().to_string(), control_ip(1), "{rank1:?}");
        }
    }
}

#[test]
#[ignore = "needs root and iproute2"]
fn a_node_that_reaches_its_coordinator_on_loopback_is_still_reached_by_the_others() {
    let _turn = common::one_at_a_time();
    let netns = Netns::create("o", 3);
    let scratch = Scratch::temp();
    let mut spec = spec(&netns, 3, "all_reduce_2,network_connectivity");
    spec.data_addrs = vec![None; 3];
    // Rank 0 reaches its own coordinator on loopback; its peers cannot use that.
    spec.master_addrs[0] = Some("127.0.0.1".to_owned());
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    let report = finished[0].report();
    assert_eq!(report["outcome"], "passed", "{report:#}");
    for rank in &finished[1..] {
        assert_eq!(rank.code, Some(0), "rank {}: {}", rank.rank, rank.stderr);
    }
}
