//! `gpuvet explain BUNDLE | --job ID`: the first error of an attempt, its lane and
//! team, the next step, and a conclusion for each hypothesis. A bundle and the store
//! it was made from give the same answer: both go through the same pure functions.

use gpuvet_core::exit_codes;
use gpuvet_core::explain::{explain as explain_record, render};
use gpuvet_core::timeline::{JobRecord, assemble};

use crate::cli::ExplainArgs;
use crate::failure::Failure;
use crate::{output, record};

pub fn explain(args: ExplainArgs) -> Result<i32, Failure> {
    let record: JobRecord = match &args.bundle {
        Some(path) => crate::bundle::open(path)?,
        None => record::load(&args.record)?,
    };
    let timeline = assemble(&record);
    let explanation = explain_record(&record, &timeline);
    let text = if args.json {
        let mut text =
            serde_json::to_string_pretty(&explanation).expect("an explanation serializes");
        text.push('\n');
        text
    } else {
        render(&explanation)
    };
    output::stdout(&text).map(|()| exit_codes::SUCCESS)
}
