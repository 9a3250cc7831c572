//! What a fault bundle holds, and how one attempt's [`JobRecord`] becomes its files and
//! back: the README for the receiving team (the verdict first, then the findings
//! folded as the terminal folds them), `explain` and the timeline (text and JSON), every node's report and inventory, the events, the runtime and
//! flight-recorder findings, and the config and environment without their secrets.
//! Reports lose their raw samples when the bundle would grow past its budget, and the
//! bundle says so.

use std::collections::BTreeSet;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use gpuvet_analysis::explain::{self, Explanation};
use gpuvet_analysis::fold::fold;
use gpuvet_analysis::timeline::{self, Timeline};
use gpuvet_model::diagnosis::TERMINAL_WIDTH;
use gpuvet_model::events::{Event, EventKind};
use gpuvet_model::record::{FLIGHT_RECORDER_SOURCE, JobRecord};
use gpuvet_model::redact::{REDACTED, redact_environment, redact_json};
use gpuvet_model::results::{RunReport, Verdict};
use gpuvet_model::time::format_utc_ms;

use crate::{Bundle, BundleError, BundleFile, Limits, safe_file_name};

/// This layout's version, in `bundle.json`.
pub const FORMAT: u32 = 1;
/// What the reports may take before their samples are trimmed: the whole bundle of a
/// 64-node job then stays under 5 MB.
pub const REPORTS_BUDGET_BYTES: usize = 3 * 1024 * 1024;
/// The most events a bundle keeps (the newest are dropped past it, and it says so).
pub const MAX_EVENTS: usize = 5_000;
/// The most folded findings the README lists; the reports have every one.
pub const README_FINDINGS: usize = 40;

/// `bundle.json`: what the bundle is about and what was left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleInfo {
    pub format: u32,
    pub job_id: String,
    pub attempt: u32,
    pub created_at_ms: u64,
    pub gpuvet_version: String,
    /// What was trimmed to keep the bundle small.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trimmed: Vec<String>,
    /// The report files, in the record's order.
    pub reports: Vec<String>,
}

/// What went into a bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub info: BundleInfo,
    pub explanation: Explanation,
    pub files: usize,
    pub bytes: u64,
}

/// Writes one attempt's bundle to `out`. `secrets` are values (tokens) that must not
/// appear in it: they are replaced wherever they occur. Every context and event is
/// redacted again first, on top of the redaction it got when it was recorded: one
/// recorded by an older gpuvet may hold what today's rules catch.
pub fn pack(
    record: &JobRecord,
    created_at_ms: u64,
    gpuvet_version: &str,
    secrets: &[&str],
    out: impl Write,
) -> Result<Packed, BundleError> {
    let record = &redacted(record, secrets);
    let timeline = timeline::assemble(record);
    let explanation = explain::explain(record, &timeline);
    let mut trimmed = Vec::new();
    let reports = trim_reports(&record.reports, REPORTS_BUDGET_BYTES, &mut trimmed);
    let events = if record.events.len() > MAX_EVENTS {
        trimmed.push(format!(
            "events: the first {MAX_EVENTS} of {} are kept",
            record.events.len()
        ));
        &record.events[..MAX_EVENTS]
    } else {
        &record.events[..]
    };
    let mut files = Files::default();
    let report_names = unique_names(reports.iter().map(|r| r.node.as_str()));
    let mut report_paths = Vec::new();
    for (report, name) in reports.iter().zip(&report_names) {
        let path = format!("reports/{name}.json");
        files.json(&path, report)?;
        report_paths.push(path);
    }
    let inventories = inventories(record);
    let inventory_names = unique_names(inventories.iter().map(|(node, _)| node.as_str()));
    for ((_, inventory), name) in inventories.iter().zip(&inventory_names) {
        files.json(&format!("inventory/{name}.json"), inventory)?;
    }
    files.json("events.json", events)?;
    let runtime: Vec<&Event> = events
        .iter()
        .filter(|e| e.event.kind == EventKind::RuntimeCheckFailed)
        .collect();
    let (flight_recorder, c4d): (Vec<&Event>, Vec<&Event>) =
        runtime.into_iter().partition(|e| is_flight_recorder(e));
    files.json("runtime_findings.json", &c4d)?;
    if !flight_recorder.is_empty() {
        let analyses: Vec<&serde_json::Value> =
            flight_recorder.iter().map(|e| &e.event.details).collect();
        files.json("flight_recorder.json", &analyses)?;
    }
    if let Some(context) = record.group_report().and_then(|r| r.context.as_ref()) {
        let mut config = context.config.clone();
        redact_json(&mut config, secrets);
        files.json("config.json", &config)?;
        files.json(
            "environment.json",
            &redact_environment(&context.environment, secrets),
        )?;
    }
    files.json("timeline.json", &timeline)?;
    files.text("timeline.txt", timeline::render(&timeline));
    files.json("explain.json", &explanation)?;
    files.text("explain.txt", explain::render(&explanation));
    let info = BundleInfo {
        format: FORMAT,
        job_id: record.job_id.clone(),
        attempt: record.attempt,
        created_at_ms,
        gpuvet_version: gpuvet_version.to_owned(),
        trimmed,
        reports: report_paths,
    };
    files.json("bundle.json", &info)?;
    let findings = record
        .group_report()
        .map(|report| fold(report).lines())
        .unwrap_or_default();
    files.text(
        "README.md",
        readme(&info, &explanation, &timeline, &findings, &files),
    );
    let files = files.scrubbed(secrets);
    let count = files.len();
    let root = format!(
        "gpuvet-bundle-{}-attempt{}",
        safe_file_name(&record.job_id),
        record.attempt
    );
    let bytes = crate::write(&files, &root, out)?;
    Ok(Packed {
        info,
        explanation,
        files: count,
        bytes,
    })
}

