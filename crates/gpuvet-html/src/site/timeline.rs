//! The timeline page (`/jobs/{job}/timeline?attempt=N`): one attempt of a job on one
//! clock. Above, the explanation in short (the verdict block of a failed attempt, as
//! `gpuvet explain` prints it, else the team to hand it to and the next step; the
//! first error; the six hypotheses with their conclusions); below, one swim lane per
//! node on a shared time axis, as inline SVG: each node's part of each check as a bar,
//! incidents, findings, runtime findings, events and collectives as marks, coloured by
//! their role (the first error red, anchored at `#first-error` and labelled in a band
//! above the lanes, so the label covers no lane; what followed from it grey; other
//! failures in the warning colour; context neutral), with a legend; then a table of
//! the failures and events, where the findings of one check with one verdict and role
//! on one node (its eight GPUs) are one row.
//!
//! Folding, so that a group of 1,024 nodes is still a page to read:
//! - a group of at most [`SHOWN_LANES`] nodes gets a lane per node;
//! - a larger group gives its own lane to the nodes with something other than check
//!   spans (failures first: the first error's node, then other failures, then
//!   consequences, then events), at most [`SHOWN_LANES`], and folds every other node
//!   into at most [`FOLDED_LANES`] lanes of consecutive nodes (in natural order), each
//!   labelled with its node ranges (`node-[64-127]`) and drawing, per check, the span
//!   of its nodes' bars (the earliest start to the latest end) and their marks;
//! - in every lane, marks of one kind and role that fall on the same pixel are drawn
//!   once (the first error always, on top), and the table lists at most
//!   [`SHOWN_ENTRIES`] rows, failures first.
//!
//! Every node lane's label links to its instance page for this attempt; every lane
//! carries `data-lane` (the node, or a fold's ranges and count, `node-[64-127] (64)`)
//! for browser tests and scripts.

use std::collections::{BTreeMap, HashSet};

use gpuvet_analysis::diagnose::{status_words, words};
use gpuvet_analysis::explain::{Conclusion, Explanation};
use gpuvet_analysis::timeline::{self, Entry, Role, Timeline, What};
use gpuvet_model::node_list::{fold_node_names, natural_key};

use crate::chart::round_up;
use crate::site::layout::{Section, document};
use crate::site::{href, when};
use crate::verdict::with_code;
use crate::{escape, verdict_block, verdict_name};

/// The most nodes that get a lane of their own.
pub const SHOWN_LANES: usize = 50;
/// The most lanes the other nodes of a large group fold into.
pub const FOLDED_LANES: usize = 16;
/// The most rows the table under the lanes lists; the JSON has every entry.
pub const SHOWN_ENTRIES: usize = 200;

/// The most attempts linked from the header.
const LINKED_ATTEMPTS: u32 = 8;
/// The most parts of a folded lane's label (`node-[0-6,8-63]`).
const LABEL_RANGES: usize = 3;
/// The most characters of a lane's label; its tooltip has the whole name.
const LABEL_CHARS: usize = 28;

const WIDTH: f64 = 1000.0;
/// The label column, left of the plot.
const LEFT: f64 = 210.0;
const RIGHT: f64 = 16.0;
/// The band at the very top that holds the first error's label, clear of every lane.
const LABEL_BAND: f64 = 16.0;
/// Room above the lanes for the label band and the time axis.
const TOP: f64 = LABEL_BAND + 26.0;
const BOTTOM: f64 = 8.0;
const LANE: f64 = 20.0;
/// Half the size of a mark.
const MARK: f64 = 5.0;

/// The timeline page of one attempt: `timeline` and `explanation` of the same attempt
/// (as core's `assemble` and `explain` made them); `latest_attempt` is the job's
/// latest, for the links to other attempts.
pub fn timeline_page(
    timeline: &Timeline,
    explanation: &Explanation,
    latest_attempt: u32,
) -> String {
    let job = &timeline.job_id;
    let attempt = timeline.attempt;
    let mut body = header(timeline, explanation, latest_attempt);
    body.push_str(&explanation_section(explanation));
    body.push_str("<section id=\"lanes\">\n<h2>Timeline</h2>\n");
    if timeline.entries.is_empty() {
        body.push_str("<p class=\"empty\">Nothing was recorded for this attempt yet.</p>\n");
    } else {
        body.push_str(&clock_line(timeline));
        body.push_str(&legend());
        body.push_str(&lanes_svg(timeline));
        body.push('\n');
    }
    if !timeline.notes.is_empty() {
        let notes: Vec<String> = timeline.notes.iter().map(|n| escape(n)).collect();
        body.push_str(&format!(
            "<ul class=\"notes\"><li>{}</li></ul>\n",
            notes.join("</li><li>")
        ));
    }
    body.push_str("</section>\n");
    body.push_str(&entries_table(timeline));
    let title = format!("gpuvet: timeline of job {job}, attempt {attempt}");
    document(&title, Some(Section::Instances), &body)
}

