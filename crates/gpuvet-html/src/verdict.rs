//! The verdict block: a failed run's [`Diagnosis`] at the top of a page, in the words
//! the terminal prints (the culprit and what it did, the team and lane to hand it to,
//! why, the next step, the other culprits), so a reader has the conclusion before the
//! tables. The static report, the instance page and the timeline page show it.

use gpuvet_model::diagnosis::Diagnosis;

use crate::escape;

/// The block of `diagnosis`, as a `<section id="verdict">` whose `data-culprit-lane` is the
/// culprit's lane (empty when unknown).
pub fn verdict_block(diagnosis: &Diagnosis) -> String {
    let lane = diagnosis.lane.map_or("", |lane| lane.as_str());
    let lane_tag = if lane.is_empty() {
        String::new()
    } else {
        format!(" <span class=\"lane\">{lane}</span>")
    };
    let mut out = format!(
        "<section id=\"verdict\" class=\"verdict\" data-culprit-lane=\"{lane}\">\n<p class=\"headline\"><strong class=\"culprit\">{}</strong>; hand it to <span class=\"team\">{}</span>{lane_tag}</p>\n",
        escape(&diagnosis.headline),
        escape(&diagnosis.team),
    );
    out.push_str(&format!(
        "<dl class=\"facts explain\">\n<dt>why</dt><dd class=\"why\">{}</dd>\n<dt>next step</dt><dd class=\"next-step\">{}</dd>\n</dl>\n",
        with_code(&diagnosis.why),
        with_code(&diagnosis.next_step)
    ));
    if !diagnosis.others.is_empty() {
        let others: Vec<String> = diagnosis.others.iter().map(|o| with_code(o)).collect();
        out.push_str(&format!(
            "<ul class=\"others\"><li>also: {}</li></ul>\n",
            others.join("</li><li>also: ")
        ));
    }
    out.push_str("</section>\n");
    out
}

/// `text` escaped, with each part in backticks set as code; text with an odd number
/// of backticks stays as it is.
pub(crate) fn with_code(text: &str) -> String {
    let escaped = escape(text);
    let parts: Vec<&str> = escaped.split('`').collect();
    if parts.len().is_multiple_of(2) {
        return escaped;
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                (*part).to_owned()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::diagnosis::team;
    use gpuvet_model::results::Lane;

    fn slow_node() -> Diagnosis {
        Diagnosis {
            headline: "local-2 is slow".to_owned(),
            why: "slow in 10 of 13 checks, all 8 GPUs and every link".to_owned(),
            lane: Some(Lane::Host),
            team: team(Lane::Host).to_owned(),
            next_step: "check `local-2` as a whole".to_owned(),
            others: vec!["local-1<->local-3: slow in all_reduce_2".to_owned()],
        }
    }

    #[test]
    fn the_block_says_the_culprit_team_lane_why_next_step_and_others() {
        let html = verdict_block(&slow_node());
        assert!(
            html.contains("<section id=\"verdict\" class=\"verdict\" data-culprit-lane=\"host\">"),
            "{html}"
        );
        assert!(
            html.contains("<p class=\"headline\"><strong class=\"culprit\">local-2 is slow</strong>; hand it to <span class=\"team\">the host team</span> <span class=\"lane\">host</span></p>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<dd class=\"why\">slow in 10 of 13 checks, all 8 GPUs and every link</dd>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<dd class=\"next-step\">check <code>local-2</code> as a whole</dd>"),
            "{html}"
        );
        assert!(
            html.contains("<li>also: local-1&lt;-&gt;local-3: slow in all_reduce_2</li>"),
            "{html}"
        );
    }

    #[test]
    fn an_unknown_lane_is_left_out_and_no_others_no_list() {
        let mut diagnosis = slow_node();
        diagnosis.lane = None;
        diagnosis.others.clear();
        diagnosis.headline = "<b>x</b>".to_owned();
        let html = verdict_block(&diagnosis);
        assert!(html.contains("data-culprit-lane=\"\""), "{html}");
        assert!(!html.contains("class=\"lane\""), "{html}");
        assert!(!html.contains("<ul"), "{html}");
        assert!(html.contains("&lt;b&gt;x&lt;/b&gt;"), "{html}");
    }

    #[test]
    fn backticks_become_code_and_stray_ones_stay() {
        assert_eq!(
            with_code("drain `n<1>` now"),
            "drain <code>n&lt;1&gt;</code> now"
        );
        assert_eq!(with_code("one ` only"), "one ` only");
    }
}
