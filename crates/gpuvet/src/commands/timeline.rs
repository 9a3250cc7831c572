//! `gpuvet timeline`: one attempt's timeline from the store, on the coordinator's
//! clock, with the first error marked.

use gpuvet_core::exit_codes;
use gpuvet_core::timeline::{assemble, render};

use crate::cli::TimelineArgs;
use crate::failure::Failure;
use crate::{output, record};

pub fn timeline(args: TimelineArgs) -> Result<i32, Failure> {
    let record = record::load(&args.record)?;
    let timeline = assemble(&record);
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&timeline).expect("a timeline serializes");
        text.push('\n');
        text
    } else {
        render(&timeline)
    };
    output::stdout(&text).map(|()| exit_codes::SUCCESS)
}