fn header(timeline: &Timeline, explanation: &Explanation, latest_attempt: u32) -> String {
    let job = &timeline.job_id;
    let attempt = timeline.attempt;
    let outcome = escape(&explanation.outcome);
    let mut out = format!(
        "<header class=\"timeline\" data-job=\"{}\" data-attempt=\"{attempt}\">\n<h1>Timeline of job {} <span class=\"attempt\">attempt {attempt}</span> <span class=\"status {outcome}\">{outcome}</span></h1>\n",
        escape(job),
        escape(job),
    );
    if let Some(first) = timeline.entries.first() {
        let clock = if timeline.clock_of.is_empty() {
            "each node's own clock".to_owned()
        } else {
            format!("{}'s clock", escape(&timeline.clock_of))
        };
        out.push_str(&format!(
            "<p class=\"summary\">{} entries of {} nodes on {clock}, from {}</p>\n",
            timeline.entries.len(),
            node_names(timeline).len(),
            when::utc(first.time_ms)
        ));
    }
    out.push_str(&attempts(job, attempt, latest_attempt));
    let links = [
        format!(
            "<a href=\"{}\">instances of the job</a>",
            escape(&href::instances(Some(job)))
        ),
        format!(
            "<a href=\"{}\">timeline JSON</a>",
            escape(&href::timeline_api(job, Some(attempt)))
        ),
        format!(
            "<a href=\"{}\">explanation JSON</a>",
            escape(&href::explain_api(job, Some(attempt)))
        ),
        bundle_link(job, attempt),
    ];
    out.push_str(&format!(
        "<p class=\"links\">{}</p>\n</header>\n",
        links.join(" · ")
    ));
    out
}

/// The link that downloads everything kept about one attempt.
pub(crate) fn bundle_link(job: &str, attempt: u32) -> String {
    format!(
        "<a class=\"bundle\" href=\"{}\" download>Download bundle</a>",
        escape(&href::bundle(job, Some(attempt)))
    )
}

/// The link to one attempt's timeline.
pub(crate) fn timeline_link(job: &str, attempt: u32) -> String {
    format!(
        "<a class=\"timeline\" href=\"{}\">Timeline</a>",
        escape(&href::timeline(job, Some(attempt)))
    )
}

/// Links to the job's last few attempts, this one marked.
fn attempts(job: &str, attempt: u32, latest: u32) -> String {
    let latest = latest.max(attempt);
    if latest <= 1 {
        return String::new();
    }
    let first = latest.saturating_sub(LINKED_ATTEMPTS - 1).max(1);
    let mut shown: Vec<u32> = (first..=latest).collect();
    if attempt < first {
        shown.insert(0, attempt);
    }
    let links: Vec<String> = shown
        .into_iter()
        .map(|n| {
            if n == attempt {
                format!("<strong aria-current=\"page\">{n}</strong>")
            } else {
                format!(
                    "<a href=\"{}\">{n}</a>",
                    escape(&href::timeline(job, Some(n)))
                )
            }
        })
        .collect();
    format!(
        "<p class=\"attempts\">attempts: {} (latest {latest})</p>\n",
        links.join(", ")
    )
}

