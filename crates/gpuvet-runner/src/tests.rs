//! Runner tests against a scripted in-file backend: every path of `run`, including
//! hangs, panics, errors and unsupported work.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use gpuvet_backend::{BackendError, Sample, WorkSpec};
use gpuvet_model::analysis::Tolerances;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::Attempt;
use gpuvet_model::results::{DeviceInfo, Verdict};

use super::*;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Value(f64),
    /// The first call returns the first value, later calls the second.
    ThenValue(f64, f64),
    Hang,
    Panic,
    Error,
    Unsupported,
}

#[derive(Debug)]
struct ScriptedBackend {
    devices: Vec<DeviceInfo>,
    gemm: HashMap<u32, Behaviour>,
    all_reduce: Behaviour,
    calls: Mutex<HashMap<u32, u32>>,
    launches: AtomicU32,
}

impl ScriptedBackend {
    fn new(devices: u32) -> Self {
        ScriptedBackend {
            devices: (0..devices)
                .map(|index| DeviceInfo {
                    index,
                    name: "scripted".into(),
                    memory_bytes: None,
                    facts: Default::default(),
                    details: BTreeMap::new(),
                })
                .collect(),
            gemm: HashMap::new(),
            all_reduce: Behaviour::Value(100.0),
            calls: Mutex::new(HashMap::new()),
            launches: AtomicU32::new(0),
        }
    }

    fn gemm_on(mut self, device: u32, behaviour: Behaviour) -> Self {
        self.gemm.insert(device, behaviour);
        self
    }

    fn play(&self, behaviour: Behaviour, call: u32) -> Result<Sample, BackendError> {
        let value = match behaviour {
            Behaviour::Value(v) => v,
            Behaviour::ThenValue(first, later) => {
                if call == 0 {
                    first
                } else {
                    later
                }
            }
            Behaviour::Hang => loop {
                std::thread::park();
            },
            Behaviour::Panic => panic!("scripted panic"),
            Behaviour::Error => return Err(BackendError::Failed("scripted device error".into())),
            Behaviour::Unsupported => {
                return Err(BackendError::Unsupported("no such dtype here".into()));
            }
        };
        Ok(Sample {
            value,
            samples: vec![value; 8],
            params: BTreeMap::from([("dtype".into(), "fp32".into())]),
            ..Sample::default()
        })
    }
}

impl Backend for ScriptedBackend {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn supports(&self, check: CheckName) -> Support {
        match check {
            CheckName::GemmFlops
            | CheckName::KernelLaunch
            | CheckName::AllReduce1
            | CheckName::CompCommOverlap => Support::Supported,
            _ => Support::NotImplemented("not scripted".into()),
        }
    }

    fn gemm(&self, device: u32, _: &WorkSpec, _: &CancelToken) -> Result<Sample, BackendError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            let count = calls.entry(device).or_default();
            *count += 1;
            *count - 1
        };
        self.play(
            self.gemm
                .get(&device)
                .copied()
                .unwrap_or(Behaviour::Value(100.0)),
            call,
        )
    }

    fn kernel_launch(&self, _: u32, _: &WorkSpec, _: &CancelToken) -> Result<Sample, BackendError> {
        self.launches.fetch_add(1, Ordering::SeqCst);
        self.play(Behaviour::Value(5.0), 0)
    }

    fn all_reduce_local(
        &self,
        _: &[u32],
        _: &WorkSpec,
        _: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.play(self.all_reduce, 0)
    }
}

fn plan(checks: &[CheckName], timeout: Duration) -> RunPlan {
    RunPlan {
        attempt: Attempt {
            job_id: "job".into(),
            attempt: 1,
            node: "n0".into(),
            instance: "i0".into(),
        },
        nodes: 1,
        checks: checks.to_vec(),
        timeout,
        tolerance: Tolerances::uniform(0.05),
        baselines: BTreeMap::new(),
        expected_inventory: Default::default(),
        work: WorkSpec::default(),
        started_at_ms: 0,
        hang_grace: Duration::from_millis(300),
        worker: None,
    }
}

const DEFAULT_SET: [CheckName; 4] = [
    CheckName::GemmFlops,
    CheckName::KernelLaunch,
    CheckName::AllReduce1,
    CheckName::AllReduce2,
];

