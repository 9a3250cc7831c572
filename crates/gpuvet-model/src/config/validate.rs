//! Raw JSON shapes to the validated [`Config`]: every range, name and combination is
//! checked here, and every error names the JSON path and what would be accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::raw::*;
use super::types::*;
use super::*;
use crate::analysis::Limit;
use crate::catalog::{CheckName, Direction, RUNTIME_CHECK_C4D, closest};
use crate::history::HistoryPolicy;
use crate::inventory::ExpectedInventory;
use crate::offenders::{MAX_OF_LAST, RepeatOffenderPolicy};
use crate::pairing::PairingMode;

pub(super) fn validate(raw: RawFile) -> Result<Config, ConfigError> {
    let (sanity, runtime) = match raw.aimaster {
        None => (Some(default_sanity()), None),
        Some(aimaster) => {
            let sanity = aimaster.sanity_check.map(validate_sanity).transpose()?;
            let runtime = aimaster.runtime_check.map(validate_runtime).transpose()?;
            (sanity, runtime)
        }
    };
    let settings = validate_settings(raw.gpuvet)?;
    Ok(Config {
        sanity,
        runtime,
        settings,
    })
}

fn validate_sanity(raw: RawSanity) -> Result<SanityConfig, ConfigError> {
    const PATH: &str = "aimaster.sanity_check";
    let fail_action = match raw.fail_action.as_deref() {
        None => FailAction::Fail,
        Some(text) => parse_fail_action(text, &format!("{PATH}.fail_action"))?,
    };
    let checks = match raw.micro_benchmarks {
        None => CheckList(DEFAULT_CHECKS.to_vec()),
        Some(list) => parse_checks(list, &format!("{PATH}.micro_benchmarks"))?,
    };
    let timeout = Timeout::from_minutes(
        raw.timeout.unwrap_or(DEFAULT_TIMEOUT_MINUTES),
        &format!("{PATH}.timeout"),
    )?;
    Ok(SanityConfig {
        checks,
        fail_action,
        timeout,
    })
}

fn parse_fail_action(text: &str, path: &str) -> Result<FailAction, ConfigError> {
    const ACCEPTED: [(&str, FailAction); 4] = [
        ("fail", FailAction::Fail),
        ("retain", FailAction::Retain),
        ("ignore", FailAction::Retain),
        ("rebuild", FailAction::Rebuild),
    ];
    if let Some((_, action)) = ACCEPTED.iter().find(|(name, _)| *name == text) {
        return Ok(*action);
    }
    Err(unknown_value(
        path,
        text,
        &["fail", "retain", "ignore", "rebuild"],
    ))
}