fn explanation_section(explanation: &Explanation) -> String {
    let mut out = String::from("<section id=\"explanation\">\n<h2>Explanation</h2>\n");
    // The verdict says the culprit, team, lane and next step, as `explain` prints it.
    if let Some(diagnosis) = &explanation.diagnosis {
        out.push_str(&verdict_block(diagnosis));
    }
    match &explanation.first_error {
        Some(first) => out.push_str(&format!(
            "<p class=\"first-error\"><strong>first error</strong>: <a href=\"#first-error\">{}</a> {}{}: {}</p>\n",
            escape(&first.node),
            escape(&what_text(&first.what)),
            lane_tag(first),
            escape(&first.detail)
        )),
        None => out.push_str("<p class=\"no-error\"><strong>first error</strong>: none</p>\n"),
    }
    if explanation.diagnosis.is_none() {
        let lane = explanation
            .lane
            .map_or_else(|| "unknown".to_owned(), |lane| lane.as_str().to_owned());
        out.push_str(&format!(
            "<dl class=\"facts explain\">\n<dt>lane</dt><dd>{}</dd>\n<dt>hand to</dt><dd>{}</dd>\n<dt>next step</dt><dd class=\"next-step\">{}</dd>\n</dl>\n",
            escape(&lane),
            escape(&explanation.team),
            with_code(&explanation.next_step)
        ));
    }
    if !explanation.evidence.is_empty() {
        let lines: Vec<String> = explanation.evidence.iter().map(|l| with_code(l)).collect();
        out.push_str(&format!(
            "<ul class=\"evidence\"><li>{}</li></ul>\n",
            lines.join("</li><li>")
        ));
    }
    out.push_str("<table class=\"hypotheses\">\n<thead><tr><th>hypothesis</th><th>conclusion</th><th>evidence</th></tr></thead>\n<tbody>\n");
    for judged in &explanation.hypotheses {
        let class = conclusion_class(judged.conclusion);
        out.push_str(&format!(
            "<tr class=\"{class}\" data-hypothesis=\"{}\"><td>{}</td><td><span class=\"conclusion {class}\">{}</span></td><td>{}</td></tr>\n",
            escape(judged.hypothesis.as_str()),
            escape(judged.hypothesis.as_str()),
            judged.conclusion.as_str(),
            with_code(&judged.evidence)
        ));
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
    out
}

fn conclusion_class(conclusion: Conclusion) -> &'static str {
    match conclusion {
        Conclusion::Confirmed => "confirmed",
        Conclusion::EvidenceMissing => "evidence_missing",
        Conclusion::NotApplicable => "not_applicable",
    }
}

fn lane_tag(entry: &Entry) -> String {
    entry.lane.map_or_else(String::new, |lane| {
        format!(" <span class=\"lane\">{lane}</span>")
    })
}

/// The clocks in one line: whose clock the times are on, and how far the others were.
fn clock_line(timeline: &Timeline) -> String {
    let measured: Vec<_> = timeline
        .members
        .iter()
        .filter(|m| m.measured && m.node != timeline.clock_of)
        .collect();
    let unmeasured = timeline.members.iter().filter(|m| !m.measured).count();
    let mut text = if timeline.clock_of.is_empty() {
        "Times are each node's own.".to_owned()
    } else {
        format!(
            "Times are on {}'s clock, from its first entry.",
            escape(&timeline.clock_of)
        )
    };
    if !measured.is_empty() {
        let widest = measured
            .iter()
            .map(|m| m.offset_ms.abs())
            .fold(0.0, f64::max);
        let loosest = measured
            .iter()
            .map(|m| m.uncertainty_ms)
            .fold(0.0, f64::max);
        text.push_str(&format!(
            " {} other clocks were measured: offsets up to {widest:.3} ms, each good to ±{loosest:.3} ms at worst.",
            measured.len()
        ));
    }
    if unmeasured > 0 {
        text.push_str(&format!(
            " {unmeasured} nodes' clocks were not measured and are taken as they are."
        ));
    }
    format!("<p class=\"clocks\">{text}</p>\n")
}

fn legend() -> String {
    let mut items = vec![
        "<li><svg class=\"key\" viewBox=\"0 0 22 12\"><rect class=\"check-span passed\" x=\"1\" y=\"3\" width=\"20\" height=\"6\"/></svg> check span</li>"
            .to_owned(),
    ];
    for (kind, name) in [
        ("incident", "incident"),
        ("finding", "finding"),
        ("runtime_finding", "runtime finding"),
        ("event", "event"),
        ("collective", "collective"),
    ] {
        items.push(format!(
            "<li><svg class=\"key\" viewBox=\"0 0 12 12\">{}</svg> {name}</li>",
            shape(kind, "context", 6.0, 6.0, None, "")
        ));
    }
    for (role, name) in [
        ("first_error", "first error"),
        ("consequence", "consequence of it"),
        ("other_failure", "other failure"),
        ("context", "context"),
    ] {
        items.push(format!(
            "<li><span class=\"swatch {role}\"></span> {name}</li>"
        ));
    }
    items.push(
        "<li><span class=\"swatch folded\"></span> folded lane: the span of its nodes' checks</li>"
            .to_owned(),
    );
    format!("<ul class=\"legend\">{}</ul>\n", items.join(""))
}