fn run_quietly(backend: ScriptedBackend, plan: &RunPlan) -> RunReport {
    run(Arc::new(backend), plan, &mut |_| {})
}

fn statuses(report: &RunReport) -> Vec<CheckStatus> {
    report.checks.iter().map(|c| c.status).collect()
}

#[test]
fn a_healthy_node_passes_and_impossible_scopes_are_skipped() {
    let mut events = Vec::new();
    let report = run(
        Arc::new(ScriptedBackend::new(4)),
        &plan(&DEFAULT_SET, Duration::from_secs(60)),
        &mut |event| {
            events.push(match event {
                RunnerEvent::RunStarted { .. } => "run".to_owned(),
                RunnerEvent::CheckStarted { name, .. } => format!("start {name}"),
                RunnerEvent::Remeasuring { .. } => "remeasure".to_owned(),
                RunnerEvent::CheckFinished { result, .. } => {
                    format!("done {} {}", result.name, result.status)
                }
                RunnerEvent::RunFinished { .. } => "finished".to_owned(),
            })
        },
    );
    assert_eq!(
        statuses(&report),
        [
            CheckStatus::Passed,
            CheckStatus::Passed,
            CheckStatus::Passed,
            CheckStatus::Skipped
        ]
    );
    assert_eq!(report.outcome, Outcome::Passed);
    assert_eq!(report.checks[0].entities.len(), 4);
    assert_eq!(
        report.checks[2].entities.len(),
        1,
        "all_reduce_1 judges the node"
    );
    assert_eq!(report.checks[0].params["dtype"], "fp32");
    assert_eq!(report.backend, "scripted");
    assert_eq!(events.first().map(String::as_str), Some("run"));
    assert_eq!(events.last().map(String::as_str), Some("finished"));
    assert!(events.contains(&"done all_reduce_2 skipped".to_owned()));
}

#[test]
fn unsupported_checks_are_not_implemented_never_passed() {
    let report = run_quietly(
        ScriptedBackend::new(2),
        &RunPlan {
            nodes: 2,
            ..plan(
                &[CheckName::AllGather, CheckName::GemmFlops],
                Duration::from_secs(60),
            )
        },
    );
    assert_eq!(
        statuses(&report),
        [CheckStatus::NotImplemented, CheckStatus::Passed]
    );
    assert_eq!(report.outcome, Outcome::Incomplete);
}

#[test]
fn on_one_node_the_group_collectives_run_among_its_devices() {
    let report = run_quietly(
        ScriptedBackend::new(2),
        &plan(
            &[
                CheckName::AllReduce,
                CheckName::AllGather,
                CheckName::MultiAllReduce,
            ],
            Duration::from_secs(60),
        ),
    );
    // `all_reduce` is the node's all-reduce; this backend has no local all-gather, so
    // that check is skipped with the backend's reason; a rail needs two nodes.
    assert_eq!(
        statuses(&report),
        [
            CheckStatus::Passed,
            CheckStatus::Skipped,
            CheckStatus::Skipped
        ]
    );
    let all_reduce = &report.checks[0];
    assert_eq!(all_reduce.entities.len(), 1);
    assert_eq!(all_reduce.entities[0].entity.to_string(), "n0");
    assert_eq!(
        all_reduce.params["group"],
        "this node's devices (a group of 1 node)"
    );
    assert_eq!(
        report.checks[1].reason.as_deref(),
        Some("the `scripted` backend has no all-gather among a node's devices")
    );
    assert_eq!(report.outcome, Outcome::Passed);
}

#[test]
fn overlap_without_slowdown_passes_and_zero_work_underneath_is_faulty() {
    // Every rate the same alone and overlapped: a slowdown of 0 %, the best result.
    let report = run_quietly(
        ScriptedBackend::new(2),
        &plan(&[CheckName::CompCommOverlap], Duration::from_secs(60)),
    );
    assert_eq!(statuses(&report), [CheckStatus::Passed]);
    assert_eq!(report.checks[0].entities[0].measurement.value, Some(0.0));

    // A GEMM that computed nothing makes the ratio meaningless: that is faulty.
    let report = run_quietly(
        ScriptedBackend::new(2).gemm_on(0, Behaviour::Value(0.0)),
        &plan(&[CheckName::CompCommOverlap], Duration::from_secs(60)),
    );
    assert_eq!(statuses(&report), [CheckStatus::Failed]);
    let node = &report.checks[0].entities[0];
    assert_eq!(node.verdict, Verdict::Faulty);
    assert_eq!(
        node.reason,
        "error: no work done: the GEMM alone measured 0 TFLOPS"
    );
}

