//! `gpuvet explain BUNDLE | --job ID`: the first error of an attempt, its lane and
//! team, the next step, and a conclusion for each hypothesis. A bundle, the store it
//! was made from and the fleet server that holds it (`--server`) give the same answer:
//! all go through the same pure functions.

use gpuvet_analysis::explain::{explain as explain_record, render};
use gpuvet_analysis::timeline::assemble;
use gpuvet_model::exit_codes;
use gpuvet_model::record::JobRecord;

use crate::cli::ExplainArgs;
use crate::failure::Failure;
use crate::{output, record};

pub fn explain(args: ExplainArgs) -> Result<i32, Failure> {
    let server = record::server(&args.record)?.filter(|_| args.bundle.is_none());
    let explanation = match server {
        Some(server) => server
            .explanation(
                &record::job_id(&args.record),
                record::attempt(&args.record)?,
            )
            .map_err(record::fetch_failed)?,
        None => {
            let record: JobRecord = match &args.bundle {
                Some(path) => crate::bundle::open(path)?,
                None => record::load(&args.record)?,
            };
            explain_record(&record, &assemble(&record))
        }
    };
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
