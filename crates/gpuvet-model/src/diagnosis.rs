//! The conclusion of a failed run in words for people: who is at fault, which team to
//! hand it to, the next step, and the other culprits. `gpuvet explain`, the verdict
//! block that `check` and `run` print after their table, the JSON report, the pages,
//! pushed events and Kubernetes Events all show this one value, so they say the same
//! thing; the analysis crate makes it.
//!
//! Also the number words every reader sees (`40 %`, `420 TFLOPS`), so the terminal, the
//! pages and events write them one way.

use serde::{Deserialize, Serialize};

use crate::analysis::fmt_value;
use crate::results::Lane;

/// The most lines of the verdict block, whatever the group's size.
pub const MAX_LINES: usize = 8;

/// The widest line a terminal report prints by default.
pub const TERMINAL_WIDTH: usize = 100;

/// The conclusion of one failed run or attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Diagnosis {
    /// The culprit and what it did, in a few words: `local-2 is slow`, `rank 1 (n1)
    /// never joined`, `local-1<->local-2 is slow`.
    pub headline: String,
    /// What it rests on, in one sentence: `slow in 10 of 13 checks, all 8 GPUs and
    /// every link`.
    pub why: String,
    /// The lane of the culprit; `None` when the record does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<Lane>,
    /// Who to hand it to: `the host team`.
    pub team: String,
    /// What to do first.
    pub next_step: String,
    /// The other culprits, one line each (already bounded: the last may count the
    /// rest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<String>,
}

impl Diagnosis {
    /// The verdict block: at most [`MAX_LINES`] lines, none wider than `width`
    /// columns (at least 40). The first names the culprit, the team and the lane.
    pub fn lines(&self, width: usize) -> Vec<String> {
        let width = width.max(40);
        let mut lines = Vec::new();
        wrap_into(&mut lines, "verdict: ", &self.first_line(), width, 2);
        wrap_into(&mut lines, "  why: ", &self.why, width, 2);
        wrap_into(&mut lines, "  next step: ", &self.next_step, width, 3);
        let room = MAX_LINES.saturating_sub(lines.len());
        let shown = if self.others.len() > room {
            room.saturating_sub(1)
        } else {
            self.others.len()
        };
        for other in &self.others[..shown] {
            wrap_into(&mut lines, "  also: ", other, width, 1);
        }
        if shown < self.others.len() {
            lines.push(format!(
                "  and {} more culprits: see `gpuvet explain`",
                self.others.len() - shown
            ));
        }
        lines
    }

    /// The whole conclusion on one line, for an event's message and a Kubernetes
    /// Event's note (which add the lane themselves).
    pub fn message(&self) -> String {
        let mut text = format!(
            "{}; hand it to {}: {}. next step: {}",
            self.headline, self.team, self.why, self.next_step
        );
        if !self.others.is_empty() {
            text.push_str(&format!(". also: {}", self.others.join("; ")));
        }
        text
    }

    /// Whether a finding's line (`local-2: slow in …`) says only what this does.
    pub fn says(&self, line: &str) -> bool {
        line.split_once(": ").is_some_and(|(who, what)| {
            what == self.why && self.headline.starts_with(&format!("{who} is "))
        })
    }

    fn first_line(&self) -> String {
        match self.lane {
            Some(lane) => format!("{}; hand it to {} [lane: {lane}]", self.headline, self.team),
            None => format!("{}; hand it to {}", self.headline, self.team),
        }
    }
}

/// The team that owns a lane, in a few words (`explain` gives their remit too).
pub fn team(lane: Lane) -> &'static str {
    match lane {
        Lane::Host => "the host team",
        Lane::Network => "the network team",
        Lane::Platform => "the platform team",
        Lane::App => "the application's owners",
    }
}

/// A percentage as people read it: `40 %`, `5 %`, `2.5 %`, `0.3 %`.
pub fn fmt_pct(pct: f64) -> String {
    format!("{} %", pct_number(pct))
}

/// The number of [`fmt_pct`]: whole above 10, one decimal below, no `.0`.
pub fn pct_number(pct: f64) -> String {
    if !pct.is_finite() || pct.abs() >= 10.0 {
        return format!("{pct:.0}");
    }
    let text = format!("{pct:.1}");
    text.strip_suffix(".0").unwrap_or(&text).to_owned()
}

/// The number of a quantity in `unit`: percentages as [`pct_number`], the rest with
/// three significant digits (`420`, `27.0`).
pub fn quantity_number(value: f64, unit: &str) -> String {
    if unit == "%" {
        pct_number(value)
    } else {
        fmt_value(value)
    }
}

/// A value with its unit: `420 TFLOPS`, `27.0 GB/s`, `100 %`.
pub fn fmt_quantity(value: f64, unit: &str) -> String {
    let number = quantity_number(value, unit);
    if unit.is_empty() {
        number
    } else {
        format!("{number} {unit}")
    }
}

/// `text` after `lead`, word-wrapped at `width` columns, continuation lines indented
/// under the text. Words are never cut: one longer than a line stands on its own.
pub fn wrap(lead: &str, text: &str, width: usize) -> Vec<String> {
    wrap_hanging(lead, lead.chars().count(), text, width)
}

