//! Groups of real `gpuvet check` processes on loopback: a node that stops answering,
//! crashes, holds the wrong token or never joins is named the first error, its peers
//! are secondary, and every process ends with a report instead of hanging.

use std::time::Duration;

use crate::common::group::{Finished, Group, GroupSpec, findings};
use crate::common::{self, Scratch, json, stderr};

/// Long enough for three checks and every wait gpuvet has (heartbeat deadline 3 s,
/// data-plane stall 5 s, agent's coordinator deadline 5 s), with room for a busy CI
/// machine; a rank still running after it counts as hung.
const LIMIT: Duration = Duration::from_secs(60);
const CHECKS: &str = "all_reduce_2,all_gather_2,all_reduce";

fn rank(finished: &[Finished], rank: u32) -> &Finished {
    finished.iter().find(|f| f.rank == rank).expect("a rank")
}

fn first_error(report: &serde_json::Value) -> &serde_json::Value {
    &report["group"]["first_error"]
}

fn secondary_ranks(report: &serde_json::Value) -> Vec<u64> {
    report["group"]["secondary"]
        .as_array()
        .map(|s| s.iter().filter_map(|i| i["rank"].as_u64()).collect())
        .unwrap_or_default()
}

#[test]
fn a_stopped_agent_is_the_first_error_and_its_peers_are_secondary() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let mut group = Group::start(&scratch, &GroupSpec::loopback(4, CHECKS));
    group.wait_for_stderr(0, "4 of 4 nodes joined", LIMIT);
    std::thread::sleep(Duration::from_millis(800));
    group.signal(2, libc::SIGSTOP);
    group.wait_for_exit(0, LIMIT);
    group.signal(2, libc::SIGCONT);
    let finished = group.finish(LIMIT);

    let coordinator = rank(&finished, 0);
    assert_eq!(coordinator.code, Some(1), "{}", coordinator.stderr);
    let report = coordinator.report();
    assert_eq!(report["outcome"], "failed");
    let first = first_error(&report);
    assert_eq!(first["rank"], 2, "{report:#}");
    assert_eq!(first["node"], "n2");
    assert_eq!(first["kind"], "unresponsive");
    assert_eq!(first["lane"], "host");
    assert!(!secondary_ranks(&report).contains(&2), "{report:#}");
    for other in [1, 3] {
        let other = rank(&finished, other);
        assert_eq!(other.code, Some(1), "{}", other.stderr);
        assert!(
            other
                .stderr
                .contains("first error: rank 2 (n2) unresponsive"),
            "{}",
            other.stderr
        );
    }
}

#[test]
fn a_killed_agent_is_the_first_error() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let group = Group::start(&scratch, &GroupSpec::loopback(4, CHECKS));
    group.wait_for_stderr(0, "4 of 4 nodes joined", LIMIT);
    std::thread::sleep(Duration::from_millis(800));
    group.signal(1, libc::SIGKILL);
    let finished = group.finish(LIMIT);

    let report = rank(&finished, 0).report();
    let first = first_error(&report);
    assert_eq!(first["rank"], 1, "{report:#}");
    assert_eq!(first["kind"], "crashed");
    assert!(!secondary_ranks(&report).contains(&1), "{report:#}");
    let failed_or_not_run: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "passed")
        .map(|c| c["reason"].as_str().unwrap_or(""))
        .collect();
    assert!(
        failed_or_not_run
            .iter()
            .all(|r| r.contains("rank 1 (n1)") || r.is_empty()),
        "{failed_or_not_run:?}"
    );
    assert_eq!(rank(&finished, 1).code, None, "killed by the signal");
    for other in [0, 2, 3] {
        assert_eq!(rank(&finished, other).code, Some(1));
    }
}

