//! The deployment events page: a filter form (type, job, node) that submits to
//! `/events` with GET, and the events the server chose (newest first, as many as it
//! limits them to), one row each. The instance page reuses the table.

use gpuvet_model::events::{Event, EventKind};

use crate::escape;
use crate::site::layout::{Section, document};
use crate::site::{href, when};

/// The events page. `events` are the ones to show; `total` is how many match the
/// filters, so the page can say "showing 100 of 2345". The filters are the request's,
/// shown back in the form.
pub fn events_page(
    events: &[Event],
    kind: Option<EventKind>,
    job: Option<&str>,
    node: Option<&str>,
    total: usize,
) -> String {
    let mut body = String::from("<h1>Deployment events</h1>\n");
    body.push_str(&filter_form(kind, job, node));
    let count = if total > events.len() {
        format!("showing {} of {total} events", events.len())
    } else {
        let plural = if events.len() == 1 { "" } else { "s" };
        format!("{} event{plural}", events.len())
    };
    body.push_str(&format!("<p class=\"count\">{count}</p>\n"));
    if events.is_empty() {
        body.push_str("<p class=\"empty\">No event matches these filters.</p>\n");
    } else {
        body.push_str(&events_table(events));
    }
    document("gpuvet: events", Some(Section::Events), &body)
}

fn filter_form(kind: Option<EventKind>, job: Option<&str>, node: Option<&str>) -> String {
    let mut out = format!(
        "<form class=\"filters\" method=\"get\" action=\"{}\">\n<label>type <select name=\"kind\">\n<option value=\"\"{}>all types</option>\n",
        escape(&href::events(None, None, None)),
        if kind.is_none() { " selected" } else { "" }
    );
    for option in EventKind::ALL {
        let selected = if kind == Some(option) {
            " selected"
        } else {
            ""
        };
        out.push_str(&format!(
            "<option value=\"{option}\"{selected}>{option}</option>\n"
        ));
    }
    out.push_str("</select></label>\n");
    for (name, value) in [("job", job), ("node", node)] {
        out.push_str(&format!(
            "<label>{name} <input type=\"text\" name=\"{name}\" value=\"{}\"></label>\n",
            escape(value.unwrap_or(""))
        ));
    }
    out.push_str(&format!(
        "<button type=\"submit\">Filter</button> <a href=\"{}\">clear</a>\n</form>\n",
        escape(&href::events(None, None, None))
    ));
    out
}