/// [`wrap`] with continuation lines indented by `indent` columns. A unit that stands
/// after its number (`5 %`) stays on the number's line.
pub fn wrap_hanging(lead: &str, indent: usize, text: &str, width: usize) -> Vec<String> {
    let indent = " ".repeat(indent.min(width / 2));
    let mut words: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match words.last_mut() {
            Some(last) if word.starts_with('%') => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_owned()),
        }
    }
    let mut lines = Vec::new();
    let mut current = lead.to_owned();
    let mut empty = true;
    for word in &words {
        let fits = current.chars().count() + usize::from(!empty) + word.chars().count() <= width;
        if !fits && !empty {
            lines.push(std::mem::replace(&mut current, indent.clone()));
            empty = true;
        }
        if !empty {
            current.push(' ');
        }
        current.push_str(word);
        empty = false;
    }
    lines.push(current);
    lines
}

/// Appends [`wrap`]'s lines to `lines`, at most `most` of them and none wider than
/// `width`: what does not fit is cut, and the cut line ends with `…`.
pub fn wrap_into(lines: &mut Vec<String>, lead: &str, text: &str, width: usize, most: usize) {
    wrap_hanging_into(lines, lead, lead.chars().count(), text, width, most);
}

/// [`wrap_into`] with continuation lines indented by `indent` columns.
pub fn wrap_hanging_into(
    lines: &mut Vec<String>,
    lead: &str,
    indent: usize,
    text: &str,
    width: usize,
    most: usize,
) {
    let wrapped = wrap_hanging(lead, indent, text, width);
    let more = wrapped.len() > most;
    for (i, line) in wrapped.into_iter().take(most.max(1)).enumerate() {
        let last = i + 1 == most.max(1);
        lines.push(if line.chars().count() > width || (last && more) {
            cut(&line, width)
        } else {
            line
        });
    }
}

/// `line` ended with `…`, within `width` columns.
fn cut(line: &str, width: usize) -> String {
    let kept: String = line.chars().take(width.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow_node() -> Diagnosis {
        Diagnosis {
            headline: "local-2 is slow".to_owned(),
            why: "slow in 10 of 13 checks, all 8 GPUs and every link".to_owned(),
            lane: Some(Lane::Host),
            team: team(Lane::Host).to_owned(),
            next_step: "check `local-2` as a whole: its power and thermal limits and clocks \
                        (`nvidia-smi -q -d PERFORMANCE,POWER`), the CPU governor and the PCIe \
                        links; drain it and rebuild the instance elsewhere if it stays slow"
                .to_owned(),
            others: Vec::new(),
        }
    }

    #[test]
    fn the_first_line_names_the_culprit_the_team_and_the_lane() {
        let lines = slow_node().lines(100);
        assert_eq!(
            lines[0],
            "verdict: local-2 is slow; hand it to the host team [lane: host]"
        );
        assert_eq!(
            lines[1],
            "  why: slow in 10 of 13 checks, all 8 GPUs and every link"
        );
        assert!(lines[2].starts_with("  next step: check `local-2` as a whole"));
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{lines:#?}");
        assert!(lines[3].starts_with("             "), "{lines:#?}");
    }

    #[test]
    fn many_culprits_stay_within_eight_lines() {
        let mut diagnosis = slow_node();
        diagnosis.others = (0..64).map(|i| format!("node-{i} is slow")).collect();
        let lines = diagnosis.lines(100);
        assert_eq!(lines.len(), MAX_LINES, "{lines:#?}");
        assert_eq!(
            lines.last().unwrap(),
            "  and 62 more culprits: see `gpuvet explain`"
        );
        assert_eq!(lines[5], "  also: node-0 is slow");
    }

    #[test]
    fn a_narrow_terminal_cuts_instead_of_overflowing() {
        let lines = slow_node().lines(40);
        assert!(lines.len() <= MAX_LINES);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:#?}");
        assert!(lines.iter().any(|l| l.ends_with('…')), "{lines:#?}");
    }

    #[test]
    fn a_word_longer_than_the_line_is_cut() {
        let mut lines = Vec::new();
        wrap_into(&mut lines, "  why: ", &"x".repeat(80), 40, 2);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].chars().count(), 40);
    }

    #[test]
    fn the_message_is_one_line_with_everything() {
        let mut diagnosis = slow_node();
        diagnosis.others = vec!["local-3/dev1 is slow in gemm_flops".to_owned()];
        let message = diagnosis.message();
        assert!(!message.contains('\n'));
        assert!(
            message
                .starts_with("local-2 is slow; hand it to the host team: slow in 10 of 13 checks")
        );
        assert!(message.ends_with(". also: local-3/dev1 is slow in gemm_flops"));
    }

    #[test]
    fn percentages_have_sensible_precision() {
        assert_eq!(fmt_pct(40.0), "40 %");
        assert_eq!(fmt_pct(66.67), "67 %");
        assert_eq!(fmt_pct(5.0), "5 %");
        assert_eq!(fmt_pct(2.54), "2.5 %");
        assert_eq!(fmt_pct(0.0), "0 %");
        assert_eq!(fmt_quantity(420.0, "TFLOPS"), "420 TFLOPS");
        assert_eq!(fmt_quantity(27.0, "GB/s"), "27.0 GB/s");
        assert_eq!(fmt_quantity(100.0, "%"), "100 %");
    }
}
