//! The instance page (`/instances/{job}/{node}`, `?attempt=N` for an older attempt):
//! who and where, the latest run's status and times, the verdict of a failed run, its
//! findings folded and one panel per check (the static report's own
//! [`verdict_block`], [`findings_table`] and [`check_panel`], whose charts fold a
//! 1,024-node check into a bounded profile), links to the static report and to its
//! attempt's timeline and bundle, the instance's runs and its events. While the node
//! has no report yet or its run goes on, the page is live:
//! [`live`](crate::site::live) reloads it when a new run arrives.

use gpuvet_model::events::Event;
use gpuvet_model::overview::{InstanceSummary, RunSummary};
use gpuvet_model::results::RunReport;
use gpuvet_model::slurm::SlurmNames;

use crate::site::events::events_table;
use crate::site::layout::{Section, document};
use crate::site::live::refresh_script;
use crate::site::timeline::{bundle_link, timeline_link};
use crate::site::{href, when};
use crate::{check_panel, escape, findings_table, group_section, verdict_block};

/// The most earlier attempts linked from the header.
const LINKED_ATTEMPTS: u32 = 8;

/// The page of one instance in one attempt. `report` is its latest run's report, when
/// it has one; `history` its runs (newest first, as the server lists them); `events`
/// the instance's events. `live` adds the refresh script.
pub fn instance_page(
    instance: &InstanceSummary,
    report: Option<&RunReport>,
    history: &[RunSummary],
    events: &[Event],
    live: bool,
) -> String {
    let who = &instance.attempt;
    let status = instance.status();
    let mut body = format!(
        "<header class=\"instance\" data-node=\"{}\" data-status=\"{status}\">\n<h1>{} <span class=\"status {status}\">{status}</span></h1>\n",
        escape(&who.node),
        escape(&who.node),
    );
    if let Some(report) = report {
        body.push_str(&format!(
            "<p class=\"summary\">{}</p>\n",
            escape(&report.summary())
        ));
    }
    body.push_str(&facts(instance, slurm_names(report, events)));
    body.push_str(&attempts(instance));
    body.push_str(&links(instance));
    body.push_str("</header>\n");
    if live {
        body.push_str("<p class=\"live\">Live: this page reloads when a new run arrives.</p>\n");
        body.push_str(&refresh_script(instance));
    }
    match report {
        Some(report) => {
            if let Some(diagnosis) = &report.diagnosis {
                body.push_str(&verdict_block(diagnosis));
            }
            if let Some(group) = &report.group {
                body.push_str(&group_section(group));
            }
            body.push_str(&findings_table(report));
            body.push_str("<section id=\"checks\">\n<h2>Checks</h2>\n");
            for check in &report.checks {
                body.push_str(&check_panel(check));
            }
            body.push_str("</section>\n");
        }
        None => body.push_str(&format!(
            "<p class=\"no-report\">{}</p>\n",
            if instance.latest_run.is_some() {
                "The report of this run is not stored."
            } else {
                "No report yet: the sanity checks are still running, or the node never reported."
            }
        )),
    }
    body.push_str(&history_table(instance, history));
    body.push_str(&format!(
        "<section id=\"events\">\n<h2>Events ({})</h2>\n",
        events.len()
    ));
    if events.is_empty() {
        body.push_str("<p class=\"empty\">No event of this instance.</p>\n");
    } else {
        body.push_str(&events_table(events));
    }
    body.push_str("</section>\n");
    let title = format!(
        "gpuvet: {} {status} (job {}, attempt {})",
        who.node, who.job_id, who.attempt
    );
    document(&title, Some(Section::Instances), &body)
}

/// Slurm's job, step and node of the instance: its report's, else its latest event's
/// that has them.
fn slurm_names(report: Option<&RunReport>, events: &[Event]) -> Option<SlurmNames> {
    report
        .and_then(|r| r.context.as_ref())
        .and_then(|c| c.slurm.clone())
        .or_else(|| {
            events
                .iter()
                .find_map(|e| SlurmNames::from_details(&e.event.details))
        })
}

fn facts(instance: &InstanceSummary, slurm: Option<SlurmNames>) -> String {
    let who = &instance.attempt;
    let mut facts = vec![
        (
            "job",
            format!(
                "<a href=\"{}\">{}</a>",
                escape(&href::instances(Some(&who.job_id))),
                escape(&who.job_id)
            ),
        ),
        ("attempt", who.attempt.to_string()),
        ("node", escape(&who.node)),
        ("instance", escape(&who.instance)),
        ("attempt started", when::utc(instance.attempt_started_at_ms)),
    ];
    if let Some(run) = &instance.latest_run {
        facts.push(("run started", when::utc(run.started_at_ms)));
        facts.push((
            "duration",
            run.duration_secs
                .map_or_else(|| "unknown".to_owned(), |secs| format!("{secs:.1} s")),
        ));
        facts.push(("backend", escape(&run.backend)));
    }
    if let Some(names) = slurm {
        facts.push(("slurm", escape(&names.describe())));
    }
    let mut out = String::from("<dl class=\"facts\">\n");
    for (name, value) in facts {
        out.push_str(&format!("<dt>{name}</dt><dd>{value}</dd>\n"));
    }
    out.push_str("</dl>\n");
    out
}