/// Every node on the timeline: its members and every node an entry is on.
fn node_names(timeline: &Timeline) -> Vec<&str> {
    let mut seen = HashSet::new();
    timeline
        .members
        .iter()
        .map(|m| m.node.as_str())
        .chain(timeline.entries.iter().map(|e| e.node.as_str()))
        .filter(|n| seen.insert(*n))
        .collect()
}

/// A lane: one node, or a block of nodes folded together.
#[derive(Debug)]
struct Lane<'a> {
    nodes: Vec<&'a str>,
    folded: bool,
    /// Indexes into the timeline's entries.
    entries: Vec<usize>,
}

/// How much a node's own lane matters: 0 holds the first error, 1 another failure, 2 a
/// consequence, 3 an event or another mark, 4 only check spans.
fn weight(entry: &Entry) -> u8 {
    match (entry.role, &entry.what) {
        (Role::FirstError, _) => 0,
        (Role::OtherFailure, _) => 1,
        (Role::Consequence, _) => 2,
        (Role::Context, What::Check { .. } | What::Collective { .. }) => 4,
        (Role::Context, _) => 3,
    }
}

/// The lanes in the order drawn: nodes with something to see first, then the rest.
fn lanes(timeline: &Timeline) -> Vec<Lane<'_>> {
    let mut by_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for name in node_names(timeline) {
        by_node.insert(name, Vec::new());
    }
    for (i, entry) in timeline.entries.iter().enumerate() {
        by_node.entry(entry.node.as_str()).or_default().push(i);
    }
    // (weight, time of its first weighty entry) per node.
    let rank = |indexes: &[usize]| {
        indexes
            .iter()
            .map(|&i| (weight(&timeline.entries[i]), timeline.entries[i].time_ms))
            .min()
            .unwrap_or((4, 0))
    };
    let mut nodes: Vec<(&str, (u8, u64), Vec<usize>)> = by_node
        .into_iter()
        .map(|(name, indexes)| (name, rank(&indexes), indexes))
        .collect();
    let everything_fits = nodes.len() <= SHOWN_LANES;
    // Quiet nodes in name order; the others by what they hold, then when.
    nodes.sort_by(|a, b| {
        let time = |(weight, time): (u8, u64)| if weight == 4 { 0 } else { time };
        (a.1.0, time(a.1), natural_key(a.0)).cmp(&(b.1.0, time(b.1), natural_key(b.0)))
    });
    let mut own = Vec::new();
    let mut overflow = Vec::new();
    let mut quiet = Vec::new();
    for (name, (weight, _), indexes) in nodes {
        if everything_fits || (weight < 4 && own.len() < SHOWN_LANES) {
            own.push(Lane {
                nodes: vec![name],
                folded: false,
                entries: indexes,
            });
        } else if weight < 4 {
            overflow.push((name, indexes));
        } else {
            quiet.push((name, indexes));
        }
    }
    let block = (overflow.len() + quiet.len()).div_ceil(FOLDED_LANES).max(1);
    for mut pool in [overflow, quiet] {
        pool.sort_by(|a, b| natural_key(a.0).cmp(&natural_key(b.0)));
        for chunk in pool.chunks(block) {
            let mut entries: Vec<usize> =
                chunk.iter().flat_map(|(_, e)| e.iter().copied()).collect();
            entries.sort_unstable();
            own.push(Lane {
                nodes: chunk.iter().map(|(name, _)| *name).collect(),
                folded: true,
                entries,
            });
        }
    }
    own
}

/// Maps times to the horizontal pixel axis.
#[derive(Debug, Clone, Copy)]
struct Axis {
    origin: u64,
    span: f64,
}

impl Axis {
    fn of(timeline: &Timeline) -> Self {
        let origin = timeline.origin_ms();
        let end = timeline
            .entries
            .iter()
            .map(|e| e.time_ms.max(until(e).unwrap_or(0)))
            .max()
            .unwrap_or(origin);
        Axis {
            origin,
            span: end.saturating_sub(origin).max(1) as f64,
        }
    }