#[test]
fn a_wrong_token_is_refused_with_a_clear_message() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let mut spec = GroupSpec::loopback(4, "all_reduce_2");
    spec.tokens[3] = Some("not-the-group-secret".to_owned());
    // Long enough for every honest rank to join on a loaded machine; the coordinator
    // waits it out for the refused rank, so it is the test's length.
    spec.rendezvous_secs = 6.0;
    let finished = Group::start(&scratch, &spec).finish(LIMIT);

    let intruder = rank(&finished, 3);
    let coordinator = rank(&finished, 0);
    assert_eq!(intruder.code, Some(1));
    assert!(
        intruder.stderr.contains("refused") && intruder.stderr.contains("`GPUVET_TOKEN` differs"),
        "intruder: {}\ncoordinator: {}",
        intruder.stderr,
        coordinator.stderr
    );
    // Without the token its claim to be rank 3 (n3) proves nothing: the coordinator
    // names the address it came from.
    assert!(
        coordinator.stderr.contains("refused 127.0.0.1:")
            && coordinator.stderr.contains("authentication failed"),
        "{}",
        coordinator.stderr
    );
    assert!(
        !coordinator.stderr.contains("(rank 3, n3)"),
        "{}",
        coordinator.stderr
    );
    let report = coordinator.report();
    let first = first_error(&report);
    // Rank 3 never joined: that much is known, and nothing the stranger said is added.
    assert_eq!(first["rank"], 3);
    assert_ne!(first["node"], "n3", "{first}");
    assert_eq!(first["kind"], "never_joined");
    assert_eq!(first["lane"], "platform");
    assert!(
        !first["detail"].as_str().unwrap().contains("refused"),
        "{first}"
    );
    assert_eq!(report["checks"][0]["status"], "not_run");
}

#[test]
fn a_rank_that_never_joins_is_named_in_the_platform_lane() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let mut spec = GroupSpec::loopback(3, "all_reduce_2");
    spec.absent = vec![1];
    spec.rendezvous_secs = 3.0;
    let finished = Group::start(&scratch, &spec).finish(LIMIT);

    let report = rank(&finished, 0).report();
    let first = first_error(&report);
    assert_eq!(first["rank"], 1);
    assert_eq!(first["kind"], "never_joined");
    assert_eq!(first["lane"], "platform");
    assert_eq!(report["outcome"], "failed");
    let other = rank(&finished, 2);
    assert_eq!(other.code, Some(1));
    assert!(other.stderr.contains("never joined"), "{}", other.stderr);
}

#[test]
fn agents_stop_on_their_own_when_the_coordinator_dies() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let group = Group::start(&scratch, &GroupSpec::loopback(3, CHECKS));
    group.wait_for_stderr(0, "3 of 3 nodes joined", LIMIT);
    std::thread::sleep(Duration::from_millis(500));
    group.signal(0, libc::SIGKILL);
    let finished = group.finish(LIMIT);
    for other in [1, 2] {
        let other = rank(&finished, other);
        assert_eq!(other.code, Some(1), "{}", other.stderr);
        assert!(
            other.stderr.contains("coordinator"),
            "the agent says it lost the coordinator: {}",
            other.stderr
        );
    }
}