/// Links to the last few earlier attempts and to the latest one.
fn attempts(instance: &InstanceSummary) -> String {
    let who = &instance.attempt;
    if who.attempt <= 1 {
        return String::new();
    }
    let first = who.attempt.saturating_sub(LINKED_ATTEMPTS).max(1);
    let earlier: Vec<String> = (first..who.attempt)
        .map(|n| {
            format!(
                "<a href=\"{}\">{n}</a>",
                escape(&href::instance(&who.job_id, &who.node, Some(n)))
            )
        })
        .collect();
    format!(
        "<p class=\"attempts\">earlier attempts: {}; <a href=\"{}\">latest attempt</a></p>\n",
        earlier.join(", "),
        escape(&href::instance(&who.job_id, &who.node, None))
    )
}

fn links(instance: &InstanceSummary) -> String {
    let who = &instance.attempt;
    let mut links = Vec::new();
    if let Some(run) = &instance.latest_run {
        links.push(format!(
            "<a class=\"report\" href=\"{}\">static report</a>",
            escape(&href::report(run.run_id))
        ));
    }
    links.push(timeline_link(&who.job_id, who.attempt));
    links.push(bundle_link(&who.job_id, who.attempt));
    links.push(format!(
        "<a href=\"{}\">all events of this node</a>",
        escape(&href::events(None, Some(&who.job_id), Some(&who.node)))
    ));
    links.push(format!(
        "<a href=\"{}\">JSON</a>",
        escape(&href::instance_api(&who.job_id, &who.node))
    ));
    format!("<p class=\"links\">{}</p>\n", links.join(" · "))
}