    fn x(&self, ms: u64) -> f64 {
        let fraction = (ms.saturating_sub(self.origin) as f64 / self.span).clamp(0.0, 1.0);
        LEFT + fraction * (WIDTH - LEFT - RIGHT)
    }

    /// The step between ticks in milliseconds: a round number, about eight ticks.
    fn step(&self) -> f64 {
        round_up(self.span / 8.0).max(1.0)
    }
}

fn until(entry: &Entry) -> Option<u64> {
    match &entry.what {
        What::Check { until_ms, .. } => Some(*until_ms),
        What::Collective { until_ms, .. } => *until_ms,
        _ => None,
    }
}

/// `+1.250 s` from the timeline's start.
fn offset(ms: u64, origin: u64) -> String {
    format!("+{:.3} s", ms.saturating_sub(origin) as f64 / 1000.0)
}

fn lanes_svg(timeline: &Timeline) -> String {
    let lanes = lanes(timeline);
    let axis = Axis::of(timeline);
    let height = TOP + LANE * lanes.len() as f64 + BOTTOM;
    let job = &timeline.job_id;
    let mut out = format!(
        r#"<svg class="lanes" viewBox="0 0 {WIDTH} {height:.0}" role="img" xmlns="http://www.w3.org/2000/svg"><title>timeline of job {} attempt {}: {} lanes</title>"#,
        escape(job),
        timeline.attempt,
        lanes.len()
    );
    ticks(&mut out, &axis, height);
    let members: HashSet<&str> = timeline.members.iter().map(|m| m.node.as_str()).collect();
    let mut first_at = None;
    for (row, lane) in lanes.iter().enumerate() {
        let y = TOP + LANE * row as f64;
        let label = if lane.folded {
            let names = fold_node_names(&lane.nodes, LABEL_RANGES);
            format!("{names} ({})", lane.nodes.len())
        } else {
            lane.nodes[0].to_owned()
        };
        let class = if lane.folded { "folded" } else { "node" };
        let stripe = if row % 2 == 1 { " alt" } else { "" };
        out.push_str(&format!(
            r#"<g class="swim {class}{stripe}" data-lane="{}"><rect class="lane-bg" x="0" y="{y:.1}" width="{WIDTH}" height="{LANE}"/>"#,
            escape(&label)
        ));
        let text = format!(
            r#"<text class="label" x="{:.1}" y="{:.1}">{}<title>{}</title></text>"#,
            LEFT - 8.0,
            y + LANE / 2.0 + 4.0,
            escape(&shorten(&label)),
            escape(&lane_title(timeline, lane))
        );
        if !lane.folded && members.contains(lane.nodes[0]) {
            out.push_str(&format!(
                r#"<a href="{}">{text}</a>"#,
                escape(&href::instance(job, lane.nodes[0], Some(timeline.attempt)))
            ));
        } else {
            out.push_str(&text);
        }
        spans(&mut out, timeline, lane, &axis, y);
        marks(&mut out, timeline, lane, &axis, y);
        out.push_str("</g>");
        if let Some(first) = timeline.first_error
            && lane.entries.contains(&first)
        {
            first_at = Some((first, y, label));
        }
    }
    if let Some((index, y, lane)) = first_at {
        first_error_mark(&mut out, &timeline.entries[index], &lane, &axis, y, height);
    }
    out.push_str("</svg>");
    out
}

/// `text` cut to [`LABEL_CHARS`] characters, ending in `…` when cut.
fn shorten(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(LABEL_CHARS - 1).collect();
    out.push('…');
    out
}