#[test]
fn a_slow_device_is_remeasured_then_flagged() {
    let backend = ScriptedBackend::new(4).gemm_on(2, Behaviour::Value(80.0));
    let mut remeasured = Vec::new();
    let report = run(
        Arc::new(backend),
        &plan(&[CheckName::GemmFlops], Duration::from_secs(60)),
        &mut |event| {
            if let RunnerEvent::Remeasuring { entities, .. } = event {
                remeasured.extend(entities.iter().map(ToString::to_string));
            }
        },
    );
    assert_eq!(remeasured, ["n0/dev2"]);
    let gemm = &report.checks[0];
    assert_eq!(gemm.status, CheckStatus::Failed);
    let findings: Vec<_> = gemm.findings().collect();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].entity.to_string(), "n0/dev2");
    assert_eq!(findings[0].verdict, Verdict::Slow);
    assert!(findings[0].evidence.remeasured);
    assert_eq!(report.outcome, Outcome::Failed);
}

#[test]
fn a_suspect_that_recovers_on_remeasure_is_ok() {
    let backend = ScriptedBackend::new(3).gemm_on(1, Behaviour::ThenValue(50.0, 100.0));
    let report = run_quietly(
        backend,
        &plan(&[CheckName::GemmFlops], Duration::from_secs(60)),
    );
    assert_eq!(report.checks[0].status, CheckStatus::Passed);
    assert!(report.checks[0].entities[1].evidence.remeasured);
    assert_eq!(report.checks[0].params["remeasured"], "1");
}

#[test]
fn a_suspect_is_remeasured_beside_its_peers_and_judged_against_them() {
    // A load that arrives during the second round slows every device alike: against
    // the peers' first values the suspect would still look slow, against their second
    // it is one of them.
    let backend = ScriptedBackend::new(3)
        .gemm_on(0, Behaviour::ThenValue(100.0, 60.0))
        .gemm_on(1, Behaviour::Value(60.0))
        .gemm_on(2, Behaviour::ThenValue(100.0, 60.0));
    let report = run_quietly(
        backend,
        &plan(&[CheckName::GemmFlops], Duration::from_secs(60)),
    );
    let gemm = &report.checks[0];
    assert_eq!(gemm.status, CheckStatus::Passed, "{gemm:#?}");
    assert!(gemm.entities[1].evidence.remeasured);
    assert_eq!(gemm.entities[1].evidence.peer_median, Some(60.0));
    // The peers keep their first verdicts and values; only the suspect was in doubt.
    assert!(!gemm.entities[0].evidence.remeasured);
    assert_eq!(gemm.entities[0].measurement.value, Some(100.0));
}

#[test]
fn a_check_that_hangs_on_every_device_times_out_and_the_rest_do_not_run() {
    let backend = ScriptedBackend::new(2)
        .gemm_on(0, Behaviour::Hang)
        .gemm_on(1, Behaviour::Hang);
    let timeout = Duration::from_secs(2);
    let report = run_quietly(
        backend,
        &plan(&[CheckName::GemmFlops, CheckName::KernelLaunch], timeout),
    );
    assert_eq!(
        statuses(&report),
        [CheckStatus::TimedOut, CheckStatus::NotRun]
    );
    assert!(
        report.checks[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("the overall timeout of 2.0s expired")
    );
    assert_eq!(report.outcome, Outcome::Failed);
    // Generous bound: this guards against hanging, it is not a speed test.
    assert!(
        report.duration_secs < timeout.as_secs_f64() + 10.0,
        "{}",
        report.duration_secs
    );
}

#[test]
fn one_hung_device_among_finished_peers_is_named_and_the_run_goes_on() {
    let backend = ScriptedBackend::new(4).gemm_on(3, Behaviour::Hang);
    let report = run_quietly(
        backend,
        &plan(
            &[CheckName::GemmFlops, CheckName::KernelLaunch],
            Duration::from_secs(60),
        ),
    );
    assert_eq!(
        statuses(&report),
        [CheckStatus::Failed, CheckStatus::Passed]
    );
    let findings: Vec<_> = report.checks[0].findings().collect();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].entity.to_string(), "n0/dev3");
    assert_eq!(findings[0].verdict, Verdict::Faulty);
    assert!(
        findings[0]
            .reason
            .starts_with("error: hung: no result after"),
        "{}",
        findings[0].reason
    );
}

