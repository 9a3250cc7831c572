//! `gpuvet bundle --job ID -o FILE.tar.gz`: one attempt packed for the team that owns
//! its fault.

use gpuvet_core::exit_codes;
use gpuvet_core::time::unix_now_ms;

use crate::cli::BundleArgs;
use crate::failure::Failure;
use crate::{bundle, output, record};

pub fn bundle(args: BundleArgs) -> Result<i32, Failure> {
    let record = record::load(&args.record)?;
    let packed = bundle::write(&record, &args.output, unix_now_ms())?;
    let first = packed.explanation.first_error.as_ref().map_or_else(
        || "no error".to_owned(),
        |f| format!("first error on `{}`", f.node),
    );
    output::stderr(&format!(
        "wrote `{}`: job `{}` attempt {}, {} files, {} bytes, {first}; hand to {}\n",
        args.output.display(),
        record.job_id,
        record.attempt,
        packed.files,
        packed.bytes,
        packed.explanation.team
    ));
    for note in &packed.info.trimmed {
        output::stderr(&format!("note: {note}\n"));
    }
    Ok(exit_codes::SUCCESS)
}