/// Reads a bundle back into the record it was made from, once every file matched its
/// manifest.
pub fn unpack(input: impl Read) -> Result<(BundleInfo, JobRecord), BundleError> {
    let bundle: Bundle = crate::read(input, &Limits::default())?;
    let info: BundleInfo = bundle.json("bundle.json")?;
    if info.format != FORMAT {
        return Err(BundleError::Format {
            found: info.format,
            expected: FORMAT,
        });
    }
    let reports = info
        .reports
        .iter()
        .map(|path| bundle.json::<RunReport>(path))
        .collect::<Result<Vec<_>, _>>()?;
    let events: Vec<Event> = bundle.json("events.json")?;
    let record = JobRecord {
        job_id: info.job_id.clone(),
        attempt: info.attempt,
        reports,
        events,
    };
    Ok((info, record))
}

fn is_flight_recorder(event: &Event) -> bool {
    event.event.details.get("source").and_then(|s| s.as_str()) == Some(FLIGHT_RECORDER_SOURCE)
}

/// Each node's inventory: the devices it reported when it joined the group (from the
/// coordinator's record), else those of its own report; with what
/// `inventory_consistency` found across the group.
fn inventories(record: &JobRecord) -> Vec<(String, serde_json::Value)> {
    let group = record.group_report();
    let consistency = group.and_then(|r| {
        r.checks
            .iter()
            .find(|c| c.name == gpuvet_model::catalog::CheckName::InventoryConsistency)
    });
    let finding = |node: &str| {
        consistency.and_then(|c| {
            c.entities
                .iter()
                .find(|e| e.entity.node() == node)
                .map(|e| serde_json::json!({"verdict": e.verdict, "reason": e.reason}))
        })
    };
    let members = group
        .and_then(|r| r.group.as_ref())
        .and_then(|g| g.timeline.as_ref())
        .map(|t| t.members.as_slice())
        .unwrap_or_default();
    let mut out: Vec<(String, serde_json::Value)> = members
        .iter()
        .filter(|m| !m.devices.is_empty())
        .map(|m| {
            let value = serde_json::json!({
                "node": m.node,
                "rank": m.rank,
                "devices": m.devices,
                "inventory_consistency": finding(&m.node),
            });
            (m.node.clone(), value)
        })
        .collect();
    for report in &record.reports {
        if out.iter().any(|(node, _)| *node == report.node) || report.devices.is_empty() {
            continue;
        }
        let value = serde_json::json!({
            "node": report.node,
            "backend": report.backend,
            "devices": report.devices,
            "inventory_consistency": finding(&report.node),
        });
        out.push((report.node.clone(), value));
    }
    out
}

