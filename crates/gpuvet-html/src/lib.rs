//! gpuvet's HTML report: one run as a self-contained page (inline CSS and SVG, no
//! script, nothing fetched), with a header, the verdict of a failed run, the group,
//! the findings folded (one row per slow node or per check and node, every entity
//! kept in a collapsed list) with their lanes, and one panel per check with its
//! status, duration, values and chart.
//!
//! Pure functions from a [`RunReport`] to HTML text. `gpuvet check --html` writes
//! [`page`]; the web UI reuses [`verdict_block`], [`check_panel`], [`findings_table`]
//! and [`STYLESHEET`] inside its own templates. Every string that comes from the report
//! (node names, messages, parameters) goes through [`escape`].
//!
//! [`site`] holds the pages of `gpuvet serve` (instances, one instance, events, errors),
//! built on the same pieces and the same stylesheet: pure functions too, with their
//! links in [`site::href`].

pub mod chart;
mod findings;
pub mod site;
mod verdict;

pub use findings::{degraded_table, findings_table};
pub use verdict::verdict_block;

use gpuvet_analysis::diagnose::rank_name;
use gpuvet_analysis::render::value_summary;
use gpuvet_model::catalog::Direction;
use gpuvet_model::node_list::{MAX_PARTS, fold_node_names};
use gpuvet_model::repeats::group_repeats;
use gpuvet_model::results::{CheckResult, Entity, GroupIncident, GroupSummary, RunReport, Verdict};
use gpuvet_model::time::format_utc_ms;

/// The page's styles, inlined into its `<head>`.
pub const STYLESHEET: &str = include_str!("style.css");

/// The most node names the group section shows before folding them away.
const SHOWN_NODES: usize = 16;

/// `text` safe inside HTML elements and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole report as one HTML document.
pub fn page(report: &RunReport) -> String {
    let mut out =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str(&format!(
        "<title>gpuvet {}: job {} attempt {} on {}</title>\n<style>\n{STYLESHEET}</style>\n</head>\n<body>\n",
        report.outcome.as_str(),
        escape(&report.job_id),
        report.attempt,
        escape(&report.node)
    ));
    out.push_str(&header(report));
    if let Some(diagnosis) = &report.diagnosis {
        out.push_str(&verdict_block(diagnosis));
    }
    if let Some(group) = &report.group {
        out.push_str(&group_section(group));
    }
    out.push_str(&findings_table(report));
    out.push_str(&degraded_table(report));
    out.push_str("<section id=\"checks\">\n<h2>Checks</h2>\n");
    for check in &report.checks {
        out.push_str(&check_panel(check));
    }
    out.push_str(&format!(
        "</section>\n<footer>gpuvet {} &middot; a static report: nothing on this page is fetched</footer>\n</body>\n</html>\n",
        escape(&report.gpuvet_version)
    ));
    out
}

fn header(report: &RunReport) -> String {
    let outcome = report.outcome.as_str();
    let mut out = format!(
        "<header>\n<h1>gpuvet <span class=\"status {outcome}\">{outcome}</span></h1>\n<p class=\"summary\">{}</p>\n<dl class=\"facts\">\n",
        escape(&report.summary())
    );
    let facts = [
        ("job", report.job_id.clone()),
        ("attempt", report.attempt.to_string()),
        ("node", report.node.clone()),
        ("instance", report.instance.clone()),
        ("backend", report.backend.clone()),
        ("devices", devices(report)),
        ("started", format_utc_ms(report.started_at_ms)),
        (
            "duration",
            format!(
                "{:.1} s of a {:.0} s timeout",
                report.duration_secs, report.timeout_secs
            ),
        ),
    ];
    for (name, value) in facts {
        out.push_str(&format!("<dt>{name}</dt><dd>{}</dd>\n", escape(&value)));
    }
    out.push_str("</dl>\n</header>\n");
    out
}