#[test]
fn an_odd_group_of_five_passes_every_pair_check() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .args(["check", "--json", "--no-store", "--backend", "cpu"])
        .args(["--cpu-devices", "1", "--local-nodes", "5"])
        .args(["--checks", "all_reduce_2,network_connectivity"])
        .output()
        .expect("running gpuvet");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["group"]["nodes"].as_array().unwrap().len(), 5);
    let pairs = &report["checks"][0];
    assert_eq!(pairs["status"], "passed", "{pairs:#}");
    // Two disjoint pairs, then the odd node with node 0, at least.
    let tests: u32 = pairs["params"]["pair_tests"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(tests >= 3, "{pairs:#}");
    let nodes: Vec<String> = pairs["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entity"]["node"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(nodes.len(), 5, "every node is judged: {nodes:?}");
    assert!(findings(&report, "all_reduce_2").is_empty());
    // 10 pairs, each reachable both ways.
    assert_eq!(
        report["checks"][1]["entities"].as_array().unwrap().len(),
        10
    );
}

#[test]
fn bad_group_flags_are_usage_errors() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .args(["check", "--local-nodes", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("`--local-nodes 1` is out of range; expected 2 to 64"),
        "{}",
        stderr(&output)
    );
    let output = scratch
        .gpuvet()
        .args(["check", "--nnodes", "2", "--node-rank", "1"])
        .args(["--master-addr", "127.0.0.1"])
        .env_remove("GPUVET_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("GPUVET_TOKEN"),
        "{}",
        stderr(&output)
    );
    let output = scratch
        .gpuvet()
        .args(["check", "--local-nodes", "3", "--nnodes", "3"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

/// The coordinator's port held by another process: the error says what could not
/// start, then each cause on its own line, once (what the coordinator could not do,
/// then the OS's reason), then the hint, and nothing was started (exit 2).
#[test]
fn a_coordinator_port_in_use_prints_each_cause_once_in_order() {
    let scratch = Scratch::temp();
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let output = scratch
        .gpuvet()
        .args(["check", "--nnodes", "2", "--node-rank", "0"])
        .args(["--master-addr", "127.0.0.1", "--gpuvet-port", &port])
        .args(["--backend", "sim", "--checks", "all_reduce_2", "--no-store"])
        .env("GPUVET_TOKEN", common::group::GROUP_TOKEN)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(
        common::error_lines(&output),
        [
            "error: cannot start the coordinator".to_owned(),
            "  caused by: cannot listen for agents".to_owned(),
            format!("  caused by: {}", common::os_error(libc::EADDRINUSE)),
            format!(
                "hint: another process may hold port `{port}`; set `GPUVET_PORT` or \
                 `--gpuvet-port` to a free one on every node"
            ),
        ]
    );
    drop(taken);
}

/// `gpuvet run` joins the group too, and every node applies the group's verdict: all
/// start the app when the group passes, none when a node is missing.
#[test]
fn run_applies_the_group_verdict_on_every_node() {
    let _turn = common::one_at_a_time();
    let app = |scratch: &Scratch| {
        vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!(
                "echo started > {}/app-$GPUVET_NODE",
                scratch.dir.path().display()
            ),
        ]
    };
    let scratch = Scratch::temp();
    let mut spec = GroupSpec::loopback(2, "all_reduce_2");
    spec.app = Some(app(&scratch));
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    for node in &finished {
        assert_eq!(node.code, Some(0), "{}", node.stderr);
        // Each node says where its place in the group came from, once.
        for said in [
            format!(
                "note: group: rank {} of 2 (from `NODE_RANK`, `NNODES`)",
                node.rank
            ),
            format!(
                "note: group: coordinator `127.0.0.1:{}` (from `MASTER_ADDR`, `GPUVET_PORT`)",
                spec.port
            ),
        ] {
            assert_eq!(
                node.stderr.lines().filter(|l| *l == said).count(),
                1,
                "no `{said}` in:\n{}",
                node.stderr
            );
        }
        assert!(
            scratch.path(&format!("app-n{}", node.rank)).exists(),
            "rank {} started the app: {}",
            node.rank,
            node.stderr
        );
    }

    let scratch = Scratch::temp();
    let mut spec = GroupSpec::loopback(3, "all_reduce_2");
    spec.app = Some(app(&scratch));
    spec.absent = vec![2];
    spec.rendezvous_secs = 3.0;
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    for node in &finished {
        assert_eq!(node.code, Some(1), "{}", node.stderr);
        assert!(!scratch.path(&format!("app-n{}", node.rank)).exists());
        assert!(
            node.stderr.contains("never joined"),
            "rank {} says why: {}",
            node.rank,
            node.stderr
        );
    }
}

/// With `fail_on_degraded`, GPUs below their own record fail the start on every node
/// of the group, not only where a store holds their record: each node judges its own
/// GPUs before it sends their results, and every node applies the group's verdict.
/// Here the coordinator's store is new (a node rebuilt, say), so only rank 1 knows its
/// GPUs' past; judged after the verdict, rank 0 passed while rank 1 failed.
#[test]
fn gpus_degraded_against_their_own_record_fail_the_start_on_every_node() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let config = |name: &str, speed: &str| {
        scratch.config(
            name,
            &format!(
                r#"{{"gpuvet": {{"backend": "sim", "history": {{"min_runs": 3, "fail_on_degraded": true}},
                               "sim": {{"devices": 2, "noise_pct": 0.5, "seed": 7, "speed": {speed}}}}}}}"#
            ),
        )
    };
    let group = |config: &std::path::Path| {
        let mut spec = GroupSpec::loopback(2, "gemm_flops");
        spec.keep_store = true;
        let args = vec!["--config".to_owned(), config.display().to_string()];
        spec.backend_args = vec![args; 2];
        Group::start(&scratch, &spec).finish(LIMIT)
    };
    let healthy = config("healthy.json", "{}");
    for _ in 0..3 {
        for node in group(&healthy) {
            assert_eq!(node.code, Some(0), "{}", node.stderr);
        }
    }
    std::fs::remove_file(scratch.path("rank0.db")).unwrap();
    // Every GPU of the group slowed alike: the peers pass them, the records do not.
    let slowed = config("slowed.json", r#"{"0": 0.85, "1": 0.85}"#);
    for node in group(&slowed) {
        assert_eq!(node.code, Some(1), "rank {}: {}", node.rank, node.stderr);
        let report = node.report();
        let gemm = &report["checks"][0];
        assert_eq!(gemm["status"], "failed", "rank {}: {gemm:#}", node.rank);
        let verdicts: Vec<(String, String)> = gemm["entities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    format!(
                        "{}/dev{}",
                        e["entity"]["node"].as_str().unwrap(),
                        e["entity"]["index"]
                    ),
                    e["verdict"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = [
            ("n0/dev0", "ok"),
            ("n0/dev1", "ok"),
            ("n1/dev0", "degraded"),
            ("n1/dev1", "degraded"),
        ]
        .iter()
        .map(|(gpu, verdict)| ((*gpu).to_owned(), (*verdict).to_owned()))
        .collect();
        let mut verdicts = verdicts;
        verdicts.sort();
        assert_eq!(verdicts, expected, "rank {}", node.rank);
    }
}

#[test]
fn connectivity_names_a_node_that_lacks_a_configured_interface() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let config = scratch.config(
        "net.json",
        r#"{"gpuvet": {"backend": "cpu", "cpu_devices": 1, "interfaces": ["lo", "nosuchif0"]}}"#,
    );
    let output = scratch
        .gpuvet()
        .args(["check", "--json", "--no-store", "--local-nodes", "3"])
        .args(["--checks", "network_connectivity", "--config"])
        .arg(&config)
        .output()
        .expect("running gpuvet");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    let check = &report["checks"][0];
    assert_eq!(check["status"], "failed");
    let entities = check["entities"].as_array().unwrap();
    let on = |network: &str| -> Vec<&serde_json::Value> {
        entities
            .iter()
            .filter(|e| {
                e["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("on `{network}`"))
            })
            .collect()
    };
    assert!(on("lo").iter().all(|e| e["verdict"] == "ok"), "{check:#}");
    let missing = on("nosuchif0");
    assert!(!missing.is_empty() && missing.iter().all(|e| e["verdict"] == "faulty"));
    assert!(
        missing[0]["reason"]
            .as_str()
            .unwrap()
            .contains("this node has no interface `nosuchif0`"),
        "{check:#}"
    );
}

#[test]
fn a_node_with_a_different_device_count_is_named_by_inventory_consistency() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let mut spec = GroupSpec::loopback(3, "inventory_consistency");
    spec.backend_args[2] = ["--backend", "cpu", "--cpu-devices", "2"]
        .map(str::to_owned)
        .to_vec();
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    for node in &finished {
        assert_eq!(node.code, Some(1), "every node fails: {}", node.stderr);
    }
    let report = finished[0].report();
    assert_eq!(
        findings(&report, "inventory_consistency"),
        ["n2"],
        "{report:#}"
    );
    let check = &report["checks"][0];
    let odd = check["entities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["verdict"] != "ok")
        .unwrap();
    assert_eq!(odd["lane"], "platform");
    assert_eq!(
        odd["reason"],
        "node `n2` has GPU count `2`; 2 of 3 nodes have `1`"
    );
    assert_eq!(check["params"]["gpu_count"], "1 on n0, n1; 2 on n2");
}

/// Each rank on the sim backend with two devices, rank `slow` at `speed`, and
/// `hang_rank` (if any) hanging in `hang_check` across nodes.
/// Sim nodes with two devices each; device 1 of node `slow.0` runs at `slow.1`.
fn sim_group(scratch: &Scratch, nodes: u32, checks: &str, slow: (u32, f64)) -> GroupSpec {
    let mut spec = GroupSpec::loopback(nodes, checks);
    for rank in 0..nodes {
        let speed = if rank == slow.0 { slow.1 } else { 1.0 };
        let config = scratch.config(
            &format!("sim{rank}.json"),
            &format!(
                r#"{{"gpuvet": {{"backend": "sim", "sim": {{"devices": 2,
                    "speed": {{"1": {speed}}}}}}}}}"#
            ),
        );
        spec.backend_args[rank as usize] =
            vec!["--config".to_owned(), config.display().to_string()];
    }
    spec
}