/// File names for the nodes: safe, and unique even when two names map to one.
fn unique_names<'a>(nodes: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut taken = BTreeSet::new();
    nodes
        .map(|node| {
            let base = safe_file_name(node);
            let mut name = base.clone();
            let mut n = 2;
            while !taken.insert(name.clone()) {
                name = format!("{base}-{n}");
                n += 1;
            }
            name
        })
        .collect()
}

/// The reports, with raw samples dropped while they take more than `budget`: first
/// those of healthy entities, then every one. Verdicts, values and evidence stay.
fn trim_reports(reports: &[RunReport], budget: usize, trimmed: &mut Vec<String>) -> Vec<RunReport> {
    let size = |reports: &[RunReport]| {
        reports
            .iter()
            .map(|r| serde_json::to_vec(r).map_or(usize::MAX, |j| j.len()))
            .sum::<usize>()
    };
    let mut reports = reports.to_vec();
    if size(&reports) <= budget {
        return reports;
    }
    let mut dropped = 0usize;
    for report in &mut reports {
        for check in &mut report.checks {
            for entity in &mut check.entities {
                if entity.verdict == Verdict::Ok {
                    dropped += entity.measurement.samples.len();
                    entity.measurement.samples.clear();
                }
            }
        }
    }
    let mut note = format!("reports: {dropped} raw samples of healthy entities were dropped");
    if size(&reports) > budget {
        let mut more = 0usize;
        for report in &mut reports {
            for check in &mut report.checks {
                for entity in &mut check.entities {
                    more += entity.measurement.samples.len();
                    entity.measurement.samples.clear();
                }
            }
        }
        note = format!(
            "reports: every raw sample ({}) was dropped; values, verdicts and evidence are kept",
            dropped + more
        );
    }
    trimmed.push(note);
    reports
}

/// The bundle's files as they are put together.
#[derive(Default)]
struct Files {
    files: Vec<BundleFile>,
}

impl Files {
    fn json<T: Serialize + ?Sized>(&mut self, path: &str, value: &T) -> Result<(), BundleError> {
        let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| BundleError::Encode {
            path: path.to_owned(),
            source,
        })?;
        bytes.push(b'\n');
        self.files.push(BundleFile {
            path: path.to_owned(),
            bytes,
        });
        Ok(())
    }

    fn text(&mut self, path: &str, text: String) {
        self.files.push(BundleFile {
            path: path.to_owned(),
            bytes: text.into_bytes(),
        });
    }

    /// Every file with each secret replaced wherever it occurs.
    fn scrubbed(self, secrets: &[&str]) -> Vec<BundleFile> {
        self.files
            .into_iter()
            .map(|file| match std::str::from_utf8(&file.bytes) {
                Ok(text) => BundleFile {
                    bytes: gpuvet_model::redact::scrub(text, secrets)
                        .into_owned()
                        .into_bytes(),
                    path: file.path,
                },
                Err(_) => file,
            })
            .collect()
    }
}