/// `8 × NVIDIA H200`, one part per distinct device name.
fn devices(report: &RunReport) -> String {
    if report.devices.is_empty() {
        return "none".to_owned();
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for device in &report.devices {
        match counts.iter_mut().find(|(name, _)| *name == device.name) {
            Some((_, n)) => *n += 1,
            None => counts.push((&device.name, 1)),
        }
    }
    counts
        .iter()
        .map(|(name, n)| format!("{n} × {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn group_section(group: &GroupSummary) -> String {
    let mut out = format!(
        "<section id=\"group\">\n<h2>Group of {} nodes</h2>\n",
        group.node_count()
    );
    let names: Vec<String> = group.nodes.iter().map(|n| escape(n)).collect();
    if group.size.is_some() {
        out.push_str(&format!(
            "<p class=\"nodes\">named by the findings: {}; the coordinator's report lists every node</p>\n",
            names.join(", ")
        ));
    } else if names.len() <= SHOWN_NODES {
        out.push_str(&format!("<p class=\"nodes\">{}</p>\n", names.join(", ")));
    } else {
        // A thousand names are there to search, not to read: folded, in one paragraph,
        // under the line the terminal report prints (`node-[0-1023]`).
        out.push_str(&format!(
            "<details><summary>{} (all {} names)</summary><p class=\"nodes\">{}</p></details>\n",
            escape(&fold_node_names(&group.nodes, MAX_PARTS)),
            names.len(),
            names.join(", ")
        ));
    }
    if let Some(first) = &group.first_error {
        out.push_str(&format!(
            "<p class=\"first-error\"><strong>first error</strong>: {}</p>\n",
            incident_text(first)
        ));
    }
    // Ranks that only waited on the first error, and later failures, mostly say the
    // same: each said once, with the ranks that said it.
    let secondary: Vec<(String, String)> = group
        .secondary
        .iter()
        .map(|i| (rank_name(i), format!("{}: {}", i.kind.words(), i.detail)))
        .collect();
    let mut notes: Vec<String> = group_repeats(&secondary, group.node_count())
        .into_iter()
        .map(|line| format!("followed: {}", escape(&line)))
        .collect();
    // A later failure of one rank reads as the first error does; one that several
    // ranks share is said once, with their names.
    let mut others: Vec<(String, Vec<&GroupIncident>)> = Vec::new();
    for incident in &group.other_failures {
        let said = format!(
            "{} <span class=\"lane\">{}</span>: {}",
            escape(incident.kind.words()),
            incident.lane,
            escape(&incident.detail)
        );
        match others.iter_mut().find(|(text, _)| *text == said) {
            Some((_, ranks)) => ranks.push(incident),
            None => others.push((said, vec![incident])),
        }
    }
    for (said, ranks) in others {
        let line = match ranks.as_slice() {
            [one] => incident_text(one),
            _ => {
                let items: Vec<(String, &str)> = ranks
                    .iter()
                    .map(|i| (escape(&rank_name(i)), said.as_str()))
                    .collect();
                group_repeats(&items, group.node_count()).concat()
            }
        };
        notes.push(format!("also: {line}"));
    }
    if !notes.is_empty() {
        out.push_str(&format!(
            "<ul class=\"incidents\"><li>{}</li></ul>\n",
            notes.join("</li><li>")
        ));
    }
    out.push_str("</section>\n");
    out
}

/// `rank 1 (n1) never joined <lane>platform</lane>: …`, as HTML.
fn incident_text(incident: &GroupIncident) -> String {
    format!(
        "{} {} <span class=\"lane\">{}</span>: {}",
        escape(&rank_name(incident)),
        escape(incident.kind.words()),
        incident.lane,
        escape(&incident.detail)
    )
}

pub(crate) fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Ok => "ok",
        Verdict::Slow => "slow",
        Verdict::Faulty => "faulty",
        Verdict::Skipped => "skipped",
        Verdict::Degraded => "degraded",
    }
}

/// One check's panel: status, duration, values, parameters, its entities in counts,
/// and its chart.
pub fn check_panel(check: &CheckResult) -> String {
    let name = check.name.as_str();
    let status = check.status.as_str();
    let mut out = format!(
        "<article class=\"panel {status}\" id=\"check-{name}\">\n<h3>{name} <span class=\"status {status}\">{}</span> <span class=\"duration\">{:.1} s</span></h3>\n",
        status.replace('_', " "),
        check.duration_secs
    );
    let direction = match check.metric.direction {
        Direction::HigherIsBetter => "higher is better",
        Direction::LowerIsBetter => "lower is better",
    };
    out.push_str(&format!(
        "<p class=\"metric\">{} ({}, {direction}): {}</p>\n",
        escape(&check.metric.name),
        escape(&check.metric.unit),
        escape(&value_summary(check))
    ));
    if let Some(reason) = &check.reason {
        out.push_str(&format!("<p class=\"reason\">{}</p>\n", escape(reason)));
    }
    if !check.entities.is_empty() {
        out.push_str(&format!(
            "<p class=\"counts\">{}</p>\n",
            escape(&entity_counts(check))
        ));
    }
    if !check.params.is_empty() {
        let params: Vec<String> = check
            .params
            .iter()
            .map(|(k, v)| format!("<code>{}={}</code>", escape(k), escape(v)))
            .collect();
        out.push_str(&format!("<p class=\"params\">{}</p>\n", params.join(" ")));
    }
    if let Some(svg) = chart::svg(check) {
        out.push_str(&svg);
        out.push('\n');
    }
    out.push_str("</article>\n");
    out
}

/// `8192 GPUs on 1024 nodes: 8190 ok, 1 slow, 1 faulty`.
fn entity_counts(check: &CheckResult) -> String {
    let mut nodes: Vec<&str> = check
        .entities
        .iter()
        .flat_map(|e| match &e.entity {
            Entity::NodePair { a, b } => vec![a.as_str(), b.as_str()],
            entity => vec![entity.node()],
        })
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let kind = match check.entities.first().map(|e| &e.entity) {
        Some(Entity::Device { .. }) => "GPUs",
        Some(Entity::NodePair { .. }) => "pairs",
        _ => "nodes",
    };
    let mut text = format!("{} {kind}", check.entities.len());
    if kind != "nodes" {
        let plural = if nodes.len() == 1 { "" } else { "s" };
        text.push_str(&format!(" on {} node{plural}", nodes.len()));
    }
    let counts: Vec<String> = [
        Verdict::Ok,
        Verdict::Slow,
        Verdict::Faulty,
        Verdict::Skipped,
    ]
    .into_iter()
    .filter_map(|verdict| {
        let n = check
            .entities
            .iter()
            .filter(|e| e.verdict == verdict)
            .count();
        (n > 0).then(|| format!("{n} {}", verdict_name(verdict)))
    })
    .collect();
    format!("{text}: {}", counts.join(", "))
}