fn unknown_value(path: &str, value: &str, accepted: &[&'static str]) -> ConfigError {
    let list = accepted
        .iter()
        .map(|a| format!("`{a}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let error = ConfigError::invalid(
        path,
        format!("unknown value `{value}`; expected one of {list}"),
    );
    match closest(value, accepted.iter().map(|a| (*a, *a))) {
        Some(suggestion) => error.with_hint(format!("did you mean `{suggestion}`?")),
        None => error,
    }
}

fn list_items(list: RawList) -> Vec<String> {
    match list {
        RawList::Text(text) => text.split(',').map(|item| item.trim().to_owned()).collect(),
        RawList::Items(items) => items
            .into_iter()
            .map(|item| item.trim().to_owned())
            .collect(),
    }
}

pub(super) fn parse_checks(list: RawList, path: &str) -> Result<CheckList, ConfigError> {
    let items = list_items(list);
    if items.iter().all(String::is_empty) {
        return Err(ConfigError::invalid(path, "the list of checks is empty")
            .with_hint("name at least one check, e.g. `gemm_flops,all_reduce_1,all_reduce_2`, or leave the key out for PAI's default set"));
    }
    let mut checks = Vec::with_capacity(items.len());
    let mut seen = BTreeSet::new();
    for (position, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{position}]");
        if item.is_empty() {
            return Err(ConfigError::invalid(
                item_path,
                "empty check name (a stray comma?)",
            ));
        }
        let name: CheckName = item.parse().map_err(|err: crate::catalog::UnknownCheck| {
            let error = ConfigError::invalid(&item_path, format!("unknown check `{}`", err.name));
            match err.suggestion {
                Some(suggestion) => error.with_hint(format!("did you mean `{suggestion}`?")),
                None => error.with_hint(format!(
                    "the checks are: {}",
                    CheckName::ALL
                        .iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        })?;
        if !seen.insert(name) {
            return Err(
                ConfigError::invalid(item_path, format!("check `{name}` is listed twice"))
                    .with_hint("each check runs once; remove the repeat"),
            );
        }
        checks.push(name);
    }
    Ok(CheckList(checks))
}

fn validate_runtime(raw: RawRuntime) -> Result<RuntimeConfig, ConfigError> {
    const PATH: &str = "aimaster.runtime_check";
    let fail_action = match raw.fail_action.as_deref() {
        None | Some("retain") | Some("ignore") => RuntimeFailAction::Retain,
        Some("kill") => RuntimeFailAction::Kill,
        Some(text) => {
            return Err(unknown_value(&format!("{PATH}.fail_action"), text, &["retain", "ignore", "kill"])
                .with_hint("PAI's runtime check only records events (`retain`); `kill` also stops the app on a fatal finding"));
        }
    };
    let path = format!("{PATH}.micro_benchmarks");
    let items = raw
        .micro_benchmarks
        .map(list_items)
        .unwrap_or_else(|| vec![RUNTIME_CHECK_C4D.to_owned()]);
    match items.as_slice() {
        [only] if only.eq_ignore_ascii_case(RUNTIME_CHECK_C4D) => Ok(RuntimeConfig {
            check: RUNTIME_CHECK_C4D,
            fail_action,
        }),
        [] => Err(
            ConfigError::invalid(path, "the list of runtime checks is empty")
                .with_hint("use `c4d`"),
        ),
        [only] => {
            let hint = if CheckName::ALL.iter().any(|n| n.as_str() == only) {
                format!(
                    "`{only}` is a sanity check; put it in `aimaster.sanity_check.micro_benchmarks`"
                )
            } else {
                "the only runtime check is `c4d`".to_owned()
            };
            Err(ConfigError::invalid(
                path,
                format!("unknown runtime check `{only}`; expected `c4d`"),
            )
            .with_hint(hint))
        }
        _ => Err(ConfigError::invalid(
            path,
            format!(
                "expected the single runtime check `c4d`, got `{}`",
                items.join(",")
            ),
        )),
    }
}

/// The config key that names the servers pushed to.
const REPORT_TO: &str = "gpuvet.report_to";

/// `gpuvet.report_to`: one server's address, or a list of replicas' (see
/// [`server_addresses`]).
fn validate_report_to(raw: serde_json::Value) -> Result<Vec<String>, ConfigError> {
    let not_an_address = |path: &str| {
        ConfigError::invalid(path, "expected a server's address or a list of addresses")
            .with_hint("e.g. `\"https://gpuvet:9470\"`, or `[\"https://gpuvet-a:9470\", \"https://gpuvet-b:9470\"]` for replicas")
    };
    match raw {
        // One address, never split: a URL may hold a comma.
        serde_json::Value::String(text) => Ok(vec![server_address(&text, REPORT_TO)?]),
        serde_json::Value::Array(items) => {
            let items = items
                .into_iter()
                .enumerate()
                .map(|(index, item)| match item {
                    serde_json::Value::String(text) => Ok(text),
                    _ => Err(not_an_address(&format!("{REPORT_TO}[{index}]"))),
                })
                .collect::<Result<Vec<String>, ConfigError>>()?;
            server_addresses(&items, REPORT_TO)
        }
        _ => Err(not_an_address(REPORT_TO)),
    }
}

/// The addresses of a server's replicas, as `field` (`gpuvet.report_to`, or a flag)
/// lists them: each as one address is checked, at least one, none twice. The order is
/// kept: it is the order a sender tries them in.
pub fn server_addresses(items: &[String], field: &str) -> Result<Vec<String>, ConfigError> {
    if items.is_empty() {
        return Err(ConfigError::invalid(field, "the list of servers is empty").with_hint(
            "list at least one server, e.g. `[\"https://gpuvet-a:9470\", \"https://gpuvet-b:9470\"]`, or leave the key out to push nowhere",
        ));
    }
    let mut addresses: Vec<String> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = format!("{field}[{index}]");
        let address = server_address(item, &path)?;
        if let Some(first) = addresses.iter().position(|a| same_server(a, &address)) {
            return Err(ConfigError::invalid(
                &path,
                format!("`{item}` is listed twice (also at `{field}[{first}]`)"),
            )
            .with_hint("list each replica once: a sender moves to the next one when one fails"));
        }
        addresses.push(address);
    }
    Ok(addresses)
}

/// Whether two checked addresses name one server: scheme and host compared without
/// case, as URLs do, the path exactly.
fn same_server(a: &str, b: &str) -> bool {
    fn split(address: &str) -> (&str, &str) {
        let after_scheme = address.find("://").map_or(0, |i| i + 3);
        let path_at = address[after_scheme..]
            .find('/')
            .map_or(address.len(), |i| after_scheme + i);
        address.split_at(path_at)
    }
    let ((a_origin, a_path), (b_origin, b_path)) = (split(a), split(b));
    a_origin.eq_ignore_ascii_case(b_origin) && a_path == b_path
}

/// One server's base address at `field`, as `http[s]://HOST[:PORT][/PATH]`, without a
/// trailing slash.
fn server_address(text: &str, field: &str) -> Result<String, ConfigError> {
    let trimmed = text.trim();
    let Some((scheme, rest)) = ["https://", "http://"].into_iter().find_map(|scheme| {
        trimmed
            .strip_prefix(scheme)
            .map(|rest| (scheme, rest.trim_end_matches('/')))
    }) else {
        return Err(ConfigError::invalid(
            field,
            format!("`{text}` is not an `https://` or `http://` address"),
        )
        .with_hint("give the server's base address, e.g. `https://gpuvet-server:9470`"));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(ConfigError::invalid(field, format!("`{text}` has no host")));
    }
    if authority.contains(',') {
        return Err(ConfigError::invalid(
            field,
            format!("`{text}` holds a comma, which no host name does"),
        )
        .with_hint(
            "list several replicas as a JSON list: `[\"https://gpuvet-a:9470\", \"https://gpuvet-b:9470\"]`",
        ));
    }
    if authority.contains('@') {
        return Err(ConfigError::invalid(
            field,
            "the address holds credentials, which would be written to logs and reports",
        )
        .with_hint(format!(
            "put the token in the `{}` environment variable instead",
            crate::env_vars::REPORT_TOKEN
        )));
    }
    if rest.contains(['?', '#', ' ']) {
        return Err(ConfigError::invalid(
            field,
            format!(
                "`{text}` has a query, a fragment or a space; expected `https://HOST[:PORT][/PATH]`"
            ),
        ));
    }
    Ok(format!("{scheme}{rest}"))
}

fn validate_settings(raw: Option<RawSettings>) -> Result<Settings, ConfigError> {
    let raw = raw.unwrap_or(RawSettings {
        backend: None,
        tolerance_pct: None,
        baselines: None,
        store: None,
        report_to: None,
        report_ca: None,
        keep_days: None,
        rebuild_hook: None,
        cpu_devices: None,
        gemm: None,
        collective_bytes: None,
        pairing: None,
        interfaces: None,
        expected_inventory: None,
        sim: None,
        watch: None,
        kubernetes: None,
        history: None,
        baseline_from: None,
        repeat_offender: None,
        slurm: None,
    });
    let backend = match raw.backend.as_deref() {
        None => BackendChoice::Auto,
        Some(text) => BackendChoice::parse(text)
            .ok_or_else(|| unknown_value("gpuvet.backend", text, &BackendChoice::NAMES))?,
    };
    if let Some(tolerance_pct) = raw.tolerance_pct
        && !(tolerance_pct.is_finite() && tolerance_pct > 0.0 && tolerance_pct < 100.0)
    {
        return Err(ConfigError::invalid(
            "gpuvet.tolerance_pct",
            format!(
                "`{tolerance_pct}` is out of range; expected a percentage greater than 0 and below 100"
            ),
        ));
    }
    let mut baselines = BTreeMap::new();
    for (name, limit) in raw.baselines.unwrap_or_default() {
        let path = format!("gpuvet.baselines.{name}");
        let check: CheckName = name.parse().map_err(|err: crate::catalog::UnknownCheck| {
            let error = ConfigError::invalid(&path, format!("unknown check `{name}`"));
            match err.suggestion {
                Some(s) => error.with_hint(format!("did you mean `{s}`?")),
                None => error,
            }
        })?;
        baselines.insert(check, validate_limit(check, limit, &path)?);
    }
    let store = match raw.store {
        Some(path) if path.trim().is_empty() => {
            return Err(ConfigError::invalid(
                "gpuvet.store",
                "the store path is empty",
            ));
        }
        other => other,
    };
    let report_to = raw
        .report_to
        .map(validate_report_to)
        .transpose()?
        .unwrap_or_default();
    if raw.keep_days == Some(0) {
        return Err(ConfigError::invalid(
            "gpuvet.keep_days",
            "`0` would delete everything as it arrives",
        )
        .with_hint("give at least 1 day, or leave the key out to keep everything"));
    }
    let report_ca = match raw.report_ca {
        Some(path) if path.trim().is_empty() => {
            return Err(ConfigError::invalid(
                "gpuvet.report_ca",
                "the CA file's path is empty",
            )
            .with_hint("give the PEM file of the CA that signed the server's certificate, or leave the key out to trust the system's CAs"));
        }
        other => other.map(std::path::PathBuf::from),
    };
    let rebuild_hook = match raw.rebuild_hook {
        None => None,
        Some(RawCommand::Shell(line)) if line.trim().is_empty() => {
            return Err(ConfigError::invalid(
                "gpuvet.rebuild_hook",
                "the rebuild hook command is empty",
            ));
        }
        Some(RawCommand::Shell(line)) => Some(vec!["/bin/sh".to_owned(), "-c".to_owned(), line]),
        Some(RawCommand::Argv(argv))
            if argv.first().is_none_or(|program| program.trim().is_empty()) =>
        {
            return Err(ConfigError::invalid("gpuvet.rebuild_hook", "the rebuild hook needs a program as its first element")
                .with_hint("give a shell command line as a string, or an argument list like [\"kubectl\", \"delete\", \"pod\", \"...\"]"));
        }
        Some(RawCommand::Argv(argv)) => Some(argv),
    };
    let cpu_devices = raw
        .cpu_devices
        .map(|n| in_range("gpuvet.cpu_devices", n, 1, 1024))
        .transpose()?;
    let (gemm_dtype, gemm_size) = match raw.gemm {
        None => (Dtype::Auto, None),
        Some(gemm) => {
            let dtype = match gemm.dtype.as_deref() {
                None => Dtype::Auto,
                Some(text) => Dtype::parse(text)
                    .ok_or_else(|| unknown_value("gpuvet.gemm.dtype", text, &Dtype::NAMES))?,
            };
            let size = gemm
                .size
                .map(|n| in_range("gpuvet.gemm.size", n, 16, 65536))
                .transpose()?;
            (dtype, size)
        }
    };
    let collective_bytes = raw
        .collective_bytes
        .map(|n| in_range("gpuvet.collective_bytes", n, 1024, 16 << 30))
        .transpose()?;
    let pairing = match raw.pairing.as_deref() {
        None | Some("adaptive") => PairingMode::Adaptive,
        Some("full") => PairingMode::Full,
        Some(text) => return Err(unknown_value("gpuvet.pairing", text, &["adaptive", "full"])),
    };
    let interfaces = validate_interfaces(raw.interfaces.unwrap_or_default())?;
    let expected_inventory = raw
        .expected_inventory
        .map(validate_expected_inventory)
        .transpose()?
        .unwrap_or_default();
    let sim = raw.sim.map(validate_sim).transpose()?;
    let watch = raw
        .watch
        .map(validate_watch)
        .transpose()?
        .unwrap_or_default();
    let kubernetes = raw
        .kubernetes
        .map(validate_kubernetes)
        .transpose()?
        .unwrap_or_default();
    let history = raw
        .history
        .map(validate_history)
        .transpose()?
        .unwrap_or_default();
    let baseline_from = match raw.baseline_from.as_deref() {
        None | Some("builtin") => BaselineFrom::Builtin,
        Some("server") if report_to.is_empty() => {
            return Err(ConfigError::invalid(
                "gpuvet.baseline_from",
                "`server` needs a server to fetch the fleet's baselines from",
            )
            .with_hint("set `gpuvet.report_to` to the fleet server, or leave `baseline_from` out to use the built-in table"));
        }
        Some("server") => BaselineFrom::Server,
        Some(text) => {
            return Err(unknown_value(
                "gpuvet.baseline_from",
                text,
                &["builtin", "server"],
            ));
        }
    };
    let repeat_offender = raw
        .repeat_offender
        .map(validate_repeat_offender)
        .transpose()?
        .unwrap_or_default();
    let slurm = raw
        .slurm
        .map(validate_slurm)
        .transpose()?
        .unwrap_or_default();
    Ok(Settings {
        backend,
        tolerance: raw.tolerance_pct.map(|pct| pct / 100.0),
        baselines,
        store,
        report_to,
        report_ca,
        keep_days: raw.keep_days,
        rebuild_hook,
        cpu_devices,
        gemm_dtype,
        gemm_size,
        collective_bytes,
        pairing,
        interfaces,
        expected_inventory,
        sim,
        watch,
        kubernetes,
        repeat_offender,
        history,
        baseline_from,
        slurm,
    })
}

/// `gpuvet.history`: a record of 3 to 1,000 runs, judging from `min_runs` (3 up to
/// `runs`) on, with a tolerance above 0 and below 100 %.
fn validate_history(raw: RawHistory) -> Result<HistoryPolicy, ConfigError> {
    let defaults = HistoryPolicy::default();
    let runs = match raw.runs {
        Some(runs) => in_range("gpuvet.history.runs", runs, 3, 1000)? as usize,
        None => defaults.runs,
    };
    let min_runs = match raw.min_runs {
        Some(min) => in_range("gpuvet.history.min_runs", min, 3, runs as u32).map_err(|err| {
            err.with_hint(
                "a record judges once it holds `min_runs` results, and holds at most `runs`",
            )
        })? as usize,
        None => defaults.min_runs.min(runs),
    };
    let tolerance = match raw.tolerance_pct {
        Some(pct) if !(pct.is_finite() && pct > 0.0 && pct < 100.0) => {
            return Err(ConfigError::invalid(
                "gpuvet.history.tolerance_pct",
                format!(
                    "`{pct}` is out of range; expected a percentage greater than 0 and below 100"
                ),
            )
            .with_hint(format!(
                "the default, {}, keeps false alarms below 1 in 10,000 GPU-runs at 2% noise",
                crate::history::DEFAULT_TOLERANCE_PCT
            )));
        }
        Some(pct) => pct / 100.0,
        None => defaults.tolerance,
    };
    Ok(HistoryPolicy {
        enabled: raw.enabled.unwrap_or(defaults.enabled),
        runs,
        min_runs,
        tolerance,
        fail_on_degraded: raw.fail_on_degraded.unwrap_or(defaults.fail_on_degraded),
    })
}

/// `gpuvet.repeat_offender`: `of_last` runs from 1 to 100, `failures` from 1 to
/// `of_last`.
fn validate_repeat_offender(raw: RawRepeatOffender) -> Result<RepeatOffenderPolicy, ConfigError> {
    let defaults = RepeatOffenderPolicy::default();
    let of_last = in_range(
        "gpuvet.repeat_offender.of_last",
        raw.of_last.unwrap_or(defaults.of_last),
        1,
        MAX_OF_LAST,
    )?;
    let failures = raw.failures.unwrap_or(defaults.failures.min(of_last));
    if !(1..=of_last).contains(&failures) {
        return Err(ConfigError::invalid(
            "gpuvet.repeat_offender.failures",
            format!("`{failures}` is out of range; expected 1 to `of_last` ({of_last})"),
        )
        .with_hint(
            "a node is a repeat offender when `failures` of its last `of_last` runs failed",
        ));
    }
    Ok(RepeatOffenderPolicy { failures, of_last })
}

/// `gpuvet.kubernetes`: `enabled` is `auto` or `off`; the quarantine's share is a
/// percentage above 0 and at most 100, its window 0.1 to 1,440 minutes.
fn validate_kubernetes(raw: RawKubernetes) -> Result<KubernetesSettings, ConfigError> {
    let (enabled, quarantine) = validate_cluster("gpuvet.kubernetes", raw)?;
    Ok(KubernetesSettings {
        enabled,
        quarantine,
    })
}

fn validate_slurm(raw: RawKubernetes) -> Result<SlurmSettings, ConfigError> {
    let (enabled, quarantine) = validate_cluster("gpuvet.slurm", raw)?;
    Ok(SlurmSettings {
        enabled,
        quarantine,
    })
}

/// `enabled` and `quarantine` of a cluster's section (`section`: its JSON path).
fn validate_cluster(
    section: &str,
    raw: RawKubernetes,
) -> Result<(bool, QuarantinePolicy), ConfigError> {
    let enabled = match raw.enabled.as_deref() {
        None | Some("auto") => true,
        Some("off") => false,
        Some(text) => {
            return Err(unknown_value(
                &format!("{section}.enabled"),
                text,
                &["auto", "off"],
            ));
        }
    };
    let mut quarantine = QuarantinePolicy::default();
    if let Some(raw) = raw.quarantine {
        if let Some(pct) = raw.max_share_pct {
            if !(pct.is_finite() && pct > 0.0 && pct <= 100.0) {
                return Err(ConfigError::invalid(
                    format!("{section}.quarantine.max_share_pct"),
                    format!(
                        "`{pct}` is out of range; expected a percentage above 0 and at most 100"
                    ),
                )
                .with_hint("the default, 50, lets at most half of the nodes be quarantined within the window"));
            }
            quarantine.max_share = pct / 100.0;
        }
        if let Some(minutes) = raw.window_minutes {
            if !(minutes.is_finite() && (0.1..=1440.0).contains(&minutes)) {
                return Err(ConfigError::invalid(
                    format!("{section}.quarantine.window_minutes"),
                    format!("`{minutes}` is out of range; expected 0.1 to 1440 minutes"),
                ));
            }
            quarantine.window = Duration::from_secs_f64(minutes * 60.0);
        }
    }
    Ok((enabled, quarantine))
}

/// A GPU count a node can have, and no empty text (which would expect nothing
/// while looking like it expects something).
fn validate_expected_inventory(
    expected: ExpectedInventory,
) -> Result<ExpectedInventory, ConfigError> {
    if let Some(count) = expected.gpu_count {
        in_range("gpuvet.expected_inventory.gpu_count", count, 1, 4096)?;
    }
    let texts = [
        ("model", &expected.model),
        ("driver_version", &expected.driver_version),
        ("cuda_version", &expected.cuda_version),
        ("nccl_version", &expected.nccl_version),
        ("nvlink_layout", &expected.nvlink_layout),
    ];
    for (key, value) in texts {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ConfigError::invalid(
                format!("gpuvet.expected_inventory.{key}"),
                "the expected value is empty",
            )
            .with_hint(format!(
                "give the value every node must have, or leave `{key}` out to not check it"
            )));
        }
    }
    Ok(expected)
}

/// Interface names as the kernel takes them: 1 to 15 bytes, no `/`, no whitespace,
/// each once.
fn validate_interfaces(names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        let path = format!("gpuvet.interfaces[{i}]");
        let valid = !name.is_empty()
            && name.len() <= 15
            && !name.contains('/')
            && !name.chars().any(char::is_whitespace);
        if !valid {
            return Err(ConfigError::invalid(
                path,
                format!("`{name}` is not a network interface name"),
            )
            .with_hint("give names as `ip link` shows them, e.g. [\"eth0\", \"ib0\"]"));
        }
        if !seen.insert(name.as_str()) {
            return Err(ConfigError::invalid(
                path,
                format!("`{name}` is listed twice"),
            ));
        }
    }
    Ok(names)
}

