//! `gpuvet bundle --job ID -o FILE.tar.gz`: one attempt packed for the team that owns
//! its fault, from the store, or downloaded from a fleet server with `--server`.

use gpuvet_analysis::explain::Explanation;
use gpuvet_model::exit_codes;
use gpuvet_model::time::unix_now_ms;

use crate::cli::BundleArgs;
use crate::failure::Failure;
use crate::{bundle, output, record};

pub fn bundle(args: BundleArgs) -> Result<i32, Failure> {
    let (what, info, explanation) = match record::server(&args.record)? {
        Some(server) => {
            let got = bundle::download(
                &server,
                &record::job_id(&args.record),
                record::attempt(&args.record)?,
                &args.output,
            )?;
            let what = format!("downloaded {} bytes from the server", got.bytes);
            (what, got.info, got.explanation)
        }
        None => {
            let record = record::load(&args.record)?;
            let packed = bundle::write(&record, &args.output, unix_now_ms())?;
            let what = format!("{} files, {} bytes", packed.files, packed.bytes);
            (what, packed.info, packed.explanation)
        }
    };
    output::stderr(&format!(
        "wrote `{}`: job `{}` attempt {}, {what}, {}; hand to {}\n",
        args.output.display(),
        info.job_id,
        info.attempt,
        first_error(&explanation),
        explanation.team
    ));
    for note in &info.trimmed {
        output::stderr(&format!("note: {note}\n"));
    }
    Ok(exit_codes::SUCCESS)
}

fn first_error(explanation: &Explanation) -> String {
    explanation.first_error.as_ref().map_or_else(
        || "no error".to_owned(),
        |f| format!("first error on `{}`", f.node),
    )
}
