//! Prometheus `/metrics` of the server itself: requests by route and status, and the
//! reports and events taken in.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpuvet_model::prometheus::label_value;

use crate::AppState;

/// Counters since the server started.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// By (method, route template, status).
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    pub attempts_accepted: AtomicU64,
    pub reports_accepted: AtomicU64,
    pub events_accepted: AtomicU64,
    /// Writes refused for their content (400, 409) or their token (401).
    pub writes_refused: AtomicU64,
    /// Transactions of pushes committed (each holds the pushes queued meanwhile).
    pub write_transactions: AtomicU64,
    /// Pushes queued for the next transaction now.
    pub pushes_waiting: AtomicU64,
    /// Pushes in a transaction not yet committed now.
    pub pushes_storing: AtomicU64,
    /// Events answered `429`: their node was over its budget.
    pub events_limited: AtomicU64,
    /// Pushed events answered with a count above 1: repeats counted on an earlier
    /// event's row (`gpuvet_model::event_fold`), and such a repeat sent again.
    pub events_folded: AtomicU64,
    /// Connections open now.
    pub connections_open: AtomicU64,
    /// Connections answered `503` over the cap.
    pub connections_refused: AtomicU64,
    /// Connections closed for a head, handshake or silence past its timeout.
    pub connections_timed_out: AtomicU64,
}

impl Metrics {
    fn count(&self, method: &str, route: &str, status: u16) {
        let mut requests = self
            .requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *requests
            .entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
    }

    /// The counters in Prometheus's text format.
    pub fn text(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP gpuvet_server_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE gpuvet_server_requests_total counter\n");
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for ((method, route, status), count) in requests.iter() {
            let _ = writeln!(
                out,
                "gpuvet_server_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {count}",
                label_value(method),
                label_value(route)
            );
        }
        for (name, help, counter) in [
            (
                "gpuvet_server_attempts_accepted_total",
                "Attempts taken in as they began (recorded, or already recorded).",
                &self.attempts_accepted,
            ),
            (
                "gpuvet_server_reports_accepted_total",
                "Reports taken in (stored, or already stored under their id).",
                &self.reports_accepted,
            ),
            (
                "gpuvet_server_events_accepted_total",
                "Events taken in (stored, or already stored under their id).",
                &self.events_accepted,
            ),
            (
                "gpuvet_server_writes_refused_total",
                "Pushed reports and events refused for their content or token.",
                &self.writes_refused,
            ),
            (
                "gpuvet_server_write_transactions_total",
                "Transactions committed to store pushes; each holds every push that queued while the one before it was stored.",
                &self.write_transactions,
            ),
            (
                "gpuvet_server_events_limited_total",
                "Pushed events answered 429 because their node was over its budget.",
                &self.events_limited,
            ),
            (
                "gpuvet_server_events_folded_total",
                "Pushed events answered with a count above 1: repeats counted on the row of an event stored before, not stored apart.",
                &self.events_folded,
            ),
            (
                "gpuvet_server_connections_refused_total",
                "Connections answered 503 because the server had its maximum open.",
                &self.connections_refused,
            ),
            (
                "gpuvet_server_connections_timed_out_total",
                "Connections closed because a request head, a TLS handshake or the next byte did not come in time.",
                &self.connections_timed_out,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", counter.load(Ordering::Relaxed));
        }
        for (name, help, gauge) in [
            (
                "gpuvet_server_connections_open",
                "Connections open now.",
                &self.connections_open,
            ),
            (
                "gpuvet_server_pushes_waiting",
                "Pushes queued for the next write transaction now.",
                &self.pushes_waiting,
            ),
            (
                "gpuvet_server_pushes_storing",
                "Pushes in a write transaction that has not committed yet, now.",
                &self.pushes_storing,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {}", gauge.load(Ordering::Relaxed));
        }
        out
    }
}

/// Middleware: counts every request under its route template (never the raw path,
/// whose names would make one series per node), or `unmatched`.
pub(crate) async fn count_requests(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = next.run(request).await;
    state
        .metrics
        .count(&method, &route, response.status().as_u16());
    response
}

/// `GET /metrics`.
pub(crate) async fn render(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.text(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_route_and_status_in_the_text_format() {
        let metrics = Metrics::default();
        metrics.count("GET", "/api/v1/jobs/{job}", 200);
        metrics.count("GET", "/api/v1/jobs/{job}", 200);
        metrics.count("GET", "/api/v1/jobs/{job}", 404);
        metrics.reports_accepted.fetch_add(3, Ordering::Relaxed);
        let text = metrics.text();
        assert!(
            text.contains(
                "gpuvet_server_requests_total{method=\"GET\",route=\"/api/v1/jobs/{job}\",status=\"200\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains("status=\"404\"} 1\n"), "{text}");
        assert!(
            text.contains("gpuvet_server_reports_accepted_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("gpuvet_server_events_accepted_total 0\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        metrics.count("GET", "/odd\"route\\\n", 404);
        let text = metrics.text();
        assert!(
            text.contains("route=\"/odd\\\"route\\\\\\n\",status=\"404\"} 1\n"),
            "{text}"
        );
    }
}