fn validate_watch(raw: RawWatch) -> Result<WatchSettings, ConfigError> {
    let defaults = WatchSettings::default();
    let kmsg = match raw.kmsg {
        None => defaults.kmsg,
        Some(path) if path == "off" => None,
        Some(path) if path.trim().is_empty() => {
            return Err(
                ConfigError::invalid("gpuvet.watch.kmsg", "the kernel log path is empty")
                    .with_hint("give a path such as `/dev/kmsg`, or `off` to read no kernel log"),
            );
        }
        Some(path) => Some(path),
    };
    let interval_ms = in_range(
        "gpuvet.watch.interval_ms",
        raw.interval_ms.unwrap_or(1000),
        100,
        60_000,
    )?;
    let metrics_addr = raw
        .metrics_addr
        .map(|addr| {
            addr.parse::<std::net::SocketAddr>().map_err(|_| {
                ConfigError::invalid(
                    "gpuvet.watch.metrics_addr",
                    format!("`{addr}` is not an address; expected IP:PORT"),
                )
                .with_hint("e.g. `127.0.0.1:9401`; `0.0.0.0:9401` serves other hosts too")
            })
        })
        .transpose()?;
    Ok(WatchSettings {
        kmsg,
        nvml: raw.nvml.unwrap_or(defaults.nvml),
        interval: Duration::from_millis(interval_ms),
        metrics_addr,
        nccl_ras: match raw.nccl_ras.as_deref() {
            None | Some("auto") => NcclRas::Auto,
            Some("off") => NcclRas::Off,
            Some(addr) if addr.contains(':') && !addr.trim().is_empty() => {
                NcclRas::At(addr.to_owned())
            }
            Some(other) => {
                return Err(ConfigError::invalid(
                    "gpuvet.watch.nccl_ras",
                    format!("`{other}` is not usable; expected `auto`, `off` or `host:port`"),
                ));
            }
        },
    })
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    path: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::invalid(
            path,
            format!("`{value}` is out of range; expected {min} to {max}"),
        ));
    }
    Ok(value)
}

