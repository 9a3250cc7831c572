//! The instances page (`/`, or `/instances?job=JOB` for one job): per job its counts,
//! links to its latest attempt's timeline and bundle, and its instances, each with its
//! latest sanity-check status, when it ran, and a link to its page.
//!
//! Folding, so that a job of 1,024 nodes is a page to read rather than 1,024 rows:
//! - instances are ordered problems first (failed, incomplete, running, then passed),
//!   then by node name in natural order;
//! - a job of at most [`SHOWN_INSTANCES`] instances shows every one as a row;
//! - a larger job shows its failed, incomplete and running instances as rows, up to
//!   [`SHOWN_INSTANCES`] in all, and folds the rest into one row per status: the count,
//!   the node names as a hostlist (`node-[0-511,513-1023]`, cut short after
//!   [`SHOWN_RANGES`] parts; see `gpuvet_model::node_list`), and a `<details>` holding a
//!   link to each of those instances, comma-separated. Passed instances of a large
//!   job are always folded: healthy nodes need finding, not reading.
//!
//! So a job has at most [`SHOWN_INSTANCES`] + 4 rows whatever its size. Every
//! instance row carries `data-node` and `data-status`, and every folded link
//! `data-node`, for browser tests and scripts to find them.

use std::collections::HashMap;

use gpuvet_model::node_list::{fold_node_names, natural_key};
use gpuvet_model::overview::{InstanceSummary, JobSummary};

use crate::escape;
use crate::site::layout::{Section, document};
use crate::site::timeline::{bundle_link, timeline_link};
use crate::site::{href, when};

/// The most instances of one job shown as a row each.
pub const SHOWN_INSTANCES: usize = 50;
/// The most parts (runs of numbers like `0-511`, or names without a number) in a folded
/// row's summary; its `<details>` holds every name.
pub const SHOWN_RANGES: usize = 12;

/// The statuses in the order the page shows them: problems first.
const STATUS_ORDER: [&str; 4] = ["failed", "incomplete", "running", "passed"];

/// The instances page: one section per job of `jobs` (in the order given), or only the
/// job named by `job_filter`. `instances` are those to list (the server's latest
/// attempt of each node); an instance whose job is not shown is left out. Ages are
/// relative to `now_ms`.
pub fn instances_page(
    jobs: &[JobSummary],
    instances: &[InstanceSummary],
    job_filter: Option<&str>,
    now_ms: u64,
) -> String {
    let mut by_job: HashMap<&str, Vec<&InstanceSummary>> = HashMap::new();
    for instance in instances {
        by_job
            .entry(instance.attempt.job_id.as_str())
            .or_default()
            .push(instance);
    }
    let shown: Vec<&JobSummary> = jobs
        .iter()
        .filter(|job| job_filter.is_none_or(|wanted| job.job_id == wanted))
        .collect();
    let (title, mut body) = match job_filter {
        None => (
            "gpuvet: instances".to_owned(),
            "<h1>Instances</h1>\n".to_owned(),
        ),
        Some(job) => (
            format!("gpuvet: job {job}"),
            format!(
                "<h1>Instances of job {}</h1>\n<p class=\"back\"><a href=\"{}\">all jobs</a></p>\n",
                escape(job),
                escape(&href::instances(None))
            ),
        ),
    };
    if shown.is_empty() {
        body.push_str(&match job_filter {
            Some(job) => format!("<p class=\"empty\">No job {} is known.</p>\n", escape(job)),
            None => "<p class=\"empty\">No job has reported yet.</p>\n".to_owned(),
        });
    }
    for job in shown {
        let members = by_job
            .get(job.job_id.as_str())
            .map_or(&[][..], Vec::as_slice);
        body.push_str(&job_section(job, members, now_ms));
    }
    document(&title, Some(Section::Instances), &body)
}

