use gpuvet_analysis::explain::explain;
use gpuvet_analysis::timeline::{MemberView, assemble};
use gpuvet_model::events::EventKind;
use gpuvet_model::record::JobRecord;

use super::*;
use crate::site::test_data::{HOSTILE_JOB, HOSTILE_NODE, T0, assert_no_markup_from, group_record};

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("node-{i}")).collect()
}

/// The page of `record`, with the attempt as the job's latest.
fn page(record: &JobRecord) -> String {
    let timeline = assemble(record);
    let explanation = explain(record, &timeline);
    timeline_page(&timeline, &explanation, record.attempt)
}

/// The `data-lane` of every lane, in the order drawn.
fn lane_order(html: &str) -> Vec<&str> {
    html.split("<g class=\"swim ")
        .skip(1)
        .map(|lane| {
            let start = lane.find("data-lane=\"").unwrap() + "data-lane=\"".len();
            let end = start + lane[start..].find('"').unwrap();
            &lane[start..end]
        })
        .collect()
}

#[test]
fn a_small_group_has_a_lane_per_node_and_its_first_error_marked_once() {
    let html = page(&group_record("job-7", &names(4), 2));
    assert_eq!(
        lane_order(&html),
        ["node-2", "node-3", "node-0", "node-1"],
        "the first error's node first, then the other failure's"
    );
    assert_eq!(html.matches("<g class=\"swim node").count(), 4);
    assert!(!html.contains("<g class=\"swim folded"), "{html}");
    // The first error: one anchor, one red mark, its label and a line through the lanes.
    assert_eq!(html.matches("id=\"first-error\"").count(), 1, "{html}");
    assert_eq!(html.matches(" first_error\"").count(), 2, "{html}");
    assert_eq!(
        html.matches("<polygon class=\"mark incident first_error\"")
            .count(),
        1
    );
    assert!(html.contains(">first error</text>"), "{html}");
    assert!(html.contains("<line class=\"first-error-line\""), "{html}");
    // Its label stands in the band above the time axis, clear of the lane it marks
    // (the first, at `TOP`) and of the tick labels.
    assert!(
        html.contains("<g id=\"first-error\" class=\"first-error-mark\" data-marks=\"node-2\">"),
        "{html}"
    );
    let label = html
        .split("<text class=\"first-error-label\"")
        .nth(1)
        .unwrap();
    let y: f64 = label
        .split("y=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(y <= LABEL_BAND, "the label's baseline at {y}");
    assert!(
        y + 20.0 < TOP,
        "room for the tick labels between it and the lanes"
    );
    // What followed is greyed; the XID on node-3 is a failure of its own.
    assert!(
        html.contains("<circle class=\"mark finding consequence\""),
        "{html}"
    );
    assert!(
        html.contains("<polygon class=\"mark incident consequence\""),
        "{html}"
    );
    assert!(
        html.contains("<rect class=\"mark event consequence\""),
        "{html}"
    );
    assert!(
        html.contains("<polygon class=\"mark runtime_finding other_failure\""),
        "{html}"
    );
    assert!(html.contains("<tr class=\"consequence\" data-role=\"consequence\" data-count=\"1\">"));
    // Each node's two checks as bars, the failed one in its own class.
    assert_eq!(
        html.matches("<rect class=\"check-span passed\"").count(),
        4 + 1
    );
    assert_eq!(html.matches("<rect class=\"check-span failed\"").count(), 4);
    // Lanes link to the instances of this attempt.
    assert!(
        html.contains("<a href=\"/instances/job-7/node-2?attempt=1\"><text class=\"label\""),
        "{html}"
    );
    assert!(html.contains("<ul class=\"legend\">"));
}

#[test]
fn the_explanation_leads_with_the_verdict_then_the_first_error_and_six_hypotheses() {
    let html = page(&group_record("job-7", &names(4), 2));
    // The verdict block, in the words `explain` prints: culprit, team, lane, why, next
    // step and the other culprits.
    assert!(
        html.contains("<section id=\"verdict\" class=\"verdict\" data-culprit-lane=\"host\">"),
        "{html}"
    );
    assert!(
        html.contains("<strong class=\"culprit\">rank 2 (node-2) stopped answering</strong>; hand it to <span class=\"team\">the host team</span> <span class=\"lane\">host</span>"),
        "{html}"
    );
    assert!(
        html.contains("<dd class=\"next-step\">log in to <code>node-2</code>"),
        "backticks as code: {html}"
    );
    assert!(html.contains("<li>also: node-3: "), "{html}");
    // It says the team, lane and next step: they are not said twice.
    assert!(!html.contains("<dt>hand to</dt>"), "{html}");
    assert!(
        html.contains("<p class=\"first-error\"><strong>first error</strong>: <a href=\"#first-error\">node-2</a> unresponsive <span class=\"lane\">host</span>: rank 2 (node-2) unresponsive</p>"),
        "{html}"
    );
    assert_eq!(html.matches("data-hypothesis=").count(), 6, "{html}");
    assert!(
        html.contains("<tr class=\"confirmed\" data-hypothesis=\"host\"><td>host</td><td><span class=\"conclusion confirmed\">confirmed</span></td>"),
        "{html}"
    );
    let verdict = html.find("id=\"verdict\"").unwrap();
    assert!(verdict < html.find("class=\"first-error\"").unwrap());
    let explained = html.find("id=\"explanation\"").unwrap();
    assert!(explained < html.find("<svg class=\"lanes\"").unwrap());
}

#[test]
fn without_a_verdict_the_explanation_names_the_lane_team_and_next_step() {
    let record = group_record("job-7", &names(4), 2);
    let timeline = assemble(&record);
    let mut explanation = explain(&record, &timeline);
    explanation.diagnosis = None;
    let html = timeline_page(&timeline, &explanation, 1);
    assert!(!html.contains("id=\"verdict\""), "{html}");
    assert!(html.contains("<dt>lane</dt><dd>host</dd>"), "{html}");
    assert!(
        html.contains("<dt>hand to</dt><dd>the host team (GPUs, servers and their drivers)</dd>"),
        "{html}"
    );
    assert!(
        html.contains("<dd class=\"next-step\">log in to <code>node-2</code>"),
        "{html}"
    );
}

#[test]
fn the_header_links_the_instances_the_json_the_bundle_and_other_attempts() {
    let record = group_record("job-7", &names(2), 1);
    let timeline = assemble(&record);
    let explanation = explain(&record, &timeline);
    let html = timeline_page(&timeline, &explanation, 3);
    assert!(
        html.contains("<a class=\"bundle\" href=\"/api/v1/jobs/job-7/bundle?attempt=1\" download>Download bundle</a>"),
        "{html}"
    );
    assert!(html.contains("<a href=\"/api/v1/jobs/job-7/timeline?attempt=1\">timeline JSON</a>"));
    assert!(html.contains("<a href=\"/api/v1/jobs/job-7/explain?attempt=1\">explanation JSON</a>"));
    assert!(html.contains("<a href=\"/instances?job=job-7\">instances of the job</a>"));
    assert!(
        html.contains("attempts: <strong aria-current=\"page\">1</strong>, <a href=\"/jobs/job-7/timeline?attempt=2\">2</a>, <a href=\"/jobs/job-7/timeline?attempt=3\">3</a> (latest 3)"),
        "{html}"
    );
    assert!(
        html.contains("<title>gpuvet: timeline of job job-7, attempt 1</title>"),
        "{html}"
    );
    assert!(html.contains("<a href=\"/\" aria-current=\"page\">Instances</a>"));
    let single = timeline_page(&timeline, &explanation, 1);
    assert!(!single.contains("attempts:"), "{single}");
}

#[test]
fn a_group_of_1024_nodes_folds_its_quiet_nodes_and_leads_with_the_failing_one() {
    let record = group_record("job-7", &names(1024), 512);
    let html = page(&record);
    assert!(html.len() < 1_000_000, "{} bytes", html.len());
    let order = lane_order(&html);
    assert_eq!(order[0], "node-512", "{order:?}");
    assert_eq!(order[1], "node-1023", "the XID next: {order:?}");
    assert_eq!(order[2], "node-513", "then who timed out on it: {order:?}");
    let own = html.matches("<g class=\"swim node").count();
    let folded = html.matches("<g class=\"swim folded").count();
    assert_eq!(own, SHOWN_LANES);
    assert!((1..=FOLDED_LANES + 1).contains(&folded), "{folded} folded");
    assert_eq!(order.len(), own + folded);
    // Folded lanes name their nodes as ranges and draw one bar per check.
    assert!(order[own].starts_with("node-["), "{order:?}");
    assert!(order[own].ends_with(')'), "with the count: {order:?}");
    let first_folded = html.find("<g class=\"swim folded").unwrap();
    let lane = &html[first_folded..first_folded + html[first_folded..].find("</g>").unwrap()];
    assert_eq!(
        lane.matches("<rect class=\"check-span").count(),
        2,
        "{lane}"
    );
    assert!(
        !lane.contains("<a href"),
        "a fold links no instance: {lane}"
    );
    assert_eq!(html.matches("id=\"first-error\"").count(), 1);
    // The table lists the failures first and says how many more the JSON has.
    assert_eq!(html.matches("<tr class=\"").count(), SHOWN_ENTRIES + 6);
    let count = html
        .find("<p class=\"count\">showing")
        .map(|at| &html[at..at + 80]);
    assert!(
        html.contains("showing 200 of 1028 rows, failures first"),
        "{count:?}"
    );
    assert!(html.contains("<tr class=\"first_error\" data-role=\"first_error\" data-count=\"1\">"));
    assert!(
        html.contains("<tr class=\"other_failure\" data-role=\"other_failure\" data-count=\"1\">")
    );
}

#[test]
fn a_large_group_with_few_failures_gives_only_them_a_lane() {
    let mut record = group_record("job-7", &names(300), 7);
    record
        .events
        .retain(|e| e.event.kind != EventKind::SanityCheckFailed);
    let html = page(&record);
    let order = lane_order(&html);
    assert_eq!(&order[..3], ["node-7", "node-299", "node-8"], "{order:?}");
    assert_eq!(html.matches("<g class=\"swim node").count(), 3);
    // 297 quiet nodes in blocks of 19, in natural order.
    assert_eq!(order[3], "node-[0-6,9-20] (19)", "{order:?}");
    assert_eq!(html.matches("<g class=\"swim folded").count(), FOLDED_LANES);
}

#[test]
fn an_attempt_with_nothing_recorded_says_so() {
    let record = JobRecord {
        job_id: "job-7".to_owned(),
        attempt: 2,
        reports: Vec::new(),
        events: Vec::new(),
    };
    let html = page(&record);
    assert!(
        html.contains("Nothing was recorded for this attempt yet."),
        "{html}"
    );
    assert!(
        html.contains("<strong>first error</strong>: none"),
        "{html}"
    );
    assert!(!html.contains("<svg class=\"lanes\""), "{html}");
    assert!(!html.contains("id=\"first-error\""), "{html}");
    assert!(html.contains("No failure or event on the timeline."));
    assert_eq!(html.matches("data-hypothesis=").count(), 6);
}

#[test]
fn hostile_names_are_text_everywhere_on_the_page() {
    let names = vec![
        HOSTILE_NODE.to_owned(),
        "node-1".to_owned(),
        "node-2".to_owned(),
    ];
    let html = page(&group_record(HOSTILE_JOB, &names, 0));
    assert_no_markup_from(&html);
    assert_eq!(html.matches("<script").count(), 0, "{html}");
    assert!(
        html.contains("href=\"/instances/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E/%3Cscript%3Ealert%28%27x%27%29%3C%2Fscript%3E?attempt=1\""),
        "{html}"
    );
    assert!(
        html.contains("<text class=\"label\" x=\"202.0\" y=\"56.0\">&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;<title>"),
        "{html}"
    );
}

#[test]
fn a_hand_built_timeline_places_its_entries_on_one_axis() {
    let entry = |node: &str, time_ms: u64, what: What, role: Role| Entry {
        time_ms,
        local_time_ms: None,
        node: node.to_owned(),
        rank: None,
        what,
        lane: None,
        role,
        detail: format!("{node} at {time_ms}"),
    };
    let member = |node: &str| MemberView {
        rank: None,
        node: node.to_owned(),
        offset_ms: 0.0,
        uncertainty_ms: 0.0,
        measured: false,
        slurm: None,
    };
    let timeline = Timeline {
        job_id: "j".to_owned(),
        attempt: 1,
        clock_of: "a".to_owned(),
        members: vec![member("a"), member("b")],
        entries: vec![
            entry(
                "a",
                T0,
                What::Check {
                    check: gpuvet_model::catalog::CheckName::GemmFlops,
                    status: gpuvet_model::results::CheckStatus::Passed,
                    until_ms: T0 + 4_000,
                },
                Role::Context,
            ),
            entry(
                "b",
                T0 + 2_000,
                What::RuntimeFinding {
                    check: "xid".into(),
                    source: "c4d".to_owned(),
                    xid: Some(79),
                },
                Role::FirstError,
            ),
            entry(
                "torch rank 3",
                T0 + 3_000,
                What::Collective {
                    op: "allreduce".to_owned(),
                    seq: 4,
                    state: "started".to_owned(),
                    torch_rank: 3,
                    until_ms: None,
                },
                Role::Context,
            ),
        ],
        first_error: Some(1),
        notes: vec!["a <note>".to_owned()],
    };
    let record = JobRecord {
        job_id: "j".to_owned(),
        attempt: 1,
        reports: Vec::new(),
        events: Vec::new(),
    };
    let explanation = explain(&record, &timeline);
    let html = timeline_page(&timeline, &explanation, 1);
    assert_eq!(lane_order(&html), ["b", "a", "torch rank 3"]);
    // A node in a Slurm job says which job and step its lane is.
    assert!(!html.contains("slurm job"), "{html}");
    let mut in_slurm = timeline.clone();
    in_slurm.members[1].slurm = Some(gpuvet_model::slurm::SlurmNames {
        job_id: "77".into(),
        step_id: Some("0".into()),
        node: Some("b".into()),
        restart_count: 0,
    });
    let slurm_html = timeline_page(&in_slurm, &explanation, 1);
    assert!(
        slurm_html.contains("b [slurm job 77 step 0 on b]: clock not measured"),
        "{slurm_html}"
    );
    // A check over the whole axis, from the label column to the right edge.
    let plot = WIDTH - LEFT - RIGHT;
    assert!(
        html.contains(&format!(
            "<rect class=\"check-span passed\" x=\"{LEFT:.1}\" y=\"67.0\" width=\"{plot:.1}\""
        )),
        "{html}"
    );
    // The first error half-way along, on lane `b`.
    let middle = LEFT + plot / 2.0;
    assert!(
        html.contains(&format!(
            "<polygon class=\"mark runtime_finding first_error\" points=\"{middle:.1},47.0"
        )),
        "{html}"
    );
    assert!(
        html.contains(">+0.5 s</text>"),
        "ticks every half second: {html}"
    );
    assert!(html.contains("runtime xid (XID 79)"), "{html}");
    // A rank without a node links nowhere.
    assert!(!html.contains("torch%20rank"), "{html}");
    assert!(html.contains("<li>a &lt;note&gt;</li>"), "{html}");
}

#[test]
fn backticks_become_code_and_stray_ones_stay() {
    assert_eq!(
        with_code("drain `n<1>` now"),
        "drain <code>n&lt;1&gt;</code> now"
    );
    assert_eq!(with_code("one ` only"), "one ` only");
    assert_eq!(shorten("abc"), "abc");
    assert_eq!(shorten(&"x".repeat(40)).chars().count(), LABEL_CHARS);
}
