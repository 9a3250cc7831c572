//! Running one fault drill: a `gpuvet run` group on the sim backend, in one process
//! (`--sim-nodes N`, every fault scripted in its config) or as real agent processes
//! (`--local-nodes N`, a hung or crashed agent stopped or killed once the group has
//! joined), or with an XID written into the kernel log its runtime check reads. The
//! attempt is kept in the store under a job of its own, then read back and explained,
//! so the drill judges exactly what a user would see.
//!
//! A scenario of one node's history (`repeat-offender`, `early-return`) starts that
//! node alone several times instead, each start a job of its own, in a store of the
//! drill's own (so that the node's history is the drill's alone), and reads back each
//! report's repeat-offender flag, or tries to lift its quarantine as `gpuvet untaint`
//! decides it (`offenders::untaint_proof` over the node's runs; no cluster).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuvet_analysis::drill::{
    Disruption, Drill, GroupKind, History, Observed, Proof, UntaintTry, judge, node_name,
    not_applicable, unobserved,
};
use gpuvet_analysis::explain::explain;
use gpuvet_analysis::timeline::assemble;
use gpuvet_backend::child::find_child;
use gpuvet_backend::with_causes;
use gpuvet_model::events::EventKind;
use gpuvet_model::results::Verdict;
use gpuvet_model::time::unix_now_ms;
use gpuvet_store::Store;

use crate::failure::Failure;

/// Far beyond what a drill takes (seconds); only a hang reaches it, and it is then a
/// finding of the drill, not a wait.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// The longest a drill waits for its group to join before it gives up on disrupting.
const JOIN_LIMIT: Duration = Duration::from_secs(30);
const XID_LINE: &str = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): {XID}, pid=0, drill";
/// What to do when the drill's own files cannot be made.
const TMPDIR_HINT: &str = "the drill keeps its config and logs under `TMPDIR`; set it to a writable directory with free space";

/// Runs `drill` and judges it. The attempt goes to `store` under job `job_id`.
pub fn run(drill: &Drill, store: &Path, job_id: &str) -> Result<Vec<Proof>, Failure> {
    if let Some(why) = &drill.not_applicable {
        return Ok(not_applicable(drill, why));
    }
    let dir = drill_dir()?;
    if let Some(history) = &drill.history {
        return run_history(drill, history, dir.path(), job_id);
    }
    let cannot = |what: &str, path: &Path, err: std::io::Error| {
        Failure::io(format!("cannot {what} `{}`", path.display()), err).with_hint(TMPDIR_HINT)
    };
    // A drill with a record builds its GPUs' records in a store of its own first.
    let own_store = dir.path().join("record.db");
    let store = match &drill.record {
        Some(history) => {
            for run in 1..=history.runs {
                let job = format!("{job_id}-history-{run}");
                if let Some(why) =
                    run_group(drill, &history.config, &[], &own_store, &job, dir.path())?
                {
                    return Ok(unobserved(drill, &format!("history run {run}: {why}")));
                }
            }
            own_store.as_path()
        }
        None => store,
    };
    let kmsg = dir.path().join("kmsg.log");
    let mut config = drill.config.clone();
    let mut app = vec!["true".to_owned()];
    if let Some(Disruption::Xid { xid }) = drill.disruption {
        std::fs::write(&kmsg, "")
            .map_err(|err| cannot("write the drill's kernel log", &kmsg, err))?;
        config["gpuvet"]["watch"] =
            serde_json::json!({"kmsg": kmsg, "nvml": false, "nccl_ras": "off", "interval_ms": 200});
        // The app itself writes the XID once it runs, as a GPU would fail under it;
        // then it waits to be stopped.
        let line = XID_LINE.replace("{XID}", &xid.to_string());
        app = ["sh", "-c"]
            .map(str::to_owned)
            .into_iter()
            .chain([format!(
                "sleep 0.3; echo '{line}' >> '{}'; sleep 60 >/dev/null 2>&1 & wait $!",
                kmsg.display()
            )])
            .collect();
    }
    if let Some(why) = run_group(drill, &config, &app, store, job_id, dir.path())? {
        return Ok(unobserved(drill, &why));
    }
    observe(drill, store, job_id, &dir.path().join("stderr.log"), |_| {})
}