fn validate_limit(check: CheckName, raw: RawLimit, path: &str) -> Result<Limit, ConfigError> {
    let metric = check.spec().metric;
    let (key, wrong_key, limit) = match metric.direction {
        Direction::HigherIsBetter => (
            "floor",
            ("ceiling", raw.ceiling),
            raw.floor.map(Limit::Floor),
        ),
        Direction::LowerIsBetter => (
            "ceiling",
            ("floor", raw.floor),
            raw.ceiling.map(Limit::Ceiling),
        ),
    };
    if wrong_key.1.is_some() {
        let better = match metric.direction {
            Direction::HigherIsBetter => "higher",
            Direction::LowerIsBetter => "lower",
        };
        return Err(ConfigError::invalid(
            format!("{path}.{}", wrong_key.0),
            format!(
                "`{check}` measures {} in {}, where {better} is better, so it takes a `{key}`, not a `{}`",
                metric.name, metric.unit, wrong_key.0
            ),
        ));
    }
    let Some(limit) = limit else {
        return Err(ConfigError::invalid(
            path,
            format!("expected `{{\"{key}\": <{}>}}`", metric.unit),
        ));
    };
    let value = limit.value();
    if !(value.is_finite() && value > 0.0) {
        return Err(ConfigError::invalid(
            format!("{path}.{key}"),
            format!(
                "`{value}` is not a usable limit; expected a positive number of {}",
                metric.unit
            ),
        ));
    }
    Ok(limit)
}

