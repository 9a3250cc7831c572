//! One attempt of a job as the store keeps it, for `timeline`, `bundle` and `explain`:
//! which job and attempt the flags mean, and every report and event of it; or, with
//! `--server`, the reader of a fleet server that holds it.

use gpuvet_model::env_vars::READ_TOKEN;
use gpuvet_model::record::JobRecord;
use gpuvet_push::PushError;
use gpuvet_push::fetch::ServerReader;
use gpuvet_store::{Store, StoreError, StoreLocation};

use crate::cli::RecordArgs;
use crate::failure::Failure;
use crate::identity::{DEFAULT_JOB_ID, load_config, store_path};

/// Opens the store the flags name; an SQLite file must exist already, so a wrong path
/// is noticed instead of read as empty.
pub fn open_store(args: &RecordArgs) -> Result<Store, Failure> {
    let config = load_config(args.config.as_deref())?;
    open_existing(args.store.as_deref(), &config)
}

/// Opens the store `flag` names, else the config's, for reading; it must exist.
pub fn open_existing(
    flag: Option<&str>,
    config: &gpuvet_model::config::Config,
) -> Result<Store, Failure> {
    let location = match flag {
        Some(value) => StoreLocation::parse(value),
        None => StoreLocation::parse(&store_path(None, config).to_string_lossy()),
    };
    match &location {
        // A node reads a fleet's PostgreSQL store through its server, never with a
        // driver of its own (whatever the store library was built with).
        StoreLocation::Postgres(_) => Err(StoreError::PostgresNotBuilt {
            location: location.to_string(),
        }
        .into()),
        StoreLocation::Sqlite(path) if !path.exists() => Err(Failure::usage(format!(
            "there is no store at `{}`",
            path.display()
        ))
        .with_hint(
            "run `gpuvet check` or `gpuvet run` first, or point `--store` / GPUVET_STORE at the store they wrote",
        )),
        StoreLocation::Sqlite(_) => Ok(Store::open_location(&location)?),
    }
}

/// The job the flags name.
pub fn job_id(args: &RecordArgs) -> String {
    args.job_id
        .clone()
        .unwrap_or_else(|| DEFAULT_JOB_ID.to_owned())
}

/// The attempt the flags name; `None` for the latest.
pub fn attempt(args: &RecordArgs) -> Result<Option<u32>, Failure> {
    match args.attempt {
        Some(0) => Err(
            Failure::usage("`--attempt 0` is out of range; attempts count from 1")
                .with_hint("leave out `--attempt` for the latest one"),
        ),
        attempt => Ok(attempt),
    }
}

/// The reader of the fleet server `--server` names, with its read token when set and,
/// for `https://`, the CAs `gpuvet.report_ca` (or `GPUVET_REPORT_CA`) names.
pub fn server(args: &RecordArgs) -> Result<Option<ServerReader>, Failure> {
    server_reader(
        args.server.as_deref(),
        &load_config(args.config.as_deref())?,
    )
}

/// The reader of the fleet server at `url`, as [`server`] makes it.
pub fn server_reader(
    url: Option<&str>,
    config: &gpuvet_model::config::Config,
) -> Result<Option<ServerReader>, Failure> {
    let Some(url) = url.filter(|url| !url.is_empty()) else {
        return Ok(None);
    };
    let token = std::env::var(READ_TOKEN).ok();
    let trust = crate::push::trust(config);
    if let Some(warning) = crate::push::cleartext_warning(url).filter(|_| token.is_some()) {
        crate::failure::warn(warning);
    }
    ServerReader::new(url, token.as_deref())
        .with_trust(&trust)
        .map(Some)
        .map_err(|error| Failure::new(gpuvet_model::exit_codes::USAGE, error))
}

/// A failed read from the server: the user's (a wrong address, a job the server does
/// not have) or the server's, with its hint.
pub fn fetch_failed(error: PushError) -> Failure {
    let code = match &error {
        PushError::Refused { status, .. } if *status >= 500 => {
            gpuvet_model::exit_codes::STORE_ERROR
        }
        PushError::Write { .. } => gpuvet_model::exit_codes::IO_ERROR,
        _ => gpuvet_model::exit_codes::USAGE,
    };
    Failure::new(code, error)
}

/// The attempt the flags name (the job's latest by default), with everything kept
/// about it.
pub fn load(args: &RecordArgs) -> Result<JobRecord, Failure> {
    let store = open_store(args)?;
    let job_id = job_id(args);
    let attempt = match attempt(args)? {
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