/// A lane label's tooltip: the node and its clock, or the nodes folded.
fn lane_title(timeline: &Timeline, lane: &Lane<'_>) -> String {
    if lane.folded {
        return format!(
            "{} nodes: {}",
            lane.nodes.len(),
            fold_node_names(&lane.nodes, crate::site::SHOWN_RANGES)
        );
    }
    let node = lane.nodes[0];
    let Some(member) = timeline.members.iter().find(|m| m.node == node) else {
        return node.to_owned();
    };
    let rank = member
        .rank
        .map_or_else(String::new, |rank| format!(" (rank {rank})"));
    // Slurm's job and step, so a lane reads against `squeue` and `sacct`.
    let slurm = member
        .slurm
        .as_ref()
        .map_or_else(String::new, |names| format!(" [{}]", names.describe()));
    let rank = format!("{rank}{slurm}");
    if member.node == timeline.clock_of {
        format!("{node}{rank}: the timeline's clock")
    } else if member.measured {
        format!(
            "{node}{rank}: clock {:+.3} ms, good to ±{:.3} ms",
            member.offset_ms, member.uncertainty_ms
        )
    } else {
        format!("{node}{rank}: clock not measured")
    }
}

fn ticks(out: &mut String, axis: &Axis, height: f64) {
    let step = axis.step();
    // Enough decimals to tell the ticks apart.
    let decimals = (0..=3)
        .find(|&d| {
            let scaled = step / 1000.0 * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(3) as usize;
    let mut at = 0.0;
    while at <= axis.span + 1e-6 {
        let x = axis.x(axis.origin + at as u64);
        out.push_str(&format!(
            r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}"/><text class="tick" x="{x:.1}" y="{:.1}">+{:.decimals$} s</text>"#,
            TOP - 4.0,
            height - BOTTOM,
            TOP - 8.0,
            at / 1000.0
        ));
        at += step;
    }
}

/// The lane's check bars: each entry's for a node, each check's extent for a fold.
fn spans(out: &mut String, timeline: &Timeline, lane: &Lane<'_>, axis: &Axis, y: f64) {
    // Per check, in order of appearance: (start, end, status, how many spans).
    let mut checks: Vec<(String, u64, u64, &'static str, usize)> = Vec::new();
    for &i in &lane.entries {
        let entry = &timeline.entries[i];
        let What::Check {
            check,
            status,
            until_ms,
        } = &entry.what
        else {
            continue;
        };
        if !lane.folded {
            bar(
                out,
                axis,
                y,
                entry.time_ms,
                *until_ms,
                status.as_str(),
                &format!(
                    "{} {}: {} to {}",
                    check,
                    status,
                    offset(entry.time_ms, axis.origin),
                    offset(*until_ms, axis.origin)
                ),
            );
            continue;
        }
        match checks.iter_mut().find(|c| c.0 == check.as_str()) {
            Some(c) => {
                c.1 = c.1.min(entry.time_ms);
                c.2 = c.2.max(*until_ms);
                c.4 += 1;
            }
            None => checks.push((
                check.as_str().to_owned(),
                entry.time_ms,
                *until_ms,
                status.as_str(),
                1,
            )),
        }
    }
    for (check, start, end, status, count) in checks {
        bar(
            out,
            axis,
            y,
            start,
            end,
            status,
            &format!(
                "{check} {status}: {count} nodes' spans, the first from {}, the last to {}",
                offset(start, axis.origin),
                offset(end, axis.origin)
            ),
        );
    }
}

fn bar(out: &mut String, axis: &Axis, y: f64, start: u64, end: u64, status: &str, title: &str) {
    let x = axis.x(start);
    let width = (axis.x(end.max(start)) - x).max(1.0);
    out.push_str(&format!(
        r#"<rect class="check-span {status}" x="{x:.1}" y="{:.1}" width="{width:.1}" height="{:.1}"><title>{}</title></rect>"#,
        y + 5.0,
        LANE - 10.0,
        escape(title)
    ));
}

fn what_class(what: &What) -> &'static str {
    match what {
        What::Check { .. } => "check",
        What::Incident { .. } => "incident",
        What::Finding { .. } => "finding",
        What::RuntimeFinding { .. } => "runtime_finding",
        What::Event { .. } => "event",
        What::Collective { .. } => "collective",
    }
}

fn role_class(role: Role) -> &'static str {
    match role {
        Role::FirstError => "first_error",
        Role::Consequence => "consequence",
        Role::OtherFailure => "other_failure",
        Role::Context => "context",
    }
}

fn role_word(role: Role) -> &'static str {
    match role {
        Role::FirstError => "first error",
        Role::Consequence => "consequence",
        Role::OtherFailure => "other failure",
        Role::Context => "context",
    }
}

