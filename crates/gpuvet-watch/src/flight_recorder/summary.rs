//! The human summary of a flight-recorder report, as `gpuvet fr` prints it.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::{DumpFormat, FrFinding, FrReport, GroupReport};

/// A few lines: the dumps read, the first error, each process group, other findings
/// and notes.
pub fn summary(report: &FrReport) -> String {
    let mut out = String::new();
    let ranks: Vec<u32> = report.dumps.iter().map(|dump| dump.rank).collect();
    let formats: BTreeSet<&str> = report
        .dumps
        .iter()
        .map(|dump| match dump.format {
            DumpFormat::Pickle => "pickle",
            DumpFormat::Json => "json",
        })
        .collect();
    let versions: BTreeSet<&str> = report
        .dumps
        .iter()
        .filter_map(|dump| dump.version.as_deref())
        .collect();
    let _ = write!(
        out,
        "flight recorder: {} dump{} ({}; {}",
        ranks.len(),
        if ranks.len() == 1 { "" } else { "s" },
        ranks_text(&ranks),
        formats.into_iter().collect::<Vec<_>>().join(", ")
    );
    if !versions.is_empty() {
        let _ = write!(
            out,
            ", version {}",
            versions.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    out.push(')');
    if !report.missing_ranks.is_empty() {
        let _ = write!(out, "; no dump from {}", ranks_text(&report.missing_ranks));
    }
    out.push('\n');

    match &report.first_error {
        Some(first) => {
            let _ = writeln!(out, "first error: {}", finding_line(first));
        }
        None => {
            let _ = writeln!(
                out,
                "first error: none; every process group's ranks entered and completed the same \
                 collectives"
            );
        }
    }

    if !report.groups.is_empty() {
        out.push_str("process groups:\n");
        for group in &report.groups {
            let _ = writeln!(out, "  {}", group_line(group));
        }
    }

    let others: Vec<&FrFinding> = report.findings.iter().filter(|f| !f.first_error).collect();
    if !others.is_empty() {
        out.push_str("other findings:\n");
        for finding in others {
            let _ = writeln!(out, "  {}", finding_line(finding));
        }
    }
    if !report.notes.is_empty() {
        out.push_str("notes:\n");
        for note in &report.notes {
            let _ = writeln!(out, "  {note}");
        }
    }
    out
}

fn finding_line(finding: &FrFinding) -> String {
    format!("[{}] {}", finding.lane.as_str(), finding.message)
}

fn group_line(group: &GroupReport) -> String {
    let mut line = format!("`{}`", group.name);
    if !group.desc.is_empty() && group.desc != group.name {
        let _ = write!(line, " ({})", group.desc);
    }
    let _ = write!(line, ", {}", ranks_text(&group.ranks));
    if !group.membership_known {
        line.push_str(" (members not recorded)");
    }
    match (group.aligned_from_seq, group.last_seq) {
        (Some(from), Some(to)) => {
            let _ = write!(line, ", seq {from}..{to}");
        }
        _ => line.push_str(", no collectives recorded"),
    }
    match &group.first_error {
        Some(error) => {
            let _ = write!(line, ": {}", error.kind.as_str());
            if let Some(seq) = error.seq {
                let _ = write!(line, " at seq {seq}");
            }
            if !error.culprit_ranks.is_empty() {
                let _ = write!(line, ", culprit {}", ranks_text(&error.culprit_ranks));
            }
            if !error.waiting_ranks.is_empty() {
                let _ = write!(line, ", waiting {}", ranks_text(&error.waiting_ranks));
            }
        }
        None => match group.last_completed_seq {
            Some(seq) => {
                let _ = write!(line, ": ok up to seq {seq}");
            }
            None => line.push_str(": ok"),
        },
    }
    line
}

/// "rank 2", "ranks 0-3", "ranks 0, 2, 5-7".
pub(super) fn ranks_text(ranks: &[u32]) -> String {
    let mut sorted: Vec<u32> = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut spans: Vec<String> = Vec::new();
    let mut index = 0;
    while index < sorted.len() {
        let start = sorted[index];
        let mut end = start;
        while index + 1 < sorted.len() && sorted[index + 1] == end + 1 {
            index += 1;
            end = sorted[index];
        }
        spans.push(match end - start {
            0 => start.to_string(),
            1 => format!("{start}, {end}"),
            _ => format!("{start}-{end}"),
        });
        index += 1;
    }
    match sorted.len() {
        0 => "no rank".to_string(),
        1 => format!("rank {}", spans[0]),
        _ => format!("ranks {}", spans.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_compacted() {
        assert_eq!(ranks_text(&[2]), "rank 2");
        assert_eq!(ranks_text(&[3, 1, 0, 2]), "ranks 0-3");
        assert_eq!(ranks_text(&[0, 2, 5, 6, 7]), "ranks 0, 2, 5-7");
        assert_eq!(ranks_text(&[4, 5]), "ranks 4, 5");
        assert_eq!(ranks_text(&[]), "no rank");
    }
}