#[test]
fn device_errors_are_faulty_and_panics_fail_the_check() {
    let backend = ScriptedBackend::new(2).gemm_on(0, Behaviour::Error);
    let report = run_quietly(
        backend,
        &plan(&[CheckName::GemmFlops], Duration::from_secs(60)),
    );
    let finding = report.checks[0].findings().next().unwrap();
    assert_eq!(
        (finding.verdict, finding.reason.as_str()),
        (Verdict::Faulty, "error: scripted device error")
    );

    let backend = ScriptedBackend {
        all_reduce: Behaviour::Panic,
        ..ScriptedBackend::new(2)
    };
    let report = run_quietly(
        backend,
        &plan(&[CheckName::AllReduce1], Duration::from_secs(60)),
    );
    assert_eq!(report.checks[0].status, CheckStatus::Failed);
    let finding = report.checks[0].findings().next().unwrap();
    assert_eq!(
        finding.reason,
        "error: the backend panicked: scripted panic"
    );
}

#[test]
fn unsupported_work_skips_the_check_with_the_backend_reason() {
    let backend = ScriptedBackend::new(2)
        .gemm_on(0, Behaviour::Unsupported)
        .gemm_on(1, Behaviour::Unsupported);
    let report = run_quietly(
        backend,
        &plan(&[CheckName::GemmFlops], Duration::from_secs(60)),
    );
    assert_eq!(report.checks[0].status, CheckStatus::Skipped);
    assert_eq!(
        report.checks[0].reason.as_deref(),
        Some("no such dtype here")
    );
}

#[test]
fn a_baseline_floor_fails_the_check() {
    let mut plan = plan(&[CheckName::GemmFlops], Duration::from_secs(60));
    plan.baselines.insert(
        CheckName::GemmFlops,
        gpuvet_model::analysis::Limit::Floor(1e9),
    );
    let report = run_quietly(ScriptedBackend::new(2), &plan);
    assert_eq!(report.checks[0].status, CheckStatus::Failed);
    assert_eq!(report.checks[0].findings().count(), 2);
}

#[test]
fn human_durations() {
    assert_eq!(human_duration(Duration::from_millis(2500)), "2.5s");
    assert_eq!(human_duration(Duration::from_secs(45)), "45s");
    assert_eq!(human_duration(Duration::from_secs(300)), "5m");
    assert_eq!(human_duration(Duration::from_secs(90)), "1m30s");
}

/// Worker processes played by `sh`: each script gets `$0` = a mark unique to the test
/// (to find it in /proc), `$1` = a hello for a 2-device scripted backend, and `$2` =
/// an answer for unit 0 of round 1. A fake that must stay alive reads the request
/// first, then waits on `read never`: the runner sends nothing more.
mod worker_process {
    use super::*;
    use crate::protocol::{self, FromWorker, PROTOCOL};

    fn hello(backend: &str) -> String {
        protocol::encode(&FromWorker::Hello {
            protocol: PROTOCOL,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            backend: backend.to_owned(),
            devices: vec![0, 1],
        })
    }

    fn unit_0() -> String {
        protocol::encode(&FromWorker::Unit {
            round: 1,
            slot: 0,
            result: Ok(Sample {
                value: 100.0,
                samples: vec![100.0; 8],
                ..Sample::default()
            })
            .into(),
        })
    }

    fn mark(test: &str) -> String {
        format!("gpuvet-fake-worker-{test}-{}", std::process::id())
    }

    fn fake(script: &str, mark: &str, hello_backend: &str) -> WorkerLauncher {
        WorkerLauncher {
            program: "sh".into(),
            args: vec![
                "-c".into(),
                script.into(),
                mark.into(),
                hello(hello_backend).into(),
                unit_0().into(),
            ],
        }
    }

