//! The links of `gpuvet serve`, in one place: every page builds its hrefs here, so a
//! route changes in one file. Path segments and query values are percent-encoded
//! (RFC 3986: everything but `A-Z a-z 0-9 - . _ ~`, byte by byte in UTF-8), so a job
//! or node name with `/`, `?`, `&`, `#`, `%`, spaces or markup stays one segment or one
//! value.
//!
//! The builders return URLs, not HTML: a page puts one in an attribute through
//! [`escape`](crate::escape) like any other text (a query's `&` becomes `&amp;`).
//!
//! Routes:
//! - `/` and `/instances?job=JOB`: the instances page, all jobs or one;
//! - `/instances/{job}/{node}` and `?attempt=N`: one instance, latest or given attempt;
//! - `/events?kind=KIND&job=JOB&node=NODE`: the deployment events, each filter optional;
//! - `/jobs/{job}/timeline?attempt=N`: one attempt's timeline and explanation;
//! - `/api/v1/jobs/{job}/instances/{node}`: one instance as JSON (`InstanceSummary`);
//! - `/api/v1/jobs/{job}/timeline?attempt=N` and `/api/v1/jobs/{job}/explain?attempt=N`:
//!   the same as JSON (`Timeline`, `Explanation`);
//! - `/api/v1/jobs/{job}/bundle?attempt=N`: everything kept about one attempt, to
//!   download;
//! - `/reports/{run_id}.html`: one run's static report;
//! - `/nodes` and `/nodes/{node}`: the nodes ranked by failures, one node's history.

use std::fmt::Write;

use gpuvet_model::events::EventKind;

/// `text` with every byte outside the unreserved set written as `%XX`. Safe as one path
/// segment and as one query value (where a `+` must not read as a space, so it is
/// encoded too).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The nodes page: the nodes ranked by failed runs.
pub fn nodes() -> String {
    "/nodes".to_owned()
}

/// One node's history across jobs.
pub fn node(node: &str) -> String {
    format!("/nodes/{}", percent_encode(node))
}

/// The instances page: every job (`/`) or one job.
pub fn instances(job: Option<&str>) -> String {
    match job {
        None => "/".to_owned(),
        Some(job) => format!("/instances?job={}", percent_encode(job)),
    }
}

/// One instance's page: its latest attempt, or the given one.
pub fn instance(job: &str, node: &str, attempt: Option<u32>) -> String {
    let mut url = format!(
        "/instances/{}/{}",
        percent_encode(job),
        percent_encode(node)
    );
    if let Some(attempt) = attempt {
        let _ = write!(url, "?attempt={attempt}");
    }
    url
}

/// The events page with the given filters; `/events` without any.
pub fn events(kind: Option<EventKind>, job: Option<&str>, node: Option<&str>) -> String {
    let params: Vec<String> = [
        ("kind", kind.map(EventKind::as_str)),
        ("job", job),
        ("node", node),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some(format!("{name}={}", percent_encode(value?))))
    .collect();
    if params.is_empty() {
        "/events".to_owned()
    } else {
        format!("/events?{}", params.join("&"))
    }
}

/// One instance as JSON, which the live page polls.
pub fn instance_api(job: &str, node: &str) -> String {
    format!(
        "/api/v1/jobs/{}/instances/{}",
        percent_encode(job),
        percent_encode(node)
    )
}

/// `path` with `?attempt=N` when an attempt is given.
fn with_attempt(mut path: String, attempt: Option<u32>) -> String {
    if let Some(attempt) = attempt {
        let _ = write!(path, "?attempt={attempt}");
    }
    path
}

/// One attempt's timeline page: the job's latest attempt, or the given one.
pub fn timeline(job: &str, attempt: Option<u32>) -> String {
    with_attempt(format!("/jobs/{}/timeline", percent_encode(job)), attempt)
}

/// One attempt's timeline as JSON.
pub fn timeline_api(job: &str, attempt: Option<u32>) -> String {
    with_attempt(
        format!("/api/v1/jobs/{}/timeline", percent_encode(job)),
        attempt,
    )
}

/// One attempt's explanation as JSON.
pub fn explain_api(job: &str, attempt: Option<u32>) -> String {
    with_attempt(
        format!("/api/v1/jobs/{}/explain", percent_encode(job)),
        attempt,
    )
}

/// Everything kept about one attempt, as one file to download.
pub fn bundle(job: &str, attempt: Option<u32>) -> String {
    with_attempt(
        format!("/api/v1/jobs/{}/bundle", percent_encode(job)),
        attempt,
    )
}

/// One run's static report (the crate's [`page`](crate::page)).
pub fn report(run_id: i64) -> String {
    format!("/reports/{run_id}.html")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of [`percent_encode`], to show nothing is lost.
    fn percent_decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn unreserved_characters_stay_and_everything_else_is_encoded() {
        assert_eq!(percent_encode("node-07.rack_a~1"), "node-07.rack_a~1");
        assert_eq!(percent_encode("a b/c?d&e=f#g"), "a%20b%2Fc%3Fd%26e%3Df%23g");
        assert_eq!(percent_encode("100%+1"), "100%25%2B1");
        assert_eq!(percent_encode("<script>"), "%3Cscript%3E");
        assert_eq!(percent_encode("\"'"), "%22%27");
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(percent_encode(""), "");
    }

    #[test]
    fn encoding_round_trips_and_leaves_no_character_that_splits_a_url_or_an_attribute() {
        for text in [
            "<script>alert('x')</script>",
            "a/b?c=d&e#f",
            "ü 💥 %41",
            "..",
            "",
        ] {
            let encoded = percent_encode(text);
            assert_eq!(percent_decode(&encoded), text);
            assert!(
                encoded
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._~%".contains(c)),
                "{encoded}"
            );
        }
    }

    #[test]
    fn links_match_the_routes() {
        assert_eq!(instances(None), "/");
        assert_eq!(instances(Some("job 7")), "/instances?job=job%207");
        assert_eq!(instance("job-7", "node-3", None), "/instances/job-7/node-3");
        assert_eq!(
            instance("job/7", "node?3", Some(2)),
            "/instances/job%2F7/node%3F3?attempt=2"
        );
        assert_eq!(events(None, None, None), "/events");
        assert_eq!(
            events(Some(EventKind::SanityCheckFailed), None, None),
            "/events?kind=SanityCheckFailed"
        );
        assert_eq!(
            events(Some(EventKind::InstanceExited), Some("j&1"), Some("n=2")),
            "/events?kind=InstanceExited&job=j%261&node=n%3D2"
        );
        assert_eq!(events(None, None, Some("node-1")), "/events?node=node-1");
        assert_eq!(
            instance_api("job-7", "node 3"),
            "/api/v1/jobs/job-7/instances/node%203"
        );
        assert_eq!(report(42), "/reports/42.html");
        assert_eq!(timeline("job-7", None), "/jobs/job-7/timeline");
        assert_eq!(
            timeline("job/7", Some(3)),
            "/jobs/job%2F7/timeline?attempt=3"
        );
        assert_eq!(
            timeline_api("job 7", Some(1)),
            "/api/v1/jobs/job%207/timeline?attempt=1"
        );
        assert_eq!(
            explain_api("job-7", Some(2)),
            "/api/v1/jobs/job-7/explain?attempt=2"
        );
        assert_eq!(
            bundle("j&1", Some(2)),
            "/api/v1/jobs/j%261/bundle?attempt=2"
        );
    }
}
