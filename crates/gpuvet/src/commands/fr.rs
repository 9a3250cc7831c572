//! `gpuvet fr DUMP_DIR`: read PyTorch flight-recorder dumps (one per rank, pickle or
//! JSON) and name the rank that stopped a collective, and the ranks that only waited.

use gpuvet_core::exit_codes;
use gpuvet_watch::flight_recorder::{FrError, analyze_dir, summary};

use crate::cli::FrArgs;
use crate::failure::Failure;
use crate::output;

pub fn fr(args: FrArgs) -> Result<i32, Failure> {
    let report = analyze_dir(&args.dump_dir).map_err(|err| {
        let hint = match err {
            FrError::TooLarge { .. } => {
                "a PyTorch dump holds `TORCH_NCCL_TRACE_BUFFER_SIZE` entries (2,000 by default) and is a few MiB; this file is not one, or the buffer was set far larger"
            }
            _ => {
                "pass the directory holding the dumps (`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` prefix + rank, e.g. `nccl_trace_rank_0`)"
            }
        };
        Failure::usage(err).with_hint(hint)
    })?;
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