    /// Live processes whose command line carries `mark`.
    fn alive(mark: &str) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                cmdline
                    .split(|&b| b == 0)
                    .any(|arg| arg == mark.as_bytes())
                    .then_some(pid)
            })
            .collect()
    }

    fn run_with(script: &str, mark: &str, timeout: Duration) -> RunReport {
        let mut plan = plan(&[CheckName::GemmFlops], timeout);
        plan.worker = Some(fake(script, mark, "scripted"));
        run_quietly(ScriptedBackend::new(2), &plan)
    }

    fn reason(report: &RunReport) -> &str {
        report.checks[0].reason.as_deref().unwrap_or_default()
    }

    #[test]
    fn a_worker_that_exits_before_its_hello_fails_the_check_saying_how() {
        let report = run_with("exit 3", &mark("exit"), Duration::from_secs(60));
        assert_eq!(report.checks[0].status, CheckStatus::Failed);
        assert_eq!(
            reason(&report),
            "the check's worker process exited with code 3 before it was ready"
        );
        assert!(report.duration_secs < 30.0, "no waiting for the deadline");
    }

    #[test]
    fn a_worker_that_writes_garbage_is_killed_and_quoted() {
        let mark = mark("garbage");
        let report = run_with(
            "echo 'NCCL INFO hi'; read request; read never",
            &mark,
            Duration::from_secs(60),
        );
        assert_eq!(report.checks[0].status, CheckStatus::Failed);
        assert!(
            reason(&report).starts_with(
                "the check's worker process wrote an unreadable line `NCCL INFO hi` ("
            ) && reason(&report).ends_with("); it was killed"),
            "{}",
            reason(&report)
        );
        assert_eq!(alive(&mark), Vec::<u32>::new(), "the worker is gone");
    }

    #[test]
    fn a_worker_that_dies_mid_check_fails_the_units_it_left() {
        let script = r#"printf '%s\n' "$1"; read request; printf '%s\n' "$2"; kill -9 $$"#;
        let report = run_with(script, &mark("dies"), Duration::from_secs(60));
        let gemm = &report.checks[0];
        assert_eq!(gemm.status, CheckStatus::Failed);
        assert_eq!(gemm.entities[0].verdict, Verdict::Ok);
        assert_eq!(gemm.entities[1].verdict, Verdict::Faulty);
        assert_eq!(
            gemm.entities[1].reason,
            "error: the check's worker process was killed by signal 9 (SIGKILL) before this unit finished"
        );
    }

    #[test]
    fn a_unit_hung_in_its_worker_is_named_and_the_worker_killed_at_once() {
        let mark = mark("hung");
        // Answers unit 0, then waits forever, as a hung device would.
        let script = r#"printf '%s\n' "$1"; read request; printf '%s\n' "$2"; read never"#;
        let report = run_with(script, &mark, Duration::from_secs(60));
        // Checked before anything else: killed by the runner, not at this test's end.
        assert_eq!(alive(&mark), Vec::<u32>::new(), "the hung worker is gone");
        let gemm = &report.checks[0];
        assert_eq!(gemm.entities[1].verdict, Verdict::Faulty);
        let why = &gemm.entities[1].reason;
        assert!(
            why.starts_with("error: hung: no result after")
                && why.ends_with("; its worker process was killed"),
            "{why}"
        );
    }

    #[test]
    fn the_overall_timeout_kills_the_worker() {
        let mark = mark("timeout");
        let script = r#"printf '%s\n' "$1"; read request; read never"#;
        let report = run_with(script, &mark, Duration::from_secs(1));
        assert_eq!(
            alive(&mark),
            Vec::<u32>::new(),
            "the worker is gone when the run returns"
        );
        assert_eq!(report.checks[0].status, CheckStatus::TimedOut);
        assert!(
            reason(&report).ends_with("; its worker process was killed"),
            "{}",
            reason(&report)
        );
        assert!(report.duration_secs < 30.0, "{}", report.duration_secs);
    }

    #[test]
    fn a_worker_with_another_backend_is_refused() {
        let mark = mark("backend");
        let mut plan = plan(&[CheckName::GemmFlops], Duration::from_secs(60));
        plan.worker = Some(fake(
            r#"printf '%s\n' "$1"; read request; read never"#,
            &mark,
            "sim",
        ));
        let report = run_quietly(ScriptedBackend::new(2), &plan);
        assert_eq!(report.checks[0].status, CheckStatus::Failed);
        assert_eq!(
            reason(&report),
            "the check's worker process built the `sim` backend with devices [0, 1], not the \
             `scripted` backend with devices [0, 1]; it was killed"
        );
        assert_eq!(alive(&mark), Vec::<u32>::new());
    }

    /// A worker that notes each start in the file `$3`, then answers every unit of each
    /// round with `$2`'s sample. With `hang_first`, the first worker answers only slot 0
    /// of its first round and then hangs.
    fn answering(mark: &str, starts: &std::path::Path, hang_first: bool) -> WorkerLauncher {
        let hang = if hang_first {
            r#"if [ "$slot" = 0 ] && [ "$(wc -l < "$3")" -eq 1 ]; then read never; fi"#
        } else {
            ""
        };
        let script = format!(
            r#"echo start >> "$3"; printf '%s\n' "$1"
while read -r request; do
  round=$(printf '%s' "$request" | sed -n 's/^{{"round":\([0-9]*\),.*/\1/p')
  for slot in 0 1; do
    printf '%s\n' "$2" | sed "s/\"round\":1,/\"round\":$round,/; s/\"slot\":0,/\"slot\":$slot,/"
    {hang}
  done
done"#
        );
        let mut launcher = fake(&script, mark, "scripted");
        launcher.args.push(starts.as_os_str().to_owned());
        launcher
    }

    fn starts(file: &std::path::Path) -> usize {
        std::fs::read_to_string(file).map_or(0, |s| s.lines().count())
    }

    /// Runs `gemm_flops` then `kernel_launch` with [`answering`] workers (each hanging
    /// on one unit when `hang`); returns the report, how many workers started, and
    /// which are still alive.
    fn run_two_checks(label: &str, hang: bool) -> (RunReport, usize, Vec<u32>) {
        let mark = mark(label);
        let file = std::env::temp_dir().join(format!("{mark}.starts"));
        let _ = std::fs::remove_file(&file);
        let mut plan = plan(
            &[CheckName::GemmFlops, CheckName::KernelLaunch],
            Duration::from_secs(60),
        );
        plan.worker = Some(answering(&mark, &file, hang));
        let report = run_quietly(ScriptedBackend::new(2), &plan);
        let alive = alive(&mark);
        let started = starts(&file);
        let _ = std::fs::remove_file(&file);
        (report, started, alive)
    }

    #[test]
    fn the_checks_of_a_run_share_one_worker_that_ends_with_the_run() {
        let (report, starts, alive) = run_two_checks("shared", false);
        assert_eq!(alive, Vec::<u32>::new(), "the worker ends with the run");
        assert_eq!(
            statuses(&report),
            [CheckStatus::Passed, CheckStatus::Passed],
            "{:?}",
            report.checks
        );
        assert_eq!(starts, 1, "one worker for both checks");
    }

    #[test]
    fn after_a_hang_killed_the_worker_the_next_check_starts_another() {
        let (report, starts, alive) = run_two_checks("restart", true);
        assert_eq!(alive, Vec::<u32>::new(), "no worker outlives the run");
        let gemm = &report.checks[0];
        assert_eq!(gemm.entities[1].verdict, Verdict::Faulty, "{gemm:?}");
        assert!(
            gemm.entities[1]
                .reason
                .ends_with("; its worker process was killed"),
            "{}",
            gemm.entities[1].reason
        );
        assert_eq!(report.checks[1].status, CheckStatus::Passed, "{report:?}");
        assert_eq!(starts, 2, "a new worker after the kill");
    }

    #[test]
    fn a_worker_that_cannot_start_fails_the_check() {
        let mut plan = plan(&[CheckName::GemmFlops], Duration::from_secs(60));
        plan.worker = Some(WorkerLauncher {
            program: "/nonexistent/gpuvet".into(),
            args: Vec::new(),
        });
        let report = run_quietly(ScriptedBackend::new(2), &plan);
        assert_eq!(report.checks[0].status, CheckStatus::Failed);
        assert!(
            reason(&report)
                .starts_with("cannot start the check's worker process `/nonexistent/gpuvet`: "),
            "{}",
            reason(&report)
        );
    }
}
