//! `gpuvet events`: deployment events from the store, oldest first.

use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use gpuvet_model::events::EventKind;
use gpuvet_model::exit_codes;
use gpuvet_model::time::format_utc_ms;
use gpuvet_store::{EventFilter, Store};

use crate::cli::EventsArgs;
use crate::failure::Failure;
use crate::identity::{load_config, store_path};
use crate::output;

pub fn events(args: EventsArgs) -> Result<i32, Failure> {
    let kind = args
        .kind
        .as_deref()
        .map(|name| {
            name.parse::<EventKind>()
                .map_err(|message| Failure::usage(format!("`--type`: {message}")))
        })
        .transpose()?;
    let store = open_existing(args.config.as_deref(), args.store.store.as_deref())?;
    let filter = EventFilter {
        job_id: args.job_id,
        attempt: args.attempt,
        kind,
        node: args.node,
        ..EventFilter::default()
    };
    let events = store.events(&filter)?;
    if args.json {
        let mut text = serde_json::to_string_pretty(&events).expect("events serialize");
        text.push('\n');
        return output::stdout(&text).map(|()| exit_codes::SUCCESS);
    }
    if events.is_empty() {
        output::stderr("no events match\n");
        return Ok(exit_codes::SUCCESS);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "time (UTC)",
        "job",
        "attempt",
        "node",
        "type",
        "lane",
        "message",
    ]);
    for event in &events {
        table.add_row([
            format_utc_ms(event.event.time_ms),
            event.attempt.job_id.clone(),
            event.attempt.attempt.to_string(),
            event.attempt.node.clone(),
            event.event.kind.to_string(),
            event
                .event
                .lane
                .map(|l| l.to_string())
                .unwrap_or_else(|| "-".into()),
            event.event.message.clone(),
        ]);
    }
    output::stdout(&format!("{table}\n")).map(|()| exit_codes::SUCCESS)
}

/// Opens the store for reading; a store that does not exist yet is a usage error, not
/// an empty result, so a wrong path is noticed.
pub fn open_existing(
    config: Option<&std::path::Path>,
    flag: Option<&std::path::Path>,
) -> Result<Store, Failure> {
    let config = load_config(config)?;
    let path = store_path(flag, &config);
    if !path.exists() {
        return Err(Failure::usage(format!("there is no store at `{}`", path.display()))
            .with_hint("run `gpuvet check` or `gpuvet run` first, or point `--store` / GPUVET_STORE at the store they wrote"));
    }
    Ok(Store::open(&path)?)
}