/// The drill's own directory, for its config, logs and (for a history) store.
fn drill_dir() -> Result<tempfile::TempDir, Failure> {
    tempfile::tempdir().map_err(|err| {
        let parent = std::env::temp_dir();
        Failure::io(
            format!(
                "cannot create the drill's directory in `{}`",
                parent.display()
            ),
            err,
        )
        .with_hint(TMPDIR_HINT)
    })
}

/// Plays one node's history: its starts alone, each a job of its own, in a store in
/// `dir`; then judges the flags of its reports and the tries to lift its quarantine.
fn run_history(
    drill: &Drill,
    history: &History,
    dir: &Path,
    job_id: &str,
) -> Result<Vec<Proof>, Failure> {
    let node = node_name(drill.nodes.max(2) - 1);
    let store_path = dir.join("history.db");
    let policy = gpuvet_model::config::Config::from_json(&drill.config.to_string())
        .map(|c| c.settings.repeat_offender)
        .map_err(|err| Failure::bug_from("a drill's config is not valid", err))?;
    let mut starts: u32 = 0;
    let mut start = |config: &serde_json::Value| -> Result<Option<String>, Failure> {
        starts += 1;
        let job = format!("{job_id}-start{starts}");
        let config_path = dir.join(format!("start{starts}.json"));
        std::fs::write(&config_path, config.to_string()).map_err(|err| {
            Failure::io(
                format!(
                    "cannot write the drill's config `{}`",
                    config_path.display()
                ),
                err,
            )
            .with_hint(TMPDIR_HINT)
        })?;
        let mut child = Command::new(crate::sanity::own_executable()?)
            .args(["run", "--config"])
            .arg(&config_path)
            .arg("--store")
            .arg(&store_path)
            .args(["--", "true"])
            .env("GPUVET_JOB_ID", &job)
            .env("GPUVET_NODE", &node)
            .env_remove("GPUVET_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| Failure::bug_from("cannot start the drill's node", err))?;
        if !wait(&mut child, RUN_LIMIT) {
            return Ok(None);
        }
        Ok(Some(job))
    };
    let mut flagged = Vec::new();
    let mut untaint_tries = Vec::new();
    let mut last_job = None;
    match history {
        History::RepeatOffender { starts: count } => {
            for _ in 0..*count {
                let Some(job) = start(&drill.config)? else {
                    return Ok(unobserved(drill, "a start did not end: gpuvet hung"));
                };
                let store = Store::open(&store_path)?;
                let report = store.reports(&job, 1)?.pop();
                flagged.push(report.is_some_and(|r| r.repeat_offender.is_some()));
                last_job = Some(job);
            }
        }
        History::EarlyReturn { healed } => {
            if start(&drill.config)?.is_none() {
                return Ok(unobserved(drill, "a start did not end: gpuvet hung"));
            }
            // Its quarantine begins once the failed start ended, as a rebuild's would.
            let quarantined_at = unix_now_ms();
            untaint_tries.push(try_untaint(
                &store_path,
                &node,
                quarantined_at,
                &policy,
                "a failed start",
            )?);
            std::thread::sleep(Duration::from_millis(2));
            let Some(job) = start(healed)? else {
                return Ok(unobserved(drill, "a start did not end: gpuvet hung"));
            };
            last_job = Some(job);
            untaint_tries.push(try_untaint(
                &store_path,
                &node,
                quarantined_at,
                &policy,
                "a passing start",
            )?);
        }
    }
    let job = last_job.expect("a history has a start");
    let mut proofs = observe(
        drill,
        &store_path,
        &job,
        &dir.join("none.log"),
        |observed| {
            observed.flagged = flagged;
            observed.untaint_tries = untaint_tries;
        },
    )?;
    for proof in &mut proofs {
        proof.evidence = proof.evidence.replace(&format!("{job_id}-"), "");
    }
    Ok(proofs)
}

/// One try to lift `node`'s quarantine from `quarantined_at`, as `gpuvet untaint`
/// decides it from the node's runs in `store`.
fn try_untaint(
    store: &Path,
    node: &str,
    quarantined_at: u64,
    policy: &gpuvet_model::offenders::RepeatOffenderPolicy,
    after: &str,
) -> Result<UntaintTry, Failure> {
    let runs: Vec<_> = Store::open(store)?
        .runs(&gpuvet_store::RunFilter {
            node: Some(node.to_owned()),
            ..gpuvet_store::RunFilter::default()
        })?
        .into_iter()
        .map(|stored| stored.run)
        .collect();
    let decided = gpuvet_model::offenders::untaint_proof(&runs, Some(quarantined_at), None, policy);
    Ok(UntaintTry {
        after: after.to_owned(),
        lifted: decided.is_ok(),
        why: match decided {
            Ok(proof) => format!("lifted: {}", proof.summary),
            Err(reason) => format!("refused: {reason}"),
        },
    })
}

/// Runs the drill's group once with `config` and the app `app` (`true` when empty),
/// disrupting it as the drill says, into `store` under `job_id`. `Some(why)` when the
/// run could not be observed: a disruption that failed, or a group that hung.
fn run_group(
    drill: &Drill,
    config: &serde_json::Value,
    app: &[String],
    store: &Path,
    job_id: &str,
    dir: &Path,
) -> Result<Option<String>, Failure> {
    let cannot = |what: &str, path: &Path, err: std::io::Error| {
        Failure::io(format!("cannot {what} `{}`", path.display()), err).with_hint(TMPDIR_HINT)
    };
    let default_app = ["true".to_owned()];
    let app = if app.is_empty() {
        &default_app[..]
    } else {
        app
    };
    let config_path = dir.join("drill.json");
    std::fs::write(&config_path, config.to_string())
        .map_err(|err| cannot("write the drill's config", &config_path, err))?;
    let stderr_path = dir.join("stderr.log");
    let stderr = File::create(&stderr_path)
        .map_err(|err| cannot("create the drill's log", &stderr_path, err))?;
    let exe = crate::sanity::own_executable()?;
    let mut command = Command::new(exe);
    command
        .args([
            "run",
            match drill.group {
                GroupKind::InProcess => "--sim-nodes",
                GroupKind::Processes => "--local-nodes",
            },
            &drill.nodes.to_string(),
            "--config",
        ])
        .arg(&config_path)
        .arg("--store")
        .arg(store)
        .arg("--")
        .args(app)
        .env("GPUVET_JOB_ID", job_id)
        .env_remove("GPUVET_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // Starting a process fails only when the machine is out of processes or memory.
    let mut child = command
        .spawn()
        .map_err(|err| Failure::bug_from("cannot start the drill's group", err))?;
    let disrupted = match drill.disruption {
        Some(Disruption::Stop { rank }) => {
            disrupt(&child, &stderr_path, drill.nodes, rank, libc::SIGSTOP)
        }
        Some(Disruption::Kill { rank }) => {
            disrupt(&child, &stderr_path, drill.nodes, rank, libc::SIGKILL)
        }
        _ => Ok(None),
    };
    let ended = wait(&mut child, RUN_LIMIT);
    if let Ok(Some(pid)) = disrupted {
        // A stopped agent resumes only to find its parent gone, and exits.
        // SAFETY: kill(2) with a pid this drill found among its own descendants.
        unsafe {
            libc::kill(pid, libc::SIGCONT);
        }
    }
    if let Err(why) = disrupted {
        return Ok(Some(with_causes(&why)));
    }
    if !ended {
        return Ok(Some(format!(
            "the group did not end within {RUN_LIMIT:?}: gpuvet hung"
        )));
    }
    Ok(None)
}

/// Why a drill could not disrupt its group: the drill then reports its fault as not
/// observed, saying why.
#[derive(Debug, thiserror::Error)]
enum Undisrupted {
    #[error("the group did not join within {0:?}")]
    NotJoined(Duration),
    #[error("agent {rank} of the group could not be found")]
    NoAgent { rank: u32 },
    #[error("cannot signal agent {rank}")]
    Signal {
        rank: u32,
        #[source]
        source: std::io::Error,
    },
}

/// Waits for the group to join, then sends `signal` to the agent of `rank`; returns its
/// pid.
fn disrupt(
    child: &Child,
    stderr: &Path,
    nodes: u32,
    rank: u32,
    signal: i32,
) -> Result<Option<i32>, Undisrupted> {
    let joined = format!("{nodes} of {nodes} nodes joined");
    let until = Instant::now() + JOIN_LIMIT;
    while !read(stderr).contains(&joined) {
        if Instant::now() > until {
            return Err(Undisrupted::NotJoined(JOIN_LIMIT));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = find_child(child.id(), "--node-rank", &rank.to_string())
        .ok_or(Undisrupted::NoAgent { rank })?;
    // SAFETY: kill(2) on an agent process the drill's own child started.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc != 0 {
        return Err(Undisrupted::Signal {
            rank,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(Some(pid))
}

fn read(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    text
}

/// Waits for `child` to exit; kills it after `limit` and says it did not end.
fn wait(child: &mut Child, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Reads the drill's attempt back from the store and judges what it shows.
fn observe(
    drill: &Drill,
    store: &Path,
    job_id: &str,
    stderr: &Path,
    add: impl FnOnce(&mut Observed),
) -> Result<Vec<Proof>, Failure> {
    let store = Store::open(store)?;
    let Some(record) = store.job_record(job_id, 1)? else {
        let output = read(stderr);
        let last = output.lines().last().unwrap_or("no output");
        return Ok(unobserved(
            drill,
            &format!("the run kept nothing in the store; its last words: {last}"),
        ));
    };
    let timeline = assemble(&record);
    let explanation = explain(&record, &timeline);
    let report = record.group_report();
    let named = report
        .map(|r| {
            r.findings()
                .filter(|(_, f)| f.fails())
                .map(|(_, f)| (f.entity.to_string(), f.lane))
                .collect()
        })
        .unwrap_or_default();
    let degraded = report
        .map(|r| {
            r.checks
                .iter()
                .flat_map(|c| c.entities.iter())
                .filter(|e| e.verdict == Verdict::Degraded)
                .map(|e| (e.entity.to_string(), e.lane))
                .collect()
        })
        .unwrap_or_default();
    let events: Vec<EventKind> = record.events.iter().map(|e| e.event.kind).collect();
    let app_stopped = record.events.iter().any(|e| {
        e.event.kind == EventKind::InstanceExited && !e.event.details["killed_by"].is_null()
    });
    let mut observed = Observed {
        coordinator: report.map(|r| r.node.clone()).unwrap_or_default(),
        explanation,
        named,
        events,
        app_stopped,
        degraded,
        flagged: Vec::new(),
        untaint_tries: Vec::new(),
    };
    add(&mut observed);
    Ok(judge(drill, &observed))
}

/// A job id of its own for each drill run, so that the store and the server keep
/// every drill apart from real jobs and from each other.
pub fn job_id(scenario: &str, nodes: u32) -> String {
    format!("drill-{scenario}-n{nodes}-{}", unix_now_ms())
}

/// The store drills write to when none is given.
pub fn default_store(config: Option<&Path>) -> Result<PathBuf, Failure> {
    let config = crate::identity::load_config(config)?;
    Ok(crate::identity::store_path(None, &config))
}