/// The instance's runs, the current one marked.
fn history_table(instance: &InstanceSummary, history: &[RunSummary]) -> String {
    let mut out = format!(
        "<section id=\"history\">\n<h2>Runs ({})</h2>\n",
        history.len()
    );
    if history.is_empty() {
        out.push_str("<p class=\"empty\">No run stored yet.</p>\n</section>\n");
        return out;
    }
    out.push_str("<table class=\"history\">\n<thead><tr><th>run</th><th>started (UTC)</th><th>outcome</th><th>backend</th><th>duration</th><th>checks</th><th>failed</th><th>findings</th></tr></thead>\n<tbody>\n");
    let current = instance.latest_run.as_ref().map(|run| run.run_id);
    for run in history {
        let outcome = run.outcome.as_str();
        let class = if Some(run.run_id) == current {
            " class=\"current\""
        } else {
            ""
        };
        out.push_str(&format!(
            "<tr{class} data-run-id=\"{id}\"><td><a href=\"{}\">#{id}</a></td><td>{}</td><td><span class=\"status {outcome}\">{outcome}</span></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&href::report(run.run_id)),
            when::utc(run.started_at_ms),
            escape(&run.backend),
            run.duration_secs
                .map_or_else(|| "-".to_owned(), |secs| format!("{secs:.1} s")),
            run.checks,
            run.failed_checks,
            run.findings,
            id = run.run_id,
        ));
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::test_data::{
        HOSTILE_JOB, HOSTILE_NODE, assert_no_markup_from, event, instance, run,
    };
    use gpuvet_model::events::EventKind;
    use gpuvet_model::results::Outcome;

    #[test]
    fn a_running_instance_without_a_report_says_so_and_is_live() {
        let running = instance("job-7", "node-3", None);
        let html = instance_page(&running, None, &[], &[], true);
        assert!(
            html.contains("<h1>node-3 <span class=\"status running\">running</span></h1>"),
            "{html}"
        );
        assert!(html.contains("No report yet"), "{html}");
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        assert!(
            html.contains("data-api=\"/api/v1/jobs/job-7/instances/node-3\""),
            "{html}"
        );
        assert!(
            !html.contains("static report"),
            "no run, no report link: {html}"
        );
        assert!(html.contains("<a href=\"/\" aria-current=\"page\">Instances</a>"));
        assert!(
            html.contains("<title>gpuvet: node-3 running (job job-7, attempt 2)</title>"),
            "{html}"
        );
    }

    #[test]
    fn a_finished_instance_is_not_live_and_links_its_report_events_and_json() {
        let done = instance("job-7", "node-3", Some(Outcome::Passed));
        let html = instance_page(&done, None, &[run(1, Outcome::Passed)], &[], false);
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("<a class=\"report\" href=\"/reports/1.html\">static report</a>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<a href=\"/events?job=job-7&amp;node=node-3\">all events of this node</a>"
            ),
            "{html}"
        );
        assert!(html.contains("<a href=\"/api/v1/jobs/job-7/instances/node-3\">JSON</a>"));
        assert!(
            html.contains("<a class=\"timeline\" href=\"/jobs/job-7/timeline?attempt=2\">Timeline</a> · <a class=\"bundle\" href=\"/api/v1/jobs/job-7/bundle?attempt=2\" download>Download bundle</a>"),
            "{html}"
        );
        assert!(
            html.contains("<dt>job</dt><dd><a href=\"/instances?job=job-7\">job-7</a></dd>"),
            "{html}"
        );
        assert!(html.contains("<dt>duration</dt><dd>12.5 s</dd>"), "{html}");
        assert!(html.contains("The report of this run is not stored."));
    }

    #[test]
    fn the_history_lists_every_run_with_the_current_one_marked() {
        let current = instance("job-7", "node-3", Some(Outcome::Failed));
        let history = [run(1, Outcome::Failed), run(0, Outcome::Passed)];
        let html = instance_page(&current, None, &history, &[], false);
        assert!(html.contains("<h2>Runs (2)</h2>"), "{html}");
        assert!(html.contains("<tr class=\"current\" data-run-id=\"1\"><td><a href=\"/reports/1.html\">#1</a></td>"), "{html}");
        assert!(
            html.contains("<tr data-run-id=\"0\"><td><a href=\"/reports/0.html\">#0</a></td>"),
            "{html}"
        );
        assert!(html.contains("<td><span class=\"status passed\">passed</span></td><td>sim</td><td>12.5 s</td><td>3</td><td>0</td><td>0</td>"), "{html}");
        let none = instance_page(&current, None, &[], &[], false);
        assert!(none.contains("No run stored yet."));
    }

    #[test]
    fn earlier_attempts_are_linked_and_the_first_attempt_has_none() {
        let mut later = instance("job-7", "node-3", None);
        later.attempt.attempt = 3;
        let html = instance_page(&later, None, &[], &[], false);
        assert!(html.contains("earlier attempts: <a href=\"/instances/job-7/node-3?attempt=1\">1</a>, <a href=\"/instances/job-7/node-3?attempt=2\">2</a>; <a href=\"/instances/job-7/node-3\">latest attempt</a>"), "{html}");
        later.attempt.attempt = 20;
        let html = instance_page(&later, None, &[], &[], false);
        assert_eq!(
            html.matches("/instances/job-7/node-3?attempt=").count(),
            LINKED_ATTEMPTS as usize
        );
        later.attempt.attempt = 1;
        let html = instance_page(&later, None, &[], &[], false);
        assert!(!html.contains("earlier attempts"), "{html}");
    }

    #[test]
    fn the_instance_events_are_listed() {
        let done = instance("job-7", "node-3", Some(Outcome::Passed));
        let events = [
            event(2, EventKind::SanityCheckSucceeded, "job-7", 2, "node-3"),
            event(1, EventKind::InstanceStarted, "job-7", 2, "node-3"),
        ];
        let html = instance_page(&done, None, &[], &events, false);
        assert!(html.contains("<h2>Events (2)</h2>"), "{html}");
        assert_eq!(html.matches("<tr data-kind=").count(), 2);
        assert!(!html.contains("<dt>slurm</dt>"), "{html}");
        // An instance in a Slurm job names it, from its events when it has no report.
        let mut in_slurm = events.clone();
        in_slurm[1].event.details = serde_json::json!({
            "slurm": {"job_id": "77", "step_id": "0", "node": "node-3", "restart_count": 1}
        });
        let html = instance_page(&done, None, &[], &in_slurm, false);
        assert!(
            html.contains("<dt>slurm</dt><dd>slurm job 77 step 0 on node-3</dd>"),
            "{html}"
        );
        let none = instance_page(&done, None, &[], &[], false);
        assert!(none.contains("No event of this instance."));
    }

    #[test]
    fn hostile_names_are_text_everywhere_on_the_page() {
        let mut hostile = instance(HOSTILE_JOB, HOSTILE_NODE, Some(Outcome::Failed));
        hostile.attempt.instance = "<i>pod</i>".to_owned();
        hostile.latest_run.as_mut().unwrap().backend = "<u>sim</u>".to_owned();
        let events = [event(
            1,
            EventKind::SanityCheckFailed,
            HOSTILE_JOB,
            2,
            HOSTILE_NODE,
        )];
        let html = instance_page(&hostile, None, &[run(1, Outcome::Failed)], &events, true);
        assert_no_markup_from(&html);
        assert!(!html.contains("<i>") && !html.contains("<u>"), "{html}");
        assert_eq!(
            html.matches("<script").count(),
            1,
            "only the page's own: {html}"
        );
    }
}