fn validate_sim(raw: RawSim) -> Result<SimScript, ConfigError> {
    let devices = in_range("gpuvet.sim.devices", raw.devices.unwrap_or(8), 1, 1024)?;
    let noise_pct = raw.noise_pct.unwrap_or(0.0);
    if !(noise_pct.is_finite() && (0.0..50.0).contains(&noise_pct)) {
        return Err(ConfigError::invalid(
            "gpuvet.sim.noise_pct",
            format!("`{noise_pct}` is out of range; expected 0 to below 50"),
        ));
    }
    let mut speed = BTreeMap::new();
    for (key, factor) in raw.speed.unwrap_or_default() {
        let path = format!("gpuvet.sim.speed.{key}");
        let index: u32 = key
            .parse()
            .ok()
            .filter(|index| *index < devices)
            .ok_or_else(|| {
                ConfigError::invalid(
                    &path,
                    format!(
                        "`{key}` is not a device index; expected 0 to {}",
                        devices - 1
                    ),
                )
            })?;
        speed.insert(index, speed_factor(&path, factor)?);
    }
    let mut node_speed = BTreeMap::new();
    for (node, factor) in raw.node_speed.unwrap_or_default() {
        let path = format!("gpuvet.sim.node_speed.{node}");
        if node.trim().is_empty() {
            return Err(ConfigError::invalid(path, "the node name is empty"));
        }
        node_speed.insert(node, speed_factor(&path, factor)?);
    }
    let mut node_device_speed = BTreeMap::new();
    for (node, by_device) in raw.node_device_speed.unwrap_or_default() {
        let path = format!("gpuvet.sim.node_device_speed.{node}");
        if node.trim().is_empty() {
            return Err(ConfigError::invalid(path, "the node name is empty"));
        }
        let mut speeds = BTreeMap::new();
        for (key, factor) in by_device {
            let path = format!("{path}.{key}");
            let index: u32 = key.parse().map_err(|_| {
                ConfigError::invalid(&path, format!("`{key}` is not a device index"))
            })?;
            speeds.insert(index, speed_factor(&path, factor)?);
        }
        node_device_speed.insert(node, speeds);
    }
    let mut node_devices = BTreeMap::new();
    for (node, count) in raw.node_devices.unwrap_or_default() {
        let path = format!("gpuvet.sim.node_devices.{node}");
        if node.trim().is_empty() {
            return Err(ConfigError::invalid(path, "the node name is empty"));
        }
        node_devices.insert(node, in_range(&path, count, 1, 1024)?);
    }
    let link_speed = validate_link_speed(raw.link_speed.unwrap_or_default())?;
    let mut node_rail_speed = BTreeMap::new();
    for (node, by_rail) in raw.node_rail_speed.unwrap_or_default() {
        let path = format!("gpuvet.sim.node_rail_speed.{node}");
        if node.trim().is_empty() {
            return Err(ConfigError::invalid(path, "the node name is empty"));
        }
        let mut speeds = BTreeMap::new();
        for (key, factor) in by_rail {
            let path = format!("{path}.{key}");
            let rail: u32 = key
                .parse()
                .map_err(|_| ConfigError::invalid(&path, format!("`{key}` is not a rail index")))?;
            speeds.insert(rail, speed_factor(&path, factor)?);
        }
        node_rail_speed.insert(node, speeds);
    }
    let mut node_faults = BTreeMap::new();
    for (node, fault) in raw.node_faults.unwrap_or_default() {
        let path = format!("gpuvet.sim.node_faults.{node}");
        if node.trim().is_empty() {
            return Err(ConfigError::invalid(path, "the node name is empty"));
        }
        let check: CheckName = fault.check.parse().map_err(|_| {
            ConfigError::invalid(
                format!("{path}.check"),
                format!("unknown check `{}`", fault.check),
            )
        })?;
        let kind = match fault.fault.as_str() {
            "hang" => NodeFaultKind::Hang,
            "crash" => NodeFaultKind::Crash,
            other => {
                return Err(unknown_value(
                    &format!("{path}.fault"),
                    other,
                    &NodeFaultKind::NAMES,
                ));
            }
        };
        node_faults.insert(node, NodeFault { check, fault: kind });
    }
    let mut faults = Vec::new();
    for (i, fault) in raw.faults.unwrap_or_default().into_iter().enumerate() {
        let path = format!("gpuvet.sim.faults[{i}]");
        let check: CheckName = fault.check.parse().map_err(|_| {
            ConfigError::invalid(
                format!("{path}.check"),
                format!("unknown check `{}`", fault.check),
            )
        })?;
        if fault.device >= devices {
            return Err(ConfigError::invalid(
                format!("{path}.device"),
                format!(
                    "`{}` is not a device index; expected 0 to {}",
                    fault.device,
                    devices - 1
                ),
            ));
        }
        let kind = match fault.fault.as_str() {
            "hang" => SimFault::Hang,
            "error" => SimFault::Error,
            "wrong_result" => SimFault::WrongResult,
            "zero" => SimFault::Zero,
            other => {
                return Err(unknown_value(
                    &format!("{path}.fault"),
                    other,
                    &SimFault::NAMES,
                ));
            }
        };
        faults.push((check, fault.device, kind));
    }
    Ok(SimScript {
        seed: raw.seed.unwrap_or(0),
        devices,
        noise: noise_pct / 100.0,
        speed,
        node_speed,
        node_device_speed,
        node_devices,
        link_speed,
        node_rail_speed,
        node_faults,
        faults,
    })
}

