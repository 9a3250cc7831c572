//! `gpuvet checks`: the check catalog.

use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use gpuvet_model::catalog::{CATALOG, DEFAULT_CHECKS};
use gpuvet_model::exit_codes;
use serde_json::json;

use crate::cli::CatalogArgs;
use crate::failure::Failure;
use crate::output;

pub fn catalog(args: CatalogArgs) -> Result<i32, Failure> {
    if args.json {
        let checks: Vec<_> = CATALOG
            .iter()
            .map(|spec| {
                json!({
                    "name": spec.name,
                    "scope": spec.scope,
                    "metric": spec.metric,
                    "lane": spec.lane,
                    "pai_estimate_secs": spec.pai_estimate_secs,
                    "default": DEFAULT_CHECKS.contains(&spec.name),
                    "description": spec.description,
                })
            })
            .collect();
        let mut text = serde_json::to_string_pretty(&checks).expect("the catalog serializes");
        text.push('\n');
        return output::stdout(&text).map(|()| exit_codes::SUCCESS);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "check",
        "scope",
        "metric",
        "lane",
        "PAI estimate",
        "what it measures",
    ]);
    for spec in &CATALOG {
        let default = if DEFAULT_CHECKS.contains(&spec.name) {
            " (default)"
        } else {
            ""
        };
        table.add_row([
            format!("{}{default}", spec.name),
            format!("{:?}", spec.scope),
            format!("{} ({})", spec.metric.name, spec.metric.unit),
            spec.lane.to_string(),
            spec.pai_estimate_secs.map_or_else(
                || "beyond PAI".to_owned(),
                |secs| format!("{} min", secs / 60),
            ),
            spec.description.to_owned(),
        ]);
    }
    output::stdout(&format!("{table}\nruntime check: c4d\n")).map(|()| exit_codes::SUCCESS)
}