#[test]
fn backends_with_their_own_transport_run_collectives_across_nodes_and_localize() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let spec = sim_group(
        &scratch,
        4,
        "all_reduce_2,all_reduce,all_gather_2,all_to_all_2,multi_all_reduce_2,multi_all_reduce",
        (2, 0.5),
    );
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    let report = finished[0].report();
    assert_eq!(findings(&report, "all_reduce_2"), ["n2"], "{report:#}");
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let pairs = check("all_reduce_2");
    // The token went from each pair's first node to both, and the ranks add up.
    assert_eq!(pairs["params"]["transport"], "sim", "{pairs:#}");
    assert_eq!(pairs["params"]["ranks"], "4", "{pairs:#}");
    let ring = check("all_reduce");
    assert_eq!(ring["params"]["ranks"], "8", "{ring:#}");
    assert_eq!(ring["params"]["transport"], "sim", "{ring:#}");
    for name in ["all_gather_2", "all_to_all_2"] {
        assert_eq!(findings(&report, name), ["n2"], "{report:#}");
        assert_eq!(check(name)["params"]["transport"], "sim", "{report:#}");
    }
    // One communicator per rail: each pair's two nodes are the two ranks of each of
    // their two rails, and the ring's four nodes the four ranks of each.
    assert_eq!(
        findings(&report, "multi_all_reduce_2"),
        ["n2"],
        "{report:#}"
    );
    let rails = check("multi_all_reduce_2");
    assert_eq!(rails["params"]["transport"], "sim", "{rails:#}");
    assert_eq!(rails["params"]["rails"], "2", "{rails:#}");
    assert_eq!(rails["params"]["ranks"], "2", "{rails:#}");
    let rail = |node: &str, rail: &str| {
        rails["entities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["entity"]["node"] == node)
            .map(|e| e["measurement"]["extra"][rail].as_f64().unwrap())
            .unwrap()
    };
    assert_eq!(rail("n2", "rail1") * 2.0, rail("n0", "rail1"), "{rails:#}");
    assert_eq!(rail("n2", "rail0"), rail("n0", "rail0"), "{rails:#}");
    let n2 = rails["entities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["entity"]["node"] == "n2")
        .unwrap();
    assert!(
        n2["reason"]
            .as_str()
            .unwrap()
            .contains("its slowest rail is `rail1`"),
        "{n2:#}"
    );
    let ring = check("multi_all_reduce");
    assert_eq!(ring["params"]["ranks"], "4", "{ring:#}");
    assert_eq!(ring["params"]["transport"], "sim", "{ring:#}");
}

#[test]
fn a_collective_across_nodes_that_hangs_is_reported_at_the_deadline() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    // Rails: the tokens of both reach the agents, and the hang is still caught.
    let mut spec = sim_group(&scratch, 2, "multi_all_reduce_2", (0, 1.0));
    let hang = scratch.config(
        "hang.json",
        r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 2,
            "faults": [{"check": "multi_all_reduce_2", "device": 1, "fault": "hang"}]}}}"#,
    );
    spec.backend_args[1] = vec!["--config".to_owned(), hang.display().to_string()];
    spec.extra_args = vec!["--timeout".to_owned(), "0.25".to_owned()];
    let finished = Group::start(&scratch, &spec).finish(LIMIT);
    for node in &finished {
        assert_eq!(node.code, Some(1), "{}", node.stderr);
    }
    let report = finished[0].report();
    assert!(
        report.to_string().contains(
            "`multi_all_reduce_2` on 2 rails across 2 nodes did not finish before the deadline"
        ),
        "{report:#}"
    );
}

