//! `gpuvet timeline`: one attempt's timeline from the store (or a fleet server, with
//! `--server`), on the coordinator's clock, with the first error marked.

use gpuvet_analysis::timeline::{assemble, render};
use gpuvet_model::exit_codes;

use crate::cli::TimelineArgs;
use crate::failure::Failure;
use crate::{output, record};

pub fn timeline(args: TimelineArgs) -> Result<i32, Failure> {
    let timeline = match record::server(&args.record)? {
        Some(server) => server
            .timeline(
                &record::job_id(&args.record),
                record::attempt(&args.record)?,
            )
            .map_err(record::fetch_failed)?,
        None => assemble(&record::load(&args.record)?),
    };
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&timeline).expect("a timeline serializes");
        text.push('\n');
        text
    } else {
        render(&timeline)
    };
    output::stdout(&text).map(|()| exit_codes::SUCCESS)
}