/// The README for the team that receives the bundle: the verdict as `explain` prints
/// it, the first error, the folded `findings` (one line per slow node, or per check and
/// node), the hypotheses, and what each file holds.
fn readme(
    info: &BundleInfo,
    explanation: &Explanation,
    timeline: &Timeline,
    findings: &[String],
    files: &Files,
) -> String {
    let mut out = format!(
        "# gpuvet fault bundle: job `{}`, attempt {}\n\nMade {} by gpuvet {}.\n\n",
        info.job_id,
        info.attempt,
        format_utc_ms(info.created_at_ms),
        info.gpuvet_version
    );
    out.push_str("## What went wrong\n\n");
    if let Some(diagnosis) = &explanation.diagnosis {
        out.push_str("```text\n");
        for line in diagnosis.lines(TERMINAL_WIDTH) {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str("```\n\n");
    }
    match (&explanation.first_error, &explanation.diagnosis) {
        (Some(first), Some(_)) => out.push_str(&format!(
            "- **First error:** `{}`: {}\n",
            first.node, first.detail
        )),
        (Some(first), None) => out.push_str(&format!(
            "- **First error:** `{}`: {}\n- **Lane:** {}\n- **Hand to:** {}\n- **Next step:** {}\n",
            first.node,
            first.detail,
            explanation.lane.map_or("unknown", |l| l.as_str()),
            explanation.team,
            explanation.next_step
        )),
        (None, _) => out.push_str(&format!(
            "No error was found. Outcome: {}. {}\n",
            explanation.outcome, explanation.next_step
        )),
    }
    if !findings.is_empty() {
        out.push_str(
            "\n## Findings\n\nRepeats are said once: a node that failed most checks is one \
             line, and so are the GPUs of one node in one check (`reports/` has every \
             entity).\n\n```text\n",
        );
        for line in findings.iter().take(README_FINDINGS) {
            out.push_str(line);
            out.push('\n');
        }
        if findings.len() > README_FINDINGS {
            out.push_str(&format!(
                "and {} more lines: see `explain.txt` and `reports/`\n",
                findings.len() - README_FINDINGS
            ));
        }
        out.push_str("```\n");
    }
    out.push_str("\n## Hypotheses\n\n| hypothesis | conclusion | evidence |\n|---|---|---|\n");
    for judged in &explanation.hypotheses {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            judged.hypothesis.as_str(),
            judged.conclusion,
            judged.evidence.replace('|', "\\|")
        ));
    }
    out.push_str(&format!(
        "\nEvery time is on `{}`'s clock; each node's offset and its uncertainty are in \
         `timeline.json` (`members`).\n",
        timeline.clock_of
    ));
    out.push_str("\n## Files\n\n");
    for file in &files.files {
        out.push_str(&format!("- `{}`: {}\n", file.path, describe(&file.path)));
    }
    out.push_str(
        "\n## Checking the bundle\n\n`MANIFEST` holds the sha256 of every file: run \
         `sha256sum -c MANIFEST` in this directory, or `gpuvet explain` on the `.tar.gz`, \
         which refuses a bundle whose files do not match it.\n",
    );
    if !info.trimmed.is_empty() {
        out.push_str("\n## Left out to keep the bundle small\n\n");
        for note in &info.trimmed {
            out.push_str(&format!("- {note}\n"));
        }
    }
    out.push_str(&format!(
        "\nSecrets (tokens, passwords, credentials in URLs, values that look like keys) were \
         replaced with `{REDACTED}` before anything was stored or packed.\n"
    ));
    out
}

fn describe(path: &str) -> &'static str {
    match path {
        "events.json" => "every deployment event of the attempt, on each node's own clock",
        "runtime_findings.json" => "the runtime check's (`c4d`) findings: XIDs, ECC, hangs",
        "flight_recorder.json" => "the flight-recorder analysis of the app's collectives",
        "config.json" => "the config file as written, secrets redacted",
        "environment.json" => {
            "the launcher's, NCCL's, CUDA's and gpuvet's variables, secrets redacted"
        }
        "timeline.json" | "timeline.txt" => "the group's timeline on one clock, first error marked",
        "explain.json" | "explain.txt" => {
            "the first error, its lane, team, next step and hypotheses"
        }
        "bundle.json" => "what the bundle is about and what was trimmed",
        _ if path.starts_with("reports/") => "a node's report: every check, entity and verdict",
        _ if path.starts_with("inventory/") => {
            "a node's devices as it reported them, and what `inventory_consistency` found"
        }
        _ => "",
    }
}

/// `record` with every report's context and every event redacted again.
fn redacted(record: &JobRecord, secrets: &[&str]) -> JobRecord {
    let mut record = record.clone();
    for context in record.reports.iter_mut().filter_map(|r| r.context.as_mut()) {
        context.redact(secrets);
    }
    for event in &mut record.events {
        event.event.redact(secrets);
    }
    record
}

#[cfg(test)]
mod tests;