/// One row per event: time (UTC), kind, job, attempt, node, lane, message (and
/// `×N, last …` for one counted N times). The job links to its instances, the node to
/// the instance page of the event's attempt.
pub(crate) fn events_table(events: &[Event]) -> String {
    let mut out = String::from(
        "<table class=\"events\">\n<thead><tr><th>time (UTC)</th><th>type</th><th>job</th><th>attempt</th><th>node</th><th>lane</th><th>message</th></tr></thead>\n<tbody>\n",
    );
    for event in events {
        let who = &event.attempt;
        let kind = event.event.kind.as_str();
        let lane = event.event.lane.map_or_else(String::new, |lane| {
            format!("<span class=\"lane\">{lane}</span>")
        });
        let repeats = event.repeats_note().map_or_else(String::new, |note| {
            format!(" <span class=\"repeats\">{}</span>", escape(&note))
        });
        out.push_str(&format!(
            "<tr data-kind=\"{kind}\" data-node=\"{node}\"><td>{}</td><td><span class=\"kind {kind}\">{kind}</span></td><td><a href=\"{}\">{job}</a></td><td>{}</td><td><a href=\"{}\">{node}</a></td><td>{lane}</td><td>{}{repeats}</td></tr>\n",
            when::utc(event.event.time_ms),
            escape(&href::instances(Some(&who.job_id))),
            who.attempt,
            escape(&href::instance(&who.job_id, &who.node, Some(who.attempt))),
            escape(&event.event.message),
            job = escape(&who.job_id),
            node = escape(&who.node),
        ));
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::test_data::{HOSTILE_JOB, HOSTILE_NODE, assert_no_markup_from, event};

    #[test]
    fn the_form_offers_every_kind_and_selects_the_current_one() {
        let html = events_page(&[], Some(EventKind::RuntimeCheckFailed), None, None, 0);
        assert!(
            html.contains("<form class=\"filters\" method=\"get\" action=\"/events\">"),
            "{html}"
        );
        assert!(html.contains("<select name=\"kind\">"), "{html}");
        for kind in EventKind::ALL {
            assert!(
                html.contains(&format!("<option value=\"{kind}\"")),
                "{kind}"
            );
        }
        assert_eq!(html.matches(" selected>").count(), 1, "{html}");
        assert!(
            html.contains(
                "<option value=\"RuntimeCheckFailed\" selected>RuntimeCheckFailed</option>"
            ),
            "{html}"
        );
        assert!(html.contains("No event matches"), "{html}");
        assert!(html.contains("<a href=\"/events\" aria-current=\"page\">Events</a>"));

        let all = events_page(&[], None, None, None, 0);
        assert!(
            all.contains("<option value=\"\" selected>all types</option>"),
            "{all}"
        );
        assert_eq!(all.matches(" selected>").count(), 1);
    }

    #[test]
    fn the_form_shows_the_job_and_node_filters_back() {
        let html = events_page(&[], None, Some("job-7"), Some("node-3"), 0);
        assert!(html.contains("<input type=\"text\" name=\"job\" value=\"job-7\">"));
        assert!(html.contains("<input type=\"text\" name=\"node\" value=\"node-3\">"));
        assert!(html.contains("<button type=\"submit\">"));
    }

    #[test]
    fn each_event_is_a_row_with_its_kind_and_links_to_its_job_and_instance() {
        let events = [
            event(1, EventKind::SanityCheckFailed, "job-7", 2, "node-3"),
            event(2, EventKind::InstanceStarted, "job-7", 2, "node-4"),
        ];
        let html = events_page(&events, None, None, None, 2);
        assert_eq!(html.matches("<tr data-kind=").count(), 2, "{html}");
        assert!(html.contains(
            "<tr data-kind=\"SanityCheckFailed\" data-node=\"node-3\"><td><time datetime=\"2026-01-01T00:00:01.000Z\">"
        ), "{html}");
        assert!(html.contains("<span class=\"kind InstanceStarted\">InstanceStarted</span>"));
        assert!(
            html.contains("<a href=\"/instances?job=job-7\">job-7</a>"),
            "{html}"
        );
        assert!(html.contains("<a href=\"/instances/job-7/node-3?attempt=2\">node-3</a>"));
        assert!(html.contains("<span class=\"lane\">host</span>"), "{html}");
        assert!(html.contains("<p class=\"count\">2 events</p>"), "{html}");
    }

    #[test]
    fn an_event_counted_many_times_says_how_often_and_when_last() {
        let mut folded = event(1, EventKind::RuntimeCheckFailed, "job-7", 1, "node-3");
        folded.count = 5;
        folded.last_seen_ms = Some(1_796_011_506_789);
        let once = event(2, EventKind::InstanceStarted, "job-7", 1, "node-4");
        let html = events_page(&[folded, once], None, None, None, 2);
        assert!(
            html.contains(
                "RuntimeCheckFailed on node-3 <span class=\"repeats\">×5, last 2026-11-30T04:05:06.789Z</span></td>"
            ),
            "{html}"
        );
        assert_eq!(html.matches("class=\"repeats\"").count(), 1, "{html}");
    }

    #[test]
    fn a_limited_list_says_how_many_there_are() {
        let events = [event(1, EventKind::InstanceExited, "j", 1, "n")];
        let html = events_page(&events, Some(EventKind::InstanceExited), None, None, 250);
        assert!(html.contains("showing 1 of 250 events"), "{html}");
        let one = events_page(&events, None, None, None, 1);
        assert!(one.contains("<p class=\"count\">1 event</p>"), "{one}");
    }

    #[test]
    fn nothing_from_an_event_or_a_filter_can_inject_markup() {
        let mut hostile = event(
            1,
            EventKind::SanityCheckFailed,
            HOSTILE_JOB,
            1,
            HOSTILE_NODE,
        );
        hostile.event.message = "<b>boom</b>".to_owned();
        let html = events_page(&[hostile], None, Some(HOSTILE_JOB), Some(HOSTILE_NODE), 1);
        assert_no_markup_from(&html);
        assert!(!html.contains("<b>"), "{html}");
        assert!(html.contains("/instances/%22%3E%3Cimg"), "{html}");
    }
}