/// What an entry is, in a few words.
fn what_text(what: &What) -> String {
    match what {
        What::Check { check, status, .. } => format!("{check} {}", status_words(*status)),
        What::Incident { incident } => incident.words().to_owned(),
        What::Finding { check, verdict, .. } => format!("{check} {}", verdict_name(*verdict)),
        What::RuntimeFinding { check, xid, .. } => {
            let check = words(&check.to_string());
            match xid {
                Some(xid) => format!("runtime {check} (XID {xid})"),
                None => format!("runtime {check}"),
            }
        }
        What::Event { event } => timeline::event_words(*event),
        What::Collective { op, seq, state, .. } => format!("{op} #{seq} {state}"),
    }
}

/// One mark's tooltip.
fn mark_title(entry: &Entry, origin: u64) -> String {
    let role = match entry.role {
        Role::Context => String::new(),
        role => format!(" [{}]", role_word(role)),
    };
    format!(
        "{} {}: {}{role}: {}",
        offset(entry.time_ms, origin),
        entry.node,
        what_text(&entry.what),
        entry.detail
    )
}

/// The lane's marks, but the first error's (drawn on top of every lane): one per kind,
/// role and pixel.
fn marks(out: &mut String, timeline: &Timeline, lane: &Lane<'_>, axis: &Axis, y: f64) {
    let mut drawn: HashSet<(&'static str, &'static str, i64)> = HashSet::new();
    let cy = y + LANE / 2.0;
    // Context under failures: drawn first.
    let mut order: Vec<usize> = lane.entries.clone();
    order.sort_by_key(|&i| std::cmp::Reverse(weight(&timeline.entries[i])));
    for i in order {
        let entry = &timeline.entries[i];
        if matches!(entry.what, What::Check { .. }) || Some(i) == timeline.first_error {
            continue;
        }
        let (kind, role) = (what_class(&entry.what), role_class(entry.role));
        let x = axis.x(entry.time_ms);
        if !drawn.insert((kind, role, x.round() as i64)) {
            continue;
        }
        let end = until(entry).map(|ms| axis.x(ms));
        out.push_str(&shape(
            kind,
            role,
            x,
            cy,
            end,
            &escape(&mark_title(entry, axis.origin)),
        ));
    }
}

/// One mark: a diamond for an incident, a circle for a finding, a triangle for a
/// runtime finding, a square for an event, a thin bar (or a small square) for a
/// collective. `title` is HTML.
fn shape(kind: &str, role: &str, x: f64, y: f64, end: Option<f64>, title: &str) -> String {
    let class = format!("mark {kind} {role}");
    let title = if title.is_empty() {
        String::new()
    } else {
        format!("<title>{title}</title>")
    };
    let m = MARK;
    match kind {
        "incident" => format!(
            r#"<polygon class="{class}" points="{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}">{title}</polygon>"#,
            y - m - 1.0,
            x + m + 1.0,
            y + m + 1.0,
            x - m - 1.0
        ),
        "finding" => {
            format!(
                r#"<circle class="{class}" cx="{x:.1}" cy="{y:.1}" r="{m:.1}">{title}</circle>"#
            )
        }
        "runtime_finding" => format!(
            r#"<polygon class="{class}" points="{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}">{title}</polygon>"#,
            y - m,
            x + m,
            y + m,
            x - m,
            y + m
        ),
        "collective" => {
            let width = end.map_or(2.0 * m - 2.0, |end| (end - x).max(2.0));
            let left = if end.is_some() { x } else { x - m + 1.0 };
            format!(
                r#"<rect class="{class}" x="{left:.1}" y="{:.1}" width="{width:.1}" height="4">{title}</rect>"#,
                y - 2.0
            )
        }
        _ => format!(
            r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}">{title}</rect>"#,
            x - m + 1.0,
            y - m + 1.0,
            2.0 * m - 2.0,
            2.0 * m - 2.0
        ),
    }
}