#[test]
fn a_short_token_is_a_usage_error_with_a_hint() {
    let scratch = Scratch::temp();
    let group = ["check", "--nnodes", "2", "--node-rank", "1"];
    let output = scratch
        .gpuvet()
        .args(group)
        .args(["--master-addr", "127.0.0.1"])
        .env("GPUVET_TOKEN", "tiny-secret")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("`GPUVET_TOKEN` is 11 bytes long; a group's token needs at least 16 bytes"),
        "{text}"
    );
    assert!(
        text.contains("hint: generate one with `openssl rand -hex 32`"),
        "{text}"
    );
    assert!(
        !text.contains("tiny-secret"),
        "the secret was printed: {text}"
    );
    let output = scratch
        .gpuvet()
        .args(group)
        .args(["--master-addr", "127.0.0.1", "--token", "x"])
        .env_remove("GPUVET_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("`--token` is 1 byte long")
            && stderr(&output).contains("hint: generate one with `openssl rand -hex 32`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_stranger_claiming_a_rank_is_named_by_its_address_and_no_member_is_blamed() {
    let _turn = common::one_at_a_time();
    let scratch = Scratch::temp();
    let mut spec = GroupSpec::loopback(2, "all_reduce_2");
    spec.absent = vec![1];
    let mut group = Group::start(&scratch, &spec);
    // A stranger with another token calls itself rank 1 on node `n1`, before the real
    // rank 1 arrives.
    let mut stranger = spec.clone();
    stranger.tokens[1] = Some("a-stranger-s-own-secret".to_owned());
    stranger.rendezvous_secs = 5.0;
    group.start_rank(&scratch, &stranger, 1);
    // The coordinator reports refusals once the rendezvous is over; the stranger
    // hears at once.
    group.wait_for_stderr(1, "`GPUVET_TOKEN` differs", LIMIT);
    group.start_rank(&scratch, &spec, 1);
    let finished = group.finish(LIMIT);

    let coordinator = rank(&finished, 0);
    assert_eq!(
        coordinator.code,
        Some(0),
        "{}\nranks: {finished:#?}",
        coordinator.stderr
    );
    let refusal = coordinator
        .stderr
        .lines()
        .find(|line| line.contains("refused 127.0.0.1:"))
        .expect("the refusal");
    assert!(refusal.contains("authentication failed"), "{refusal}");
    assert!(
        !refusal.contains("rank 1") && !refusal.contains("n1"),
        "the stranger's claim is repeated: {refusal}"
    );
    let report = coordinator.report();
    assert_eq!(report["outcome"], "passed", "{report:#}");
    assert!(first_error(&report).is_null(), "{report:#}");
    assert!(secondary_ranks(&report).is_empty(), "{report:#}");
    // The stranger itself was told why; the real rank 1 took part and passed.
    let stranger = finished.iter().find(|f| f.rank == 1).unwrap();
    assert!(
        stranger.stderr.contains("`GPUVET_TOKEN` differs"),
        "{}",
        stranger.stderr
    );
    let real = finished.iter().rfind(|f| f.rank == 1).unwrap();
    assert_eq!(real.code, Some(0), "{}", real.stderr);
}
