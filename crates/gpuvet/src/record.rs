//! One attempt of a job as the store keeps it, for `timeline`, `bundle` and
//! `explain`: which job and attempt the flags mean, and every report and event of it.

use gpuvet_core::timeline::JobRecord;
use gpuvet_store::{Store, StoreLocation};

use crate::cli::RecordArgs;
use crate::failure::Failure;
use crate::identity::{DEFAULT_JOB_ID, load_config, store_path};

/// Opens the store the flags name; an SQLite file must exist already, so a wrong path
/// is noticed instead of read as empty.
pub fn open_store(args: &RecordArgs) -> Result<Store, Failure> {
    let config = load_config(args.config.as_deref())?;
    let location = match &args.store {
        Some(value) => StoreLocation::parse(value),
        None => StoreLocation::parse(&store_path(None, &config).to_string_lossy()),
    };
    if let StoreLocation::Sqlite(path) = &location
        && !path.exists()
    {
        return Err(
            Failure::usage(format!("there is no store at `{}`", path.display())).with_hint(
                "run `gpuvet check` or `gpuvet run` first, or point `--store` / GPUVET_STORE at the store they wrote",
            ),
        );
    }
    Ok(Store::open_location(&location)?)
}

/// The attempt the flags name (the job's latest by default), with everything kept
/// about it.
pub fn load(args: &RecordArgs) -> Result<JobRecord, Failure> {
    let store = open_store(args)?;
    let job_id = args
        .job_id
        .clone()
        .unwrap_or_else(|| DEFAULT_JOB_ID.to_owned());
    let attempt = match args.attempt {
        Some(0) => {
            return Err(
                Failure::usage("`--attempt 0` is out of range; attempts count from 1")
                    .with_hint("leave out `--attempt` for the latest one"),
            );
        }
        Some(attempt) => attempt,
        None => store.latest_attempt(&job_id)?.ok_or_else(|| {
            Failure::usage(format!("the store has no attempt of job `{job_id}`"))
                .with_hint("name the job with `--job ID` (GPUVET_JOB_ID); `gpuvet events` lists the jobs it has")
        })?,
    };
    store.job_record(&job_id, attempt)?.ok_or_else(|| {
        Failure::usage(format!(
            "the store has no report or event of attempt {attempt} of job `{job_id}`"
        ))
        .with_hint("leave out `--attempt` for the latest one")
    })
}
