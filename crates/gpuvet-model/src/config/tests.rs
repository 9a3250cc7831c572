use super::*;
use crate::analysis::Limit;
use crate::catalog::CheckName;
use crate::pairing::PairingMode;

/// PAI's sample from the seed documents, unchanged.
const PAI_SAMPLE: &str = include_str!("../../tests/fixtures/pai_sample.json");

fn error(text: &str) -> ConfigError {
    Config::from_json(text).expect_err("the config should be refused")
}

fn invalid(text: &str) -> (String, String, Option<String>) {
    match error(text) {
        ConfigError::Invalid {
            path,
            message,
            hint,
        } => (path, message, hint),
        other => panic!("expected an invalid-value error, got {other:?}"),
    }
}

fn sanity(body: &str) -> String {
    format!(r#"{{"aimaster": {{"sanity_check": {body}}}}}"#)
}

#[test]
fn pai_sample_is_accepted_unchanged() {
    let config = Config::from_json(PAI_SAMPLE).unwrap();
    let sanity = config.sanity.unwrap();
    let pai_checks: Vec<CheckName> = CheckName::ALL
        .into_iter()
        .filter(|name| name.spec().pai_estimate_secs.is_some())
        .collect();
    assert_eq!(sanity.checks.as_slice(), pai_checks);
    assert_eq!(sanity.fail_action, FailAction::Retain);
    assert_eq!(sanity.timeout.duration(), Duration::from_secs(6000));
    assert_eq!(
        config.runtime,
        Some(RuntimeConfig {
            check: "c4d",
            fail_action: RuntimeFailAction::Retain
        })
    );
}

#[test]
fn defaults_are_written_down_once_and_parse() {
    let config = Config::default();
    let sanity = config.sanity_or_default();
    assert_eq!(sanity.checks.as_slice(), DEFAULT_CHECKS);
    assert_eq!(sanity.fail_action, FailAction::Fail);
    assert_eq!(sanity.timeout.duration(), Duration::from_secs(300));
    assert_eq!(
        config.settings.tolerance, None,
        "the backend's default applies"
    );
    assert_eq!(config.settings.backend, BackendChoice::Auto);
    // An empty file means every default too.
    let empty = Config::from_json("{}").unwrap();
    assert_eq!(empty.sanity_or_default(), sanity);
    assert_eq!(empty.settings, config.settings);
}

#[test]
fn an_aimaster_block_without_sanity_check_runs_none() {
    let config =
        Config::from_json(r#"{"aimaster": {"runtime_check": {"micro_benchmarks": "C4D"}}}"#)
            .unwrap();
    assert_eq!(config.sanity, None);
    assert_eq!(
        config.runtime,
        Some(RuntimeConfig {
            check: "c4d",
            fail_action: RuntimeFailAction::Retain
        })
    );
}

#[test]
fn malformed_json_names_line_and_column() {
    let err = error("{\n  \"aimaster\": {\n    \"sanity_check\": {,}\n  }\n}");
    match &err {
        ConfigError::Syntax { line, column, .. } => assert_eq!((*line, *column), (3, 22)),
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("the config is not valid JSON: "),
        "{err}"
    );
    assert!(matches!(error(""), ConfigError::Syntax { .. }));
    assert!(matches!(
        error("{\"aimaster\": "),
        ConfigError::Syntax { .. }
    ));
}

#[test]
fn misspelled_check_gets_did_you_mean() {
    let (path, message, hint) = invalid(&sanity(
        r#"{"micro_benchmarks": "gemm_flops,all_redcue_1"}"#,
    ));
    assert_eq!(path, "aimaster.sanity_check.micro_benchmarks[1]");
    assert_eq!(message, "unknown check `all_redcue_1`");
    assert_eq!(hint.as_deref(), Some("did you mean `all_reduce_1`?"));
}

#[test]
fn unknown_check_lists_the_catalog() {
    let (_, message, hint) = invalid(&sanity(r#"{"micro_benchmarks": "stream_triad"}"#));
    assert_eq!(message, "unknown check `stream_triad`");
    assert!(
        hint.unwrap()
            .starts_with("the checks are: gemm_flops, all_reduce_1")
    );
}

#[test]
fn unknown_fail_action_lists_what_is_accepted() {
    let (path, message, hint) = invalid(&sanity(r#"{"fail_action": "retian"}"#));
    assert_eq!(path, "aimaster.sanity_check.fail_action");
    assert_eq!(
        message,
        "unknown value `retian`; expected one of `fail`, `retain`, `ignore`, `rebuild`"
    );
    assert_eq!(hint.as_deref(), Some("did you mean `retain`?"));
}

#[test]
fn ignore_is_an_alias_of_retain() {
    let config = Config::from_json(&sanity(r#"{"fail_action": "ignore"}"#)).unwrap();
    assert_eq!(config.sanity.unwrap().fail_action, FailAction::Retain);
}

#[test]
fn zero_negative_absurd_and_non_numeric_timeouts_are_refused() {
    for bad in ["0", "-5", "100000"] {
        let (path, message, _) = invalid(&sanity(&format!(r#"{{"timeout": {bad}}}"#)));
        assert_eq!(path, "aimaster.sanity_check.timeout");
        assert!(
            message.contains(
                "is not a usable timeout; expected minutes greater than 0 and at most 1440"
            ),
            "{message}"
        );
    }
    let (path, message, _) = invalid(&sanity(r#"{"timeout": "100"}"#));
    assert_eq!(path, "aimaster.sanity_check.timeout");
    assert_eq!(message, "invalid type: string \"100\", expected f64");
}

#[test]
fn fractional_minutes_are_accepted() {
    let config = Config::from_json(&sanity(r#"{"timeout": 0.5}"#)).unwrap();
    assert_eq!(
        config.sanity.unwrap().timeout.duration(),
        Duration::from_secs(30)
    );
}

#[test]
fn duplicate_checks_are_refused() {
    let (path, message, _) = invalid(&sanity(
        r#"{"micro_benchmarks": "gemm_flops, kernel_launch,gemm_flops"}"#,
    ));
    assert_eq!(path, "aimaster.sanity_check.micro_benchmarks[2]");
    assert_eq!(message, "check `gemm_flops` is listed twice");
}

#[test]
fn empty_lists_and_stray_commas_are_refused() {
    for empty in [r#""""#, r#"" , ""#, "[]"] {
        let (path, message, _) = invalid(&sanity(&format!(r#"{{"micro_benchmarks": {empty}}}"#)));
        assert_eq!(path, "aimaster.sanity_check.micro_benchmarks");
        assert_eq!(message, "the list of checks is empty");
    }
    let (path, message, _) = invalid(&sanity(
        r#"{"micro_benchmarks": "gemm_flops,,kernel_launch"}"#,
    ));
    assert_eq!(path, "aimaster.sanity_check.micro_benchmarks[1]");
    assert_eq!(message, "empty check name (a stray comma?)");
}

#[test]
fn an_array_of_checks_is_accepted_too() {
    let config = Config::from_json(&sanity(
        r#"{"micro_benchmarks": ["kernel_launch", "gemm_flops"]}"#,
    ))
    .unwrap();
    assert_eq!(
        config.sanity.unwrap().checks.as_slice(),
        [CheckName::KernelLaunch, CheckName::GemmFlops]
    );
}

#[test]
fn runtime_checks_other_than_c4d_are_refused() {
    let (path, message, hint) =
        invalid(r#"{"aimaster": {"runtime_check": {"micro_benchmarks": "gemm_flops"}}}"#);
    assert_eq!(path, "aimaster.runtime_check.micro_benchmarks");
    assert_eq!(
        message,
        "unknown runtime check `gemm_flops`; expected `c4d`"
    );
    assert!(hint.unwrap().contains("is a sanity check"));
    let (_, message, _) =
        invalid(r#"{"aimaster": {"runtime_check": {"micro_benchmarks": "c4d,xid"}}}"#);
    assert_eq!(
        message,
        "expected the single runtime check `c4d`, got `c4d,xid`"
    );
    let (path, message, _) = invalid(r#"{"aimaster": {"runtime_check": {"fail_action": "fail"}}}"#);
    assert_eq!(path, "aimaster.runtime_check.fail_action");
    assert_eq!(
        message,
        "unknown value `fail`; expected one of `retain`, `ignore`, `kill`"
    );
    let config =
        Config::from_json(r#"{"aimaster": {"runtime_check": {"fail_action": "kill"}}}"#).unwrap();
    assert_eq!(config.runtime.unwrap().fail_action, RuntimeFailAction::Kill);
}

#[test]
fn wrong_types_name_the_path() {
    let (path, message, _) = invalid(&sanity(r#"{"fail_action": 3}"#));
    assert_eq!(path, "aimaster.sanity_check.fail_action");
    assert_eq!(message, "invalid type: integer `3`, expected a string");
    let (path, _, _) = invalid(r#"{"aimaster": []}"#);
    assert_eq!(path, "aimaster");
    let (path, message, _) = invalid(r#"{"gpuvet": {"cpu_devices": -1}}"#);
    assert_eq!(path, "gpuvet.cpu_devices");
    assert_eq!(message, "invalid value: integer `-1`, expected u32");
}

#[test]
fn unknown_keys_are_refused_with_what_is_known() {
    let (path, message, _) = invalid(&sanity(r#"{"timeuot": 5}"#));
    assert_eq!(path, "aimaster.sanity_check.timeuot");
    assert_eq!(
        message,
        "unknown field `timeuot`, expected one of `fail_action`, `micro_benchmarks`, `timeout`"
    );
    let (path, _, _) = invalid(r#"{"aimastr": {}}"#);
    assert_eq!(path, "aimastr");
}

#[test]
fn gpuvet_settings_parse() {
    let config = Config::from_json(
        r#"{"gpuvet": {
            "backend": "sim",
            "tolerance_pct": 8,
            "baselines": {"gemm_flops": {"floor": 1000}, "kernel_launch": {"ceiling": 20}},
            "store": "/tmp/x.db",
            "report_to": " http://gpuvet-server:9470/ ",
            "rebuild_hook": "echo rebuild",
            "cpu_devices": 4,
            "gemm": {"dtype": "fp32", "size": 512},
            "collective_bytes": 1048576,
            "sim": {"seed": 3, "devices": 4, "noise_pct": 2, "speed": {"2": 0.9},
                    "faults": [{"check": "gemm_flops", "device": 1, "fault": "hang"}]}
        }}"#,
    )
    .unwrap();
    let s = config.settings;
    assert_eq!(s.backend, BackendChoice::Sim);
    assert_eq!(s.tolerance, Some(0.08));
    assert_eq!(s.baselines[&CheckName::GemmFlops], Limit::Floor(1000.0));
    assert_eq!(s.baselines[&CheckName::KernelLaunch], Limit::Ceiling(20.0));
    assert_eq!(s.rebuild_hook.unwrap(), ["/bin/sh", "-c", "echo rebuild"]);
    assert_eq!(s.report_to, ["http://gpuvet-server:9470"]);
    assert_eq!(s.report_ca, None);
    let tls = Config::from_json(
        r#"{"gpuvet": {"report_to": "https://gpuvet-server:9470/", "report_ca": "/etc/gpuvet/ca.pem"}}"#,
    )
    .unwrap()
    .settings;
    assert_eq!(tls.report_to, ["https://gpuvet-server:9470"]);
    assert_eq!(tls.report_ca, Some("/etc/gpuvet/ca.pem".into()));
    assert_eq!(tls.keep_days, None);
    let kept = Config::from_json(r#"{"gpuvet": {"keep_days": 30}}"#).unwrap();
    assert_eq!(kept.settings.keep_days, Some(30));
    assert_eq!(
        (s.cpu_devices, s.gemm_dtype, s.gemm_size),
        (Some(4), Dtype::Fp32, Some(512))
    );
    let sim = s.sim.unwrap();
    assert_eq!((sim.seed, sim.devices, sim.noise), (3, 4, 0.02));
    assert_eq!(sim.speed[&2], 0.9);
    assert_eq!(sim.faults, [(CheckName::GemmFlops, 1, SimFault::Hang)]);
}

#[test]
fn report_to_takes_one_address_or_a_list_of_replicas_in_order() {
    let settings = |json: &str| Config::from_json(json).unwrap().settings;
    let listed = settings(
        r#"{"gpuvet": {"report_to": [" https://gpuvet-b:9470/ ", "http://127.0.0.1:9470", "https://gpuvet-a:9470/fleet"]}}"#,
    );
    assert_eq!(
        listed.report_to,
        [
            "https://gpuvet-b:9470",
            "http://127.0.0.1:9470",
            "https://gpuvet-a:9470/fleet"
        ],
        "trimmed, without trailing slashes, in the order given"
    );
    assert_eq!(
        settings(r#"{"gpuvet": {"report_to": ["http://gpuvet:9470"]}}"#).report_to,
        settings(r#"{"gpuvet": {"report_to": "http://gpuvet:9470/"}}"#).report_to,
        "a list of one is one address"
    );
    assert!(settings(r#"{"gpuvet": {}}"#).report_to.is_empty());
    // Paths are compared exactly, hosts without case.
    assert_eq!(
        settings(r#"{"gpuvet": {"report_to": ["http://g:9470/a", "http://g:9470/A"]}}"#)
            .report_to
            .len(),
        2
    );
}

#[test]
fn an_empty_or_doubled_list_of_servers_is_refused_with_a_hint() {
    let (path, message, hint) = invalid(r#"{"gpuvet": {"report_to": []}}"#);
    assert_eq!(
        (path.as_str(), message.as_str()),
        ("gpuvet.report_to", "the list of servers is empty")
    );
    assert!(hint.unwrap().contains("leave the key out"));
    let (_, _, hint) = invalid(r#"{"gpuvet": {"report_to": ["http://g:9470", "http://G:9470"]}}"#);
    assert!(hint.unwrap().contains("list each replica once"));
    // What a flag of the same addresses is checked with names the flag.
    let error = server_addresses(&["http://g:9470".into(), "g:1".into()], "--to").unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config at `--to[1]`: `g:1` is not an `https://` or `http://` address"
    );
}

#[test]
fn bad_gpuvet_settings_name_their_path() {
    let cases = [
        (
            r#"{"backend": "cuda9"}"#,
            "gpuvet.backend",
            "unknown value `cuda9`; expected one of `auto`, `cuda`, `cpu`, `sim`",
        ),
        (
            r#"{"tolerance_pct": 0}"#,
            "gpuvet.tolerance_pct",
            "`0` is out of range; expected a percentage greater than 0 and below 100",
        ),
        (
            r#"{"baselines": {"gemm_flop": {"floor": 1}}}"#,
            "gpuvet.baselines.gemm_flop",
            "unknown check `gemm_flop`",
        ),
        (
            r#"{"baselines": {"kernel_launch": {"floor": 1}}}"#,
            "gpuvet.baselines.kernel_launch.floor",
            "`kernel_launch` measures launch_latency in us, where lower is better, so it takes a `ceiling`, not a `floor`",
        ),
        (
            r#"{"baselines": {"gemm_flops": {}}}"#,
            "gpuvet.baselines.gemm_flops",
            "expected `{\"floor\": <TFLOPS>}`",
        ),
        (
            r#"{"baselines": {"gemm_flops": {"floor": -1}}}"#,
            "gpuvet.baselines.gemm_flops.floor",
            "`-1` is not a usable limit; expected a positive number of TFLOPS",
        ),
        (
            r#"{"store": " "}"#,
            "gpuvet.store",
            "the store path is empty",
        ),
        (
            r#"{"sim": {"node_speed": {"local-1": 0}}}"#,
            "gpuvet.sim.node_speed.local-1",
            "`0` is out of range; expected a speed factor above 0 and at most 10",
        ),
        (
            r#"{"sim": {"node_speed": {" ": 0.5}}}"#,
            "gpuvet.sim.node_speed. ",
            "the node name is empty",
        ),
        (
            r#"{"report_to": "ftp://server:9470"}"#,
            "gpuvet.report_to",
            "`ftp://server:9470` is not an `https://` or `http://` address",
        ),
        (
            r#"{"report_to": "server:9470"}"#,
            "gpuvet.report_to",
            "`server:9470` is not an `https://` or `http://` address",
        ),
        (
            r#"{"report_to": "https://user:pw@server:9470"}"#,
            "gpuvet.report_to",
            "the address holds credentials, which would be written to logs and reports",
        ),
        (
            r#"{"keep_days": 0}"#,
            "gpuvet.keep_days",
            "`0` would delete everything as it arrives",
        ),
        (
            r#"{"report_to": "https://server", "report_ca": " "}"#,
            "gpuvet.report_ca",
            "the CA file's path is empty",
        ),
        (
            r#"{"report_to": "http://"}"#,
            "gpuvet.report_to",
            "`http://` has no host",
        ),
        (
            r#"{"report_to": "http://user:pw@server:9470"}"#,
            "gpuvet.report_to",
            "the address holds credentials, which would be written to logs and reports",
        ),
        (
            r#"{"report_to": "http://a:9470,http://b:9470"}"#,
            "gpuvet.report_to",
            "`http://a:9470,http://b:9470` holds a comma, which no host name does",
        ),
        (
            r#"{"report_to": []}"#,
            "gpuvet.report_to",
            "the list of servers is empty",
        ),
        (
            r#"{"report_to": ["https://a:9470", "ftp://b:9470"]}"#,
            "gpuvet.report_to[1]",
            "`ftp://b:9470` is not an `https://` or `http://` address",
        ),
        (
            r#"{"report_to": ["https://a:9470", "https://b:9470", "https://A:9470/"]}"#,
            "gpuvet.report_to[2]",
            "`https://A:9470/` is listed twice (also at `gpuvet.report_to[0]`)",
        ),
        (
            r#"{"report_to": ["https://a:9470/x", "https://b:9470", "https://b:9470/"]}"#,
            "gpuvet.report_to[2]",
            "`https://b:9470/` is listed twice (also at `gpuvet.report_to[1]`)",
        ),
        (
            r#"{"report_to": ["http://a:9470", 7]}"#,
            "gpuvet.report_to[1]",
            "expected a server's address or a list of addresses",
        ),
        (
            r#"{"report_to": {"url": "http://a:9470"}}"#,
            "gpuvet.report_to",
            "expected a server's address or a list of addresses",
        ),
        (
            r#"{"report_to": "http://server:9470/?x=1"}"#,
            "gpuvet.report_to",
            "`http://server:9470/?x=1` has a query, a fragment or a space; expected `https://HOST[:PORT][/PATH]`",
        ),
        (
            r#"{"rebuild_hook": []}"#,
            "gpuvet.rebuild_hook",
            "the rebuild hook needs a program as its first element",
        ),
        (
            r#"{"rebuild_hook": ""}"#,
            "gpuvet.rebuild_hook",
            "the rebuild hook command is empty",
        ),
        (
            r#"{"cpu_devices": 0}"#,
            "gpuvet.cpu_devices",
            "`0` is out of range; expected 1 to 1024",
        ),
        (
            r#"{"gemm": {"dtype": "fp64"}}"#,
            "gpuvet.gemm.dtype",
            "unknown value `fp64`; expected one of `auto`, `bf16`, `fp16`, `tf32`, `fp32`, `fp8`",
        ),
        (
            r#"{"gemm": {"size": 4}}"#,
            "gpuvet.gemm.size",
            "`4` is out of range; expected 16 to 65536",
        ),
        (
            r#"{"sim": {"devices": 2, "speed": {"5": 0.5}}}"#,
            "gpuvet.sim.speed.5",
            "`5` is not a device index; expected 0 to 1",
        ),
        (
            r#"{"sim": {"speed": {"0": 0}}}"#,
            "gpuvet.sim.speed.0",
            "`0` is out of range; expected a speed factor above 0 and at most 10",
        ),
        (
            r#"{"sim": {"faults": [{"check": "gemm_flops", "device": 0, "fault": "melt"}]}}"#,
            "gpuvet.sim.faults[0].fault",
            "unknown value `melt`; expected one of `hang`, `error`, `wrong_result`, `zero`",
        ),
    ];
    for (body, expected_path, expected_message) in cases {
        let (path, message, _) = invalid(&format!(r#"{{"gpuvet": {body}}}"#));
        assert_eq!(
            (path.as_str(), message.as_str()),
            (expected_path, expected_message),
            "{body}"
        );
    }
}

#[test]
fn watch_settings_parse_and_default() {
    assert_eq!(Config::default().settings.watch, WatchSettings::default());
    let config = Config::from_json(
        r#"{"gpuvet": {"watch": {"kmsg": "off", "nvml": false, "interval_ms": 250}}}"#,
    )
    .unwrap();
    let watch = config.settings.watch;
    assert_eq!(
        (watch.kmsg, watch.nvml, watch.interval),
        (None, false, Duration::from_millis(250))
    );
}

#[test]
fn bad_watch_settings_name_their_path() {
    let cases = [
        (
            r#"{"kmsg": ""}"#,
            "gpuvet.watch.kmsg",
            "the kernel log path is empty",
        ),
        (
            r#"{"interval_ms": 5}"#,
            "gpuvet.watch.interval_ms",
            "`5` is out of range; expected 100 to 60000",
        ),
        (
            r#"{"nccl_ras": "28028"}"#,
            "gpuvet.watch.nccl_ras",
            "`28028` is not usable; expected `auto`, `off` or `host:port`",
        ),
        (
            r#"{"metrics_addr": "localhost"}"#,
            "gpuvet.watch.metrics_addr",
            "`localhost` is not an address; expected IP:PORT",
        ),
    ];
    for (body, expected_path, expected_message) in cases {
        let (path, message, _) = invalid(&format!(r#"{{"gpuvet": {{"watch": {body}}}}}"#));
        assert_eq!(
            (path.as_str(), message.as_str()),
            (expected_path, expected_message),
            "{body}"
        );
    }
    let config =
        Config::from_json(r#"{"gpuvet": {"watch": {"metrics_addr": "127.0.0.1:9401"}}}"#).unwrap();
    assert_eq!(
        config.settings.watch.metrics_addr,
        Some("127.0.0.1:9401".parse().unwrap())
    );
}

#[test]
fn the_metrics_server_listens_nowhere_unless_configured() {
    // No default address: `/metrics` is served only where `metrics_addr` (or `gpuvet
    // watch --metrics-addr`) names one.
    let config = Config::from_json("{}").unwrap();
    assert_eq!(config.settings.watch.metrics_addr, None);
}

#[test]
fn pairing_and_interfaces_are_validated() {
    let config =
        Config::from_json(r#"{"gpuvet": {"pairing": "full", "interfaces": ["eth0", "ib0"]}}"#)
            .unwrap();
    assert_eq!(config.settings.pairing, PairingMode::Full);
    assert_eq!(config.settings.interfaces, ["eth0", "ib0"]);
    assert_eq!(Config::default().settings.pairing, PairingMode::Adaptive);
    let cases = [
        (
            r#"{"pairing": "some"}"#,
            "gpuvet.pairing",
            "unknown value `some`",
        ),
        (
            r#"{"interfaces": ["eth0", "eth0"]}"#,
            "gpuvet.interfaces[1]",
            "`eth0` is listed twice",
        ),
        (
            r#"{"interfaces": ["a name"]}"#,
            "gpuvet.interfaces[0]",
            "`a name` is not a network interface name",
        ),
    ];
    assert_invalid_settings(&cases);
}

#[test]
fn expected_inventory_is_read_and_validated() {
    let config = Config::from_json(
        r#"{"gpuvet": {"expected_inventory": {"gpu_count": 8, "model": "NVIDIA H200",
            "driver_version": "580.65.06"}}}"#,
    )
    .unwrap();
    let expected = &config.settings.expected_inventory;
    assert_eq!(expected.gpu_count, Some(8));
    assert_eq!(expected.model.as_deref(), Some("NVIDIA H200"));
    assert_eq!(expected.cuda_version, None);
    assert!(Config::default().settings.expected_inventory.is_empty());
    let cases = [
        (
            r#"{"expected_inventory": {"gpu_count": 0}}"#,
            "gpuvet.expected_inventory.gpu_count",
            "`0` is out of range",
        ),
        (
            r#"{"expected_inventory": {"driver_version": " "}}"#,
            "gpuvet.expected_inventory.driver_version",
            "the expected value is empty",
        ),
        (
            r#"{"expected_inventory": {"gpus": 8}}"#,
            "gpuvet.expected_inventory.gpus",
            "unknown field `gpus`",
        ),
    ];
    assert_invalid_settings(&cases);
}

/// Each `gpuvet` section is refused at its path with a message that starts as given.
fn assert_invalid_settings(cases: &[(&str, &str, &str)]) {
    for (body, expected_path, expected_message) in cases {
        let (path, message, _) = invalid(&format!(r#"{{"gpuvet": {body}}}"#));
        assert_eq!(path, *expected_path, "{body}");
        assert!(message.starts_with(expected_message), "{body}: {message}");
    }
}

#[test]
fn the_size_bound_is_checked_before_parsing() {
    // Padded with whitespace to exactly the bound: parsed. One byte more: refused,
    // even though it would parse.
    let base = DEFAULT_CONFIG_JSON;
    let at_limit = format!("{base}{}", " ".repeat(MAX_CONFIG_BYTES - base.len()));
    assert_eq!(at_limit.len(), MAX_CONFIG_BYTES);
    assert!(Config::from_json(&at_limit).is_ok());
    let over = format!("{at_limit} ");
    let error = Config::from_json(&over).unwrap_err();
    assert_eq!(
        error,
        ConfigError::TooLarge {
            limit: MAX_CONFIG_BYTES
        }
    );
    assert_eq!(
        error.to_string(),
        "the config has more than `1048576` bytes"
    );
    assert!(error.hint().is_some());
}

#[test]
fn a_node_speed_slows_every_device_of_that_node_only() {
    let config = Config::from_json(
        r#"{"gpuvet": {"sim": {"devices": 3, "speed": {"1": 0.5}, "node_speed": {"n2": 0.8}}}}"#,
    )
    .unwrap();
    let sim = config.settings.sim.unwrap();
    let slow = sim.clone().for_node("n2");
    assert_eq!(
        slow.speed.into_iter().collect::<Vec<_>>(),
        [(0, 0.8), (1, 0.4), (2, 0.8)]
    );
    let other = sim.clone().for_node("n1");
    assert_eq!(other.speed, sim.speed);
}

#[test]
fn one_nodes_device_speed_and_device_count_apply_to_that_node_only() {
    let config = Config::from_json(
        r#"{"gpuvet": {"sim": {"devices": 4, "node_speed": {"n2": 0.5},
            "node_device_speed": {"n2": {"1": 0.9}, "n3": {"7": 0.5}},
            "node_devices": {"n3": 2}}}}"#,
    )
    .unwrap();
    let sim = config.settings.sim.unwrap();
    let n2 = sim.clone().for_node("n2");
    assert_eq!(
        n2.speed.into_iter().collect::<Vec<_>>(),
        [(0, 0.5), (1, 0.45), (2, 0.5), (3, 0.5)]
    );
    // A device beyond the node's count is ignored, not invented.
    let n3 = sim.clone().for_node("n3");
    assert_eq!((n3.devices, n3.speed.len()), (2, 0));
    assert_eq!(sim.clone().for_node("n0").devices, 4);
    for (json, path) in [
        (
            r#"{"node_device_speed": {"n": {"x": 0.5}}}"#,
            "gpuvet.sim.node_device_speed.n.x",
        ),
        (
            r#"{"node_device_speed": {"n": {"0": 0}}}"#,
            "gpuvet.sim.node_device_speed.n.0",
        ),
        (r#"{"node_devices": {"n": 0}}"#, "gpuvet.sim.node_devices.n"),
        (r#"{"node_devices": {" ": 2}}"#, "gpuvet.sim.node_devices. "),
    ] {
        let error = Config::from_json(&format!(r#"{{"gpuvet": {{"sim": {json}}}}}"#)).unwrap_err();
        assert!(error.to_string().contains(path), "{json}: {error}");
    }
}

#[test]
fn links_rails_and_node_faults_are_read_for_a_group_in_one_process() {
    let config = Config::from_json(
        r#"{"gpuvet": {"sim": {
            "link_speed": {"n2<->n1": 0.5},
            "node_rail_speed": {"n3": {"1": 0.4}},
            "node_faults": {"n4": {"check": "all_reduce_2", "fault": "hang"},
                            "n5": {"check": "gemm_flops", "fault": "crash"}}}}}"#,
    )
    .unwrap();
    let sim = config.settings.sim.unwrap();
    // A link is kept with its ends in order, however it was written.
    assert_eq!(
        sim.link_speed.into_iter().collect::<Vec<_>>(),
        [(("n1".to_owned(), "n2".to_owned()), 0.5)]
    );
    assert_eq!(sim.node_rail_speed["n3"][&1], 0.4);
    assert_eq!(
        sim.node_faults["n4"],
        NodeFault {
            check: CheckName::AllReduce2,
            fault: NodeFaultKind::Hang
        }
    );
    assert_eq!(sim.node_faults["n5"].fault, NodeFaultKind::Crash);
    assert!(SimScript::default().group_only_keys().is_empty());

    for (json, path, says) in [
        (
            r#"{"link_speed": {"n1": 0.5}}"#,
            "gpuvet.sim.link_speed.n1",
            "NODE<->NODE",
        ),
        (
            r#"{"link_speed": {"n1<->n1": 0.5}}"#,
            "gpuvet.sim.link_speed.n1<->n1",
            "NODE<->NODE",
        ),
        (
            r#"{"link_speed": {"a<->b": 0.5, "b<->a": 0.4}}"#,
            "gpuvet.sim.link_speed",
            "given twice",
        ),
        (
            r#"{"link_speed": {"a<->b": 0}}"#,
            "gpuvet.sim.link_speed.a<->b",
            "speed factor",
        ),
        (
            r#"{"node_rail_speed": {"n": {"x": 0.5}}}"#,
            "gpuvet.sim.node_rail_speed.n.x",
            "rail index",
        ),
        (
            r#"{"node_faults": {"n": {"check": "nope", "fault": "hang"}}}"#,
            "gpuvet.sim.node_faults.n.check",
            "unknown check",
        ),
        (
            r#"{"node_faults": {"n": {"check": "gemm_flops", "fault": "melt"}}}"#,
            "gpuvet.sim.node_faults.n.fault",
            "crash",
        ),
    ] {
        let error = Config::from_json(&format!(r#"{{"gpuvet": {{"sim": {json}}}}}"#)).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(path) && text.contains(says),
            "{json}: {error}"
        );
    }
}

#[test]
fn kubernetes_settings_parse_and_default() {
    let defaults = Config::default().settings.kubernetes;
    assert!(defaults.enabled);
    assert_eq!(defaults.quarantine.max_share, 0.5);
    assert_eq!(defaults.quarantine.window, Duration::from_secs(300));
    let config = Config::from_json(
        r#"{"gpuvet": {"kubernetes": {"enabled": "off",
            "quarantine": {"max_share_pct": 25, "window_minutes": 10}}}}"#,
    )
    .unwrap();
    let k8s = config.settings.kubernetes;
    assert!(!k8s.enabled);
    assert_eq!(k8s.quarantine.max_share, 0.25);
    assert_eq!(k8s.quarantine.window, Duration::from_secs(600));
    let config = Config::from_json(r#"{"gpuvet": {"kubernetes": {"enabled": "auto"}}}"#).unwrap();
    assert_eq!(config.settings.kubernetes, KubernetesSettings::default());
}

#[test]
fn bad_kubernetes_settings_name_the_field() {
    let (path, message, hint) = invalid(r#"{"gpuvet": {"kubernetes": {"enabled": "of"}}}"#);
    assert_eq!(path, "gpuvet.kubernetes.enabled");
    assert!(
        message.contains("`of`") && message.contains("`auto`, `off`"),
        "{message}"
    );
    assert_eq!(hint.as_deref(), Some("did you mean `off`?"));
    for bad in ["0", "-5", "100.5"] {
        let (path, message, _) = invalid(&format!(
            r#"{{"gpuvet": {{"kubernetes": {{"quarantine": {{"max_share_pct": {bad}}}}}}}}}"#
        ));
        assert_eq!(path, "gpuvet.kubernetes.quarantine.max_share_pct", "{bad}");
        assert!(message.contains("out of range"), "{message}");
    }
    for bad in ["0", "0.05", "1441"] {
        let (path, message, _) = invalid(&format!(
            r#"{{"gpuvet": {{"kubernetes": {{"quarantine": {{"window_minutes": {bad}}}}}}}}}"#
        ));
        assert_eq!(path, "gpuvet.kubernetes.quarantine.window_minutes", "{bad}");
        assert!(message.contains("0.1 to 1440"), "{message}");
    }
    let (path, message, _) =
        invalid(r#"{"gpuvet": {"kubernetes": {"quarantine": {"share": 10}}}}"#);
    assert_eq!(path, "gpuvet.kubernetes.quarantine.share");
    assert!(
        message.contains("expected `max_share_pct` or `window_minutes`"),
        "{message}"
    );
}

#[test]
fn a_reader_is_read_only_up_to_the_bound_and_must_hold_text() {
    let base = DEFAULT_CONFIG_JSON;
    let at_limit = format!("{base}{}", " ".repeat(MAX_CONFIG_BYTES - base.len()));
    assert!(Config::from_reader(at_limit.as_bytes()).is_ok());
    // An endless reader is refused after one byte past the bound.
    let endless = std::io::repeat(b' ');
    assert_eq!(
        Config::from_reader(endless).unwrap_err(),
        ConfigError::TooLarge {
            limit: MAX_CONFIG_BYTES
        }
    );
    let error = Config::from_reader(&b"{\"gpuvet\": \"\xff\"}"[..]).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Unreadable { message } if message.starts_with("it is not UTF-8 text")),
        "{error:?}"
    );
    struct Broken;
    impl std::io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("the disk went away"))
        }
    }
    assert_eq!(
        Config::from_reader(Broken).unwrap_err().to_string(),
        "the config cannot be read: the disk went away"
    );
}

#[test]
fn history_settings_parse_and_default() {
    use crate::history::HistoryPolicy;
    assert_eq!(Config::default().settings.history, HistoryPolicy::default());
    let config = Config::from_json(
        r#"{"gpuvet": {"history": {"runs": 30, "min_runs": 5, "tolerance_pct": 10,
            "fail_on_degraded": true}}}"#,
    )
    .unwrap();
    let history = config.settings.history;
    assert_eq!((history.runs, history.min_runs), (30, 5));
    assert_eq!(history.tolerance, 0.1);
    assert!(history.fail_on_degraded && history.enabled);
    // A short record lowers the default least number of runs with it.
    let config = Config::from_json(r#"{"gpuvet": {"history": {"runs": 4}}}"#).unwrap();
    assert_eq!(config.settings.history.min_runs, 4);
    let config = Config::from_json(r#"{"gpuvet": {"history": {"enabled": false}}}"#).unwrap();
    assert!(!config.settings.history.enabled);
}

#[test]
fn bad_history_settings_name_the_field() {
    for (bad, field, words) in [
        (
            r#"{"runs": 2}"#,
            "gpuvet.history.runs",
            "expected 3 to 1000",
        ),
        (
            r#"{"runs": 1001}"#,
            "gpuvet.history.runs",
            "expected 3 to 1000",
        ),
        (
            r#"{"runs": 10, "min_runs": 11}"#,
            "gpuvet.history.min_runs",
            "expected 3 to 10",
        ),
        (
            r#"{"tolerance_pct": 0}"#,
            "gpuvet.history.tolerance_pct",
            "out of range",
        ),
        (
            r#"{"tolerance_pct": 100}"#,
            "gpuvet.history.tolerance_pct",
            "out of range",
        ),
        (r#"{"window": 3}"#, "gpuvet.history.window", "unknown field"),
    ] {
        let (path, message, _) = invalid(&format!(r#"{{"gpuvet": {{"history": {bad}}}}}"#));
        assert_eq!(path, field, "{bad}");
        assert!(message.contains(words), "{bad}: {message}");
    }
    let (_, _, hint) = invalid(r#"{"gpuvet": {"history": {"runs": 10, "min_runs": 11}}}"#);
    assert!(hint.unwrap().contains("`min_runs`"));
}

#[test]
fn baselines_come_from_the_table_or_the_server_of_report_to() {
    assert_eq!(
        Config::default().settings.baseline_from,
        BaselineFrom::Builtin
    );
    let config = Config::from_json(
        r#"{"gpuvet": {"baseline_from": "server", "report_to": "http://127.0.0.1:9470"}}"#,
    )
    .unwrap();
    assert_eq!(config.settings.baseline_from, BaselineFrom::Server);
    let (path, message, hint) = invalid(r#"{"gpuvet": {"baseline_from": "server"}}"#);
    assert_eq!(path, "gpuvet.baseline_from");
    assert!(message.contains("`server` needs a server"), "{message}");
    assert!(hint.unwrap().contains("`gpuvet.report_to`"));
    let (path, message, _) = invalid(r#"{"gpuvet": {"baseline_from": "fleet"}}"#);
    assert_eq!(path, "gpuvet.baseline_from");
    assert!(message.contains("`builtin`, `server`"), "{message}");
}

#[test]
fn repeat_offender_settings_parse_default_and_are_bounded() {
    use crate::offenders::RepeatOffenderPolicy;
    assert_eq!(
        Config::default().settings.repeat_offender,
        RepeatOffenderPolicy {
            failures: 3,
            of_last: 5
        }
    );
    let config =
        Config::from_json(r#"{"gpuvet": {"repeat_offender": {"failures": 2, "of_last": 10}}}"#)
            .unwrap();
    assert_eq!(
        config.settings.repeat_offender,
        RepeatOffenderPolicy {
            failures: 2,
            of_last: 10
        }
    );
    // A shorter memory than the default K keeps K within it.
    let config = Config::from_json(r#"{"gpuvet": {"repeat_offender": {"of_last": 2}}}"#).unwrap();
    assert_eq!(config.settings.repeat_offender.failures, 2);
    for (bad, path, words) in [
        (
            r#"{"of_last": 0}"#,
            "gpuvet.repeat_offender.of_last",
            "1 to 100",
        ),
        (
            r#"{"of_last": 101}"#,
            "gpuvet.repeat_offender.of_last",
            "1 to 100",
        ),
        (
            r#"{"failures": 0}"#,
            "gpuvet.repeat_offender.failures",
            "1 to `of_last` (5)",
        ),
        (
            r#"{"failures": 6, "of_last": 5}"#,
            "gpuvet.repeat_offender.failures",
            "`6` is out of range",
        ),
    ] {
        let (at, message, _) = invalid(&format!(r#"{{"gpuvet": {{"repeat_offender": {bad}}}}}"#));
        assert_eq!(at, path, "{bad}");
        assert!(message.contains(words), "{bad}: {message}");
    }
}

#[test]
fn slurm_settings_parse_like_kubernetes_and_name_their_own_field() {
    assert_eq!(Config::default().settings.slurm, SlurmSettings::default());
    assert!(SlurmSettings::default().enabled);
    let config = Config::from_json(
        r#"{"gpuvet": {"slurm": {"enabled": "off",
            "quarantine": {"max_share_pct": 10, "window_minutes": 60}}}}"#,
    )
    .unwrap();
    let slurm = config.settings.slurm;
    assert!(!slurm.enabled);
    assert_eq!(slurm.quarantine.max_share, 0.1);
    assert_eq!(slurm.quarantine.window, Duration::from_secs(3600));
    // Each section is its own: Kubernetes keeps its defaults.
    assert_eq!(config.settings.kubernetes, KubernetesSettings::default());
    let (path, _, hint) = invalid(r#"{"gpuvet": {"slurm": {"enabled": "of"}}}"#);
    assert_eq!(path, "gpuvet.slurm.enabled");
    assert_eq!(hint.as_deref(), Some("did you mean `off`?"));
    let (path, message, _) =
        invalid(r#"{"gpuvet": {"slurm": {"quarantine": {"max_share_pct": 0}}}}"#);
    assert_eq!(path, "gpuvet.slurm.quarantine.max_share_pct");
    assert!(message.contains("out of range"), "{message}");
    let (path, _, _) = invalid(r#"{"gpuvet": {"slurm": {"quarantine": {"window_minutes": 0}}}}"#);
    assert_eq!(path, "gpuvet.slurm.quarantine.window_minutes");
}
