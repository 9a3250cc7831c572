//! `check --sim-nodes N`: a group of sim nodes in one process, over the in-memory
//! network, through the real binary: a slow link and a hung node are named, and what
//! only such a group can play is refused elsewhere with a hint.

use crate::common::{self, Scratch, json, stderr};

const SCRIPT: &str = r#"{"gpuvet": {"backend": "sim", "pairing": "full", "sim": {
    "devices": 2, "noise_pct": 0.5, "seed": 3,
    "link_speed": {"local-1<->local-4": 0.5},
    "node_faults": {"local-5": {"check": "all_reduce_1", "fault": "hang"}}}}}"#;

#[test]
fn a_slow_link_and_a_hung_node_are_named_in_a_group_in_one_process() {
    let scratch = Scratch::temp();
    let config = scratch.config("sim.json", SCRIPT);
    let output = scratch.run(&[
        "check",
        "--sim-nodes",
        "6",
        "--config",
        config.to_str().unwrap(),
        "--checks",
        "gemm_flops,all_reduce_2,all_reduce_1",
        "--json",
    ]);
    common::assert_exit(
        &output,
        1,
        "local-5: scripted hang at the start of `all_reduce_1`",
    );
    let report = json(&output);
    let group = &report["group"];
    assert_eq!(group["nodes"].as_array().unwrap().len(), 6, "{group:#}");
    assert_eq!(group["first_error"]["node"], "local-5", "{group:#}");
    assert_eq!(group["first_error"]["kind"], "unresponsive", "{group:#}");
    let pairs = &report["checks"][1];
    assert_eq!(pairs["name"], "all_reduce_2");
    let mut slow: Vec<Vec<&str>> = pairs["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["verdict"] == "slow")
        .map(|e| {
            let entity = &e["entity"];
            assert_eq!(entity["kind"], "node_pair", "{entity:#}");
            let mut ends = vec![entity["a"].as_str().unwrap(), entity["b"].as_str().unwrap()];
            ends.sort_unstable();
            ends
        })
        .collect();
    slow.dedup();
    assert_eq!(slow, [["local-1", "local-4"]], "{}", stderr(&output));
}

#[test]
fn what_only_a_group_in_one_process_plays_is_refused_elsewhere_with_a_hint() {
    let scratch = Scratch::temp();
    let config = scratch.config("sim.json", SCRIPT);
    let config = config.to_str().unwrap();
    for (args, needle) in [
        (
            &["check", "--local-nodes", "2", "--config", config][..],
            "`gpuvet.sim.link_speed`, `gpuvet.sim.node_faults` are played only by a group in one process",
        ),
        (
            &["check", "--sim-nodes", "1", "--config", config][..],
            "`--sim-nodes 1` is out of range; expected 2 to 4096",
        ),
        (
            &["check", "--sim-nodes", "2", "--backend", "cpu"][..],
            "`--sim-nodes` runs sim nodes, and the backend is `cpu`",
        ),
    ] {
        let output = scratch.run(args);
        common::assert_exit(&output, 2, needle);
        assert!(
            stderr(&output).contains("hint: "),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}