/// `{"a<->b": factor}`: two different node names, each link once.
fn validate_link_speed(
    raw: BTreeMap<String, f64>,
) -> Result<BTreeMap<(String, String), f64>, ConfigError> {
    let mut links = BTreeMap::new();
    for (key, factor) in raw {
        let path = format!("gpuvet.sim.link_speed.{key}");
        let ends = key
            .split_once("<->")
            .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()))
            .filter(|(a, b)| !a.is_empty() && !b.is_empty() && a != b)
            .ok_or_else(|| {
                ConfigError::invalid(
                    &path,
                    format!("`{key}` is not a link; expected two node names, `NODE<->NODE`"),
                )
            })?;
        let ends = if ends.0 <= ends.1 {
            ends
        } else {
            (ends.1, ends.0)
        };
        if links.contains_key(&ends) {
            return Err(ConfigError::invalid(
                path,
                format!("the link `{}<->{}` is given twice", ends.0, ends.1),
            ));
        }
        links.insert(ends, speed_factor(&path, factor)?);
    }
    Ok(links)
}

fn speed_factor(path: &str, factor: f64) -> Result<f64, ConfigError> {
    if factor.is_finite() && factor > 0.0 && factor <= 10.0 {
        Ok(factor)
    } else {
        Err(ConfigError::invalid(
            path,
            format!("`{factor}` is out of range; expected a speed factor above 0 and at most 10"),
        ))
    }
}
