//! `gpuvet fr DUMP_DIR`: read PyTorch flight-recorder dumps (one per rank, pickle or
//! JSON) and name the rank that stopped a collective, and the ranks that only waited.
//! With `--job`, a problem found is recorded as that job's event.

use std::io::ErrorKind;

use gpuvet_model::events::Attempt;
use gpuvet_model::exit_codes;
use gpuvet_model::time::unix_now_ms;
use gpuvet_watch::flight_recorder::record::{event_of, rank_nodes};
use gpuvet_watch::flight_recorder::{FrDump, FrError, FrReport, analyze, load_dir, summary};

use crate::cli::{FrArgs, RecordArgs};
use crate::failure::{Failure, note};
use crate::identity::this_node;
use crate::{output, record};

pub fn fr(args: FrArgs) -> Result<i32, Failure> {
    let dumps = load_dir(&args.dump_dir, None).map_err(unreadable_dumps)?;
    let report = analyze(&dumps);
    if args.job_id.is_some() {
        record_in_job(&args, &report, &dumps)?;
    }
    if args.json {
        let mut text = serde_json::to_string_pretty(&report).expect("the report serializes");
        text.push('\n');
        output::stdout(&text)?;
    } else {
        output::stdout(&summary(&report))?;
    }
    // Like `check`: a named problem is a failed verdict.
    Ok(if report.findings.is_empty() {
        exit_codes::SUCCESS
    } else {
        exit_codes::CHECK_FAILED
    })
}

/// Dumps that cannot be read: a path that is not there, or files that are not dumps,
/// are the user's to fix (exit 2); a directory or file there that cannot be read is
/// the environment's (exit 73).
fn unreadable_dumps(err: FrError) -> Failure {
    let io_kind = match &err {
        FrError::ReadDir { source, .. } | FrError::ReadFile { source, .. } => Some(source.kind()),
        _ => None,
    };
    let hint = match err {
        FrError::TooLarge { .. } => {
            "a PyTorch dump holds `TORCH_NCCL_TRACE_BUFFER_SIZE` entries (2,000 by default) and is a few MiB; this file is not one, or the buffer was set far larger"
        }
        _ => {
            "pass the directory holding the dumps (`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` prefix + rank, e.g. `nccl_trace_rank_0`)"
        }
    };
    match io_kind {
        None | Some(ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            Failure::new(exit_codes::USAGE, err).with_hint(hint)
        }
        Some(_) => Failure::new(exit_codes::IO_ERROR, err)
            .with_hint("check that this user may read the directory and its dumps"),
    }
}

/// Records the analysis as a `RuntimeCheckFailed` event of the job's attempt, on the
/// node of the rank at fault (this node when the group is unknown).
fn record_in_job(args: &FrArgs, report: &FrReport, dumps: &[FrDump]) -> Result<(), Failure> {
    let record_args = RecordArgs {
        config: args.config.clone(),
        job_id: args.job_id.clone(),
        attempt: args.attempt,
        store: args.store.clone(),
        server: None,
    };
    let job = record::load(&record_args)?;
    let group_nodes: Vec<String> = match job.group_report().and_then(|r| r.group.as_ref()) {
        Some(group) if !group.nodes.is_empty() => group.nodes.clone(),
        _ => job.reports.iter().map(|r| r.node.clone()).collect(),
    };
    let ranks: Vec<u32> = report
        .expected_ranks
        .iter()
        .chain(report.dumps.iter().map(|d| &d.rank))
        .copied()
        .collect();
    let ranks_per_node = match args.ranks_per_node {
        Some(0) => {
            return Err(Failure::usage(
                "`--ranks-per-node 0` is out of range; expected 1 or more",
            ));
        }
        Some(n) => n,
        None => infer_ranks_per_node(&ranks, group_nodes.len())?,
    };
    let nodes = rank_nodes(&ranks, &group_nodes, ranks_per_node);
    let started_ms = job
        .reports
        .iter()
        .map(|r| r.started_at_ms)
        .min()
        .unwrap_or(0);
    let Some((culprit, event)) = event_of(report, dumps, &nodes, started_ms, unix_now_ms()) else {
        note(format!(
            "the dumps show no problem: nothing recorded for job `{}`",
            job.job_id
        ));
        return Ok(());
    };
    let node = culprit.unwrap_or_else(this_node);
    let instance = job
        .reports
        .iter()
        .find(|r| r.node == node)
        .map_or_else(|| node.clone(), |r| r.instance.clone());
    let attempt = Attempt {
        job_id: job.job_id.clone(),
        attempt: job.attempt,
        node: node.clone(),
        instance,
    };
    let mut store = record::open_store(&record_args)?;
    store.record_event(&attempt, &event)?;
    note(format!(
        "recorded as a `RuntimeCheckFailed` event of job `{}` attempt {} on `{node}`",
        job.job_id, job.attempt
    ));
    Ok(())
}

/// Ranks per node when the flag does not say: every rank over the group's nodes, when
/// they divide evenly.
fn infer_ranks_per_node(ranks: &[u32], nodes: usize) -> Result<u32, Failure> {
    let world = ranks.iter().max().map_or(0, |r| r + 1);
    if nodes == 0 || world == 0 || !(world as usize).is_multiple_of(nodes) {
        return Err(Failure::usage(format!(
            "cannot tell which node each of the dumps' {world} ranks ran on: the job has {nodes} nodes"
        ))
        .with_hint("say it with `--ranks-per-node N`"));
    }
    Ok(world / nodes as u32)
}