/// The first error: its mark on the lane `lane`, a line through every lane at its time,
/// and its label in the band above the lanes, where it covers no lane, bar or mark.
fn first_error_mark(out: &mut String, entry: &Entry, lane: &str, axis: &Axis, y: f64, height: f64) {
    let x = axis.x(entry.time_ms);
    let cy = y + LANE / 2.0;
    // Beside the line; near the right edge, to its left.
    let (label_x, anchor) = if x > WIDTH - 160.0 {
        (x - 4.0, "end")
    } else {
        (x + 4.0, "start")
    };
    out.push_str(&format!(
        r#"<g id="first-error" class="first-error-mark" data-marks="{}"><line class="first-error-line" x1="{x:.1}" x2="{x:.1}" y1="2.0" y2="{:.1}"/>{}<text class="first-error-label" x="{label_x:.1}" y="{:.1}" text-anchor="{anchor}">first error</text></g>"#,
        escape(lane),
        height - BOTTOM,
        shape(
            what_class(&entry.what),
            "first_error",
            x,
            cy,
            until(entry).map(|ms| axis.x(ms)),
            &escape(&mark_title(entry, axis.origin))
        ),
        LABEL_BAND - 4.0
    ));
}

/// `+0.051 s`, or `+0.051 s to +0.060 s` for a row whose entries differ in time.
fn row_time(timeline: &Timeline, row: &[usize], origin: u64) -> String {
    let times = row.iter().map(|&i| timeline.entries[i].time_ms);
    let (first, last) = (
        times.clone().min().unwrap_or(origin),
        times.max().unwrap_or(origin),
    );
    if first == last {
        offset(first, origin)
    } else {
        format!("{} to {}", offset(first, origin), offset(last, origin))
    }
}

/// The failures and events, the findings of one check on one node folded into one row,
/// failures first when there are more rows than the table lists.
fn entries_table(timeline: &Timeline) -> String {
    let listed: Vec<usize> = timeline
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| weight(e) < 4)
        .map(|(i, _)| i)
        .collect();
    let rows = timeline::rows(timeline, &listed);
    let mut shown: Vec<&Vec<usize>> = rows.iter().collect();
    if shown.len() > SHOWN_ENTRIES {
        shown.sort_by_key(|row| {
            let first = row[0];
            (timeline.entries[first].role == Role::Context, first)
        });
        shown.truncate(SHOWN_ENTRIES);
        shown.sort_by_key(|row| row[0]);
    }
    let mut out = format!(
        "<section id=\"entries\">\n<h2>Failures and events ({})</h2>\n",
        listed.len()
    );
    if listed.is_empty() {
        out.push_str("<p class=\"empty\">No failure or event on the timeline.</p>\n</section>\n");
        return out;
    }
    if rows.len() < listed.len() {
        out.push_str(&format!(
            "<p class=\"count\">{} entries in {} rows: the findings of one check on one node are one row</p>\n",
            listed.len(),
            rows.len()
        ));
    }
    if shown.len() < rows.len() {
        out.push_str(&format!(
            "<p class=\"count\">showing {} of {} rows, failures first; the <a href=\"{}\">timeline JSON</a> has every entry</p>\n",
            shown.len(),
            rows.len(),
            escape(&href::timeline_api(&timeline.job_id, Some(timeline.attempt)))
        ));
    }
    out.push_str("<table class=\"entries\">\n<thead><tr><th>time</th><th>node</th><th>what</th><th>lane</th><th>role</th><th>detail</th></tr></thead>\n<tbody>\n");
    let members: HashSet<&str> = timeline.members.iter().map(|m| m.node.as_str()).collect();
    let origin = timeline.origin_ms();
    for row in shown {
        let i = row[0];
        let entry = &timeline.entries[i];
        let role = role_class(entry.role);
        let node = escape(&entry.node);
        let node = if members.contains(entry.node.as_str()) {
            format!(
                "<a href=\"{}\">{node}</a>",
                escape(&href::instance(
                    &timeline.job_id,
                    &entry.node,
                    Some(timeline.attempt)
                ))
            )
        } else {
            node
        };
        let link = if Some(i) == timeline.first_error {
            "<a href=\"#first-error\">first error</a>".to_owned()
        } else {
            role_word(entry.role).to_owned()
        };
        out.push_str(&format!(
            "<tr class=\"{role}\" data-role=\"{role}\" data-count=\"{}\"><td>{}</td><td>{node}</td><td>{}</td><td>{}</td><td>{link}</td><td>{}</td></tr>\n",
            row.len(),
            row_time(timeline, row, origin),
            escape(&what_text(&entry.what)),
            entry
                .lane
                .map_or_else(String::new, |lane| format!("<span class=\"lane\">{lane}</span>")),
            escape(&timeline::row_detail(timeline, row))
        ));
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
    out
}

#[cfg(test)]
mod tests;