fn job_section(job: &JobSummary, instances: &[&InstanceSummary], now_ms: u64) -> String {
    let plural = if job.nodes == 1 { "" } else { "s" };
    let counts: Vec<String> = [
        ("passed", job.passed),
        ("failed", job.failed),
        ("incomplete", job.incomplete),
        ("running", job.running),
    ]
    .into_iter()
    .map(|(status, n)| format!("<span class=\"count {status}\">{n} {status}</span>"))
    .collect();
    let mut out = format!(
        "<section class=\"job\" data-job=\"{job_id}\">\n<h2>job <a href=\"{}\">{job_id}</a> <span class=\"attempt\">attempt {}</span></h2>\n<p class=\"counts\"><strong>{} node{plural}</strong>: {}; started {}</p>\n",
        escape(&href::instances(Some(&job.job_id))),
        job.latest_attempt,
        job.nodes,
        counts.join(", "),
        when::utc_and_ago(job.started_at_ms, now_ms),
        job_id = escape(&job.job_id),
    );
    out.push_str(&format!(
        "<p class=\"links\">{} · {}</p>\n",
        timeline_link(&job.job_id, job.latest_attempt),
        bundle_link(&job.job_id, job.latest_attempt)
    ));
    if instances.is_empty() {
        out.push_str("<p class=\"empty\">No instance listed.</p>\n</section>\n");
        return out;
    }
    out.push_str("<table class=\"instances\">\n<thead><tr><th>node</th><th>instance</th><th>status</th><th>ran</th><th>result</th></tr></thead>\n<tbody>\n");
    let mut sorted = instances.to_vec();
    sorted.sort_by_key(|i| (status_rank(i.status()), natural_key(&i.attempt.node)));
    let everything_fits = sorted.len() <= SHOWN_INSTANCES;
    let mut rows = 0;
    // Per status, in STATUS_ORDER: the instances folded away.
    let mut folded: [Vec<&InstanceSummary>; 4] = Default::default();
    for instance in sorted {
        let status = instance.status();
        if everything_fits || (status != "passed" && rows < SHOWN_INSTANCES) {
            out.push_str(&instance_row(job, instance, now_ms));
            rows += 1;
        } else {
            folded[status_rank(status)].push(instance);
        }
    }
    for (status, instances) in STATUS_ORDER.iter().zip(&folded) {
        if !instances.is_empty() {
            let some_shown = rows > 0 && *status != "passed";
            out.push_str(&folded_row(job, status, instances, some_shown));
        }
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
    out
}

fn status_rank(status: &str) -> usize {
    STATUS_ORDER
        .iter()
        .position(|s| *s == status)
        .unwrap_or(STATUS_ORDER.len() - 1)
}

/// The link to an instance: its latest attempt, or the attempt listed when that is not
/// the job's latest.
fn instance_href(job: &JobSummary, instance: &InstanceSummary) -> String {
    let attempt = instance.attempt.attempt;
    href::instance(
        &instance.attempt.job_id,
        &instance.attempt.node,
        (attempt != job.latest_attempt).then_some(attempt),
    )
}

fn instance_row(job: &JobSummary, instance: &InstanceSummary, now_ms: u64) -> String {
    let status = instance.status();
    let node = escape(&instance.attempt.node);
    let (ran, result) = match &instance.latest_run {
        Some(run) => (
            when::utc_and_ago(run.started_at_ms, now_ms),
            format!(
                "{} checks, {} failed, {} findings",
                run.checks, run.failed_checks, run.findings
            ),
        ),
        None => (
            format!(
                "started {}",
                when::utc_and_ago(instance.attempt_started_at_ms, now_ms)
            ),
            "no report yet".to_owned(),
        ),
    };
    format!(
        "<tr class=\"{status}\" data-node=\"{node}\" data-status=\"{status}\"><td><a href=\"{}\">{node}</a></td><td>{}</td><td><span class=\"status {status}\">{status}</span></td><td>{ran}</td><td>{result}</td></tr>\n",
        escape(&instance_href(job, instance)),
        escape(&instance.attempt.instance),
    )
}

fn folded_row(
    job: &JobSummary,
    status: &str,
    instances: &[&InstanceSummary],
    some_shown: bool,
) -> String {
    let names = fold_node_names(
        instances.iter().map(|i| i.attempt.node.as_str()),
        SHOWN_RANGES,
    );
    let count = if some_shown {
        format!("and {} more", instances.len())
    } else {
        let plural = if instances.len() == 1 { "" } else { "s" };
        format!("{} instance{plural}", instances.len())
    };
    let links: Vec<String> = instances
        .iter()
        .map(|instance| {
            format!(
                "<a href=\"{}\" data-node=\"{node}\">{node}</a>",
                escape(&instance_href(job, instance)),
                node = escape(&instance.attempt.node)
            )
        })
        .collect();
    format!(
        "<tr class=\"folded {status}\" data-status=\"{status}\" data-folded=\"{}\"><td colspan=\"5\"><details><summary><span class=\"status {status}\">{status}</span> {count}: {}</summary><p class=\"nodes\">{}</p></details></td></tr>\n",
        instances.len(),
        escape(&names),
        links.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::test_data::{HOSTILE_JOB, HOSTILE_NODE, T0, assert_no_markup_from, job};

    const NOW: u64 = T0 + 5 * 60_000;

    fn rows(html: &str) -> usize {
        html.matches("<tr").count()
    }

    #[test]
    fn a_small_job_lists_every_instance_problems_first_with_status_time_and_link() {
        let (summary, instances) = job("job-7", 4, &[2], &[], &[3]);
        let html = instances_page(&[summary], &instances, None, NOW);
        assert!(html.contains("<h1>Instances</h1>"), "{html}");
        assert!(html.contains("<a href=\"/\" aria-current=\"page\">Instances</a>"));
        assert!(html.contains("<h2>job <a href=\"/instances?job=job-7\">job-7</a> <span class=\"attempt\">attempt 2</span></h2>"), "{html}");
        assert!(html.contains("<strong>4 nodes</strong>: <span class=\"count passed\">2 passed</span>, <span class=\"count failed\">1 failed</span>, <span class=\"count incomplete\">0 incomplete</span>, <span class=\"count running\">1 running</span>"), "{html}");
        assert_eq!(html.matches("data-node=").count(), 4, "{html}");
        let order: Vec<usize> = ["node-2", "node-3", "node-0", "node-1"]
            .iter()
            .map(|n| html.find(&format!("data-node=\"{n}\"")).unwrap())
            .collect();
        assert!(order.is_sorted(), "failed, running, then passed: {order:?}");
        assert!(html.contains("<tr class=\"failed\" data-node=\"node-2\" data-status=\"failed\"><td><a href=\"/instances/job-7/node-2\">node-2</a></td><td>pod-node-2</td><td><span class=\"status failed\">failed</span></td>"), "{html}");
        // The run started a minute after T0, four minutes before now.
        assert!(
            html.contains("2026-01-01T00:01:00.000Z</time> <span class=\"ago\">4 min ago</span>"),
            "{html}"
        );
        assert!(html.contains("3 checks, 1 failed, 2 findings"));
        assert!(
            html.contains("<p class=\"links\"><a class=\"timeline\" href=\"/jobs/job-7/timeline?attempt=2\">Timeline</a> · <a class=\"bundle\" href=\"/api/v1/jobs/job-7/bundle?attempt=2\" download>Download bundle</a></p>"),
            "{html}"
        );
        assert!(html.contains("<td>started <time datetime=\"2026-01-01T00:00:00.000Z\">2026-01-01T00:00:00.000Z</time> <span class=\"ago\">5 min ago</span></td><td>no report yet</td>"), "{html}");
        assert!(!html.contains("<details>"), "nothing folded: {html}");
    }

    #[test]
    fn a_job_of_1024_nodes_shows_its_problems_and_folds_the_passed_into_one_row() {
        let (summary, instances) = job("job-7", 1024, &[512, 7], &[9], &[1000]);
        let html = instances_page(&[summary], &instances, None, NOW);
        assert!(rows(&html) < 100, "{} rows", rows(&html));
        assert_eq!(html.matches("<tr class=\"failed\"").count(), 2);
        assert!(html.contains("data-node=\"node-7\" data-status=\"failed\""));
        assert!(html.contains("data-node=\"node-9\" data-status=\"incomplete\""));
        assert!(html.contains("data-node=\"node-1000\" data-status=\"running\""));
        assert!(
            !html.contains("data-status=\"passed\"><td><a"),
            "no passed row"
        );
        assert!(html.contains("<tr class=\"folded passed\" data-status=\"passed\" data-folded=\"1020\"><td colspan=\"5\"><details><summary><span class=\"status passed\">passed</span> 1020 instances: node-[0-6,8,10-511,513-999,1001-1023]</summary>"), "{html}");
        // Every passed instance is still one click away.
        assert_eq!(html.matches("data-node=").count(), 1024);
        assert!(html.contains(
            "<a href=\"/instances/job-7/node-1023\" data-node=\"node-1023\">node-1023</a>"
        ));
        assert!(html.len() < 200_000, "{} bytes", html.len());
    }

    #[test]
    fn problems_beyond_the_cap_fold_into_one_row_per_status() {
        let failed: Vec<usize> = (0..60).collect();
        let running: Vec<usize> = (60..70).collect();
        let (summary, instances) = job("job-7", 1024, &failed, &[], &running);
        let html = instances_page(&[summary], &instances, None, NOW);
        assert_eq!(
            html.matches("<tr class=\"failed\"").count(),
            SHOWN_INSTANCES
        );
        assert!(
            html.contains("data-status=\"failed\" data-folded=\"10\""),
            "{html}"
        );
        assert!(
            html.contains(
                "<span class=\"status failed\">failed</span> and 10 more: node-[50-59]</summary>"
            ),
            "{html}"
        );
        assert!(
            html.contains(
                "<span class=\"status running\">running</span> and 10 more: node-[60-69]</summary>"
            ),
            "{html}"
        );
        assert!(html.contains("data-status=\"passed\" data-folded=\"954\""));
        // Header, 50 rows, three folded rows.
        assert_eq!(rows(&html), 1 + SHOWN_INSTANCES + 3);
    }

    #[test]
    fn a_folded_summary_names_at_most_a_few_ranges() {
        let (summary, instances) = job("job-7", 100, &[], &[], &[]);
        let mut instances = instances;
        for (i, instance) in instances.iter_mut().enumerate() {
            instance.attempt.node = format!("host{i}x");
        }
        let html = instances_page(&[summary], &instances, None, NOW);
        assert!(html.contains("100 instances: host0x,host10x,host11x,host12x,host13x,host14x,host15x,host16x,host17x,host18x,host19x,host1x and 88 more</summary>"), "{html}");
    }

    #[test]
    fn the_filter_shows_one_job_and_says_when_it_is_unknown() {
        let (job_a, mut instances) = job("job-a", 2, &[], &[], &[]);
        let (job_b, more) = job("job-b", 2, &[1], &[], &[]);
        instances.extend(more);
        let jobs = [job_a, job_b];
        let all = instances_page(&jobs, &instances, None, NOW);
        assert_eq!(all.matches("<section class=\"job\"").count(), 2);
        let one = instances_page(&jobs, &instances, Some("job-b"), NOW);
        assert_eq!(one.matches("<section class=\"job\"").count(), 1);
        assert!(one.contains("<h1>Instances of job job-b</h1>"), "{one}");
        assert!(one.contains("<a href=\"/\">all jobs</a>"), "{one}");
        assert!(!one.contains("/instances/job-a/"), "{one}");
        assert!(one.contains("<title>gpuvet: job job-b</title>"));
        let none = instances_page(&jobs, &instances, Some("job-c"), NOW);
        assert!(none.contains("No job job-c is known."), "{none}");
        let empty = instances_page(&[], &[], None, NOW);
        assert!(empty.contains("No job has reported yet."), "{empty}");
    }

    #[test]
    fn an_instance_of_an_older_attempt_links_to_that_attempt() {
        let (mut summary, mut instances) = job("job-7", 2, &[], &[], &[]);
        summary.latest_attempt = 3;
        instances[1].attempt.attempt = 3;
        let html = instances_page(&[summary], &instances, None, NOW);
        assert!(
            html.contains("<a href=\"/instances/job-7/node-0?attempt=2\">node-0</a>"),
            "{html}"
        );
        assert!(
            html.contains("<a href=\"/instances/job-7/node-1\">node-1</a>"),
            "{html}"
        );
    }

    #[test]
    fn hostile_names_are_text_in_rows_folded_rows_and_links() {
        let (mut summary, mut instances) = job(HOSTILE_JOB, 60, &[0], &[], &[]);
        summary.job_id = HOSTILE_JOB.to_owned();
        instances[0].attempt.node = HOSTILE_NODE.to_owned();
        instances[59].attempt.node = HOSTILE_NODE.to_owned() + "2";
        let html = instances_page(&[summary], &instances, Some(HOSTILE_JOB), NOW);
        assert_no_markup_from(&html);
        assert!(
            html.contains(
                "href=\"/instances/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E/%3Cscript%3E"
            ),
            "{html}"
        );
        assert!(
            html.contains("data-node=\"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;2\""),
            "{html}"
        );
    }
}
