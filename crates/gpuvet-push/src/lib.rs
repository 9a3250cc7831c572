//! A node's client of a central `gpuvet serve`: it sends the node's queued reports and
//! events, and reads one attempt's timeline, explanation or bundle back ([`fetch`]), so
//! that a node reads a fleet's record over the server's API, never with a database
//! driver of its own.
//!
//! The store queues what it records in its outbox (see `gpuvet_store`'s `outbox`);
//! this crate empties it. [`drain`] sends what is due once, and is what `gpuvet push`
//! and `gpuvet check` call. [`Sender`] does the same on a thread of its own until it is
//! stopped, so that `gpuvet run` and `gpuvet watch` keep sending while the app runs and
//! never wait for the server.
//!
//! An entry leaves the outbox only when the server accepted it. Every other outcome
//! (no answer, a 5xx, a refusal) keeps it, with the error and a later next try, so
//! nothing is lost; the server stores each report and event once by its own id, so
//! nothing is stored twice when a reply is lost and the entry is sent again.
//!
//! A [`Pusher`] may know several replicas of one server (on one PostgreSQL store). It
//! sends to one at a time and stays with it; only a failure another replica might not
//! share ([`after_failure`]: no connection, a timeout, a 5xx) moves it to the next in
//! its list. A server that asks a node to slow down (`429`, `Retry-After`) is obeyed,
//! not dodged by asking a peer.

pub mod fetch;
mod sender;
mod tls;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use gpuvet_store::{MAX_RETRY_MS, OutboxEntry, OutboxKind, Store, StoreError, next_try_delay_ms};

pub use crate::sender::Sender;
pub use crate::tls::Trust;

/// How long one send may take, connecting included.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Entries taken from the outbox per round.
const BATCH: usize = 64;

/// What went wrong, pushing or reading back: the crate's one error.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The node's own store (the outbox) could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No answer: the server is down, unreachable, or too slow.
    #[error("cannot reach `{url}`")]
    Unreachable {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    /// An answer other than the one asked for, with the server's own message and hint.
    #[error("`{url}` answered {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        /// The server's own message, or the start of what it sent.
        message: String,
        hint: Option<String>,
        /// How long the server asked to be left alone (`Retry-After`), at most
        /// `MAX_RETRY_MS`.
        retry_after: Option<Duration>,
    },
    /// Every replica tried failed; each one's failure, in the order tried.
    #[error("no server took it: {}", list_failures(.failures))]
    NoServerTook { failures: Vec<PushError> },
    /// The answer broke off, or is larger than any the server sends.
    #[error("cannot read the answer of `{url}`")]
    Body {
        url: String,
        #[source]
        source: std::io::Error,
    },
    /// The answer is not the JSON this gpuvet reads.
    #[error("the answer of `{url}` is not the JSON this gpuvet reads")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    /// The CAs to check an `https://` server's certificate against cannot be read.
    #[error("cannot trust {source_of_trust}: {reason}")]
    Trust {
        /// `the CA file `...``, or `the system's CA certificates`.
        source_of_trust: String,
        reason: String,
    },
    /// A bundle read back could not be written where it was asked for.
    #[error("cannot write the bundle from `{url}`")]
    Write {
        url: String,
        #[source]
        source: std::io::Error,
    },
}

impl PushError {
    /// What the user could do next.
    pub fn hint(&self) -> Option<&str> {
        match self {
            PushError::Store(error) => error.hint(),
            PushError::Unreachable { source, .. } if tls::is_certificate_error(source) => Some(
                "the server's certificate is not signed by a CA this node trusts, or names another host: set `gpuvet.report_ca` (or `GPUVET_REPORT_CA`) to the CA's PEM file, and use the host name the certificate names",
            ),
            PushError::Unreachable { .. } => Some(
                "check the server's address (`https://HOST:PORT`: `--server`, `--to` or `gpuvet.report_to`) and that `gpuvet serve` runs there",
            ),
            PushError::Trust { .. } => Some(
                "set `gpuvet.report_ca` (or `GPUVET_REPORT_CA`) to the PEM file of the CA that signed the server's certificate",
            ),
            PushError::Refused { hint, .. } => hint.as_deref(),
            PushError::NoServerTook { failures } => failures.last().and_then(PushError::hint),
            PushError::Body { .. } => Some("retry; if it fails again, check the server's log"),
            PushError::Decode { .. } => Some(
                "the server may run another gpuvet version; read the attempt with the `gpuvet` of the server's version",
            ),
            PushError::Write { .. } => {
                Some("pass `-o` a path in a directory that exists and is writable")
            }
        }
    }

    /// How long the server asked to be left alone (`Retry-After`); of several replicas,
    /// the longest any asked for.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PushError::Refused { retry_after, .. } => *retry_after,
            PushError::NoServerTook { failures } => {
                failures.iter().filter_map(PushError::retry_after).max()
            }
            _ => None,
        }
    }
}

/// Each failure with its causes, one after the other.
fn list_failures(failures: &[PushError]) -> String {
    failures
        .iter()
        .map(|failure| gpuvet_model::diagnostics::with_causes(failure))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a failed send means for the other replicas of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// This replica is down, unreachable, too slow or failing (a 5xx, `408`): the next
    /// one may take the entry.
    TryNext,
    /// Every replica would answer the same (a refused token or body: `400`, `401`,
    /// `409`, …), or the server asked the node to slow down (`429`), which a node
    /// obeys rather than asking a peer: the entry waits in the outbox.
    Stop,
}

/// Whether a failed send moves on to the next replica.
pub fn after_failure(error: &PushError) -> AfterFailure {
    match error {
        PushError::Unreachable { .. } => AfterFailure::TryNext,
        PushError::Refused { status, .. } if *status == 408 || (500..600).contains(status) => {
            AfterFailure::TryNext
        }
        _ => AfterFailure::Stop,
    }
}

/// A `Retry-After` value as a wait from `now`: seconds, or an HTTP date (RFC 9110,
/// section 10.2.3); at most the outbox's longest backoff, so that a wrong clock or a
/// broken server cannot silence a node for long.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or_default(),
    };
    Some(wait.min(Duration::from_millis(MAX_RETRY_MS)))
}

/// A client of one server, or of the replicas of one server: each entry goes to the
/// replica that answered last, and to the next in the list only when that one fails in
/// a way another might not ([`after_failure`]).
#[derive(Debug)]
pub struct Pusher {
    /// Never empty.
    base_urls: Vec<String>,
    /// The replica tried first: the one that answered last.
    current: AtomicUsize,
    authorization: Option<String>,
    agent: ureq::Agent,
}

impl Pusher {
    /// A client of the server at `base_url` (`http[s]://HOST[:PORT][/PATH]`, as
    /// `gpuvet.report_to` is validated), sending `token` when there is one.
    pub fn new(base_url: &str, token: Option<&str>) -> Pusher {
        Pusher::to_any_of(&[base_url], token).expect("one address")
    }

    /// A client of the replicas at `base_urls`, tried in that order from the first;
    /// `None` when there is none.
    pub fn to_any_of(base_urls: &[impl AsRef<str>], token: Option<&str>) -> Option<Pusher> {
        if base_urls.is_empty() {
            return None;
        }
        Some(Pusher {
            base_urls: base_urls
                .iter()
                .map(|url| url.as_ref().trim_end_matches('/').to_owned())
                .collect(),
            current: AtomicUsize::new(0),
            authorization: token
                .filter(|t| !t.is_empty())
                .map(|t| format!("Bearer {t}")),
            agent: agent(SEND_TIMEOUT, None),
        })
    }

    /// Starts at the replica [`start_index`] picks for `key` (the node's name), so that
    /// the nodes of a fleet sharing one list spread over its replicas, each sticking
    /// to its own.
    pub fn starting_with(self, key: &str) -> Pusher {
        self.current
            .store(start_index(key, self.base_urls.len()), Ordering::Relaxed);
        self
    }

    /// Checks an `https://` server's certificate against `trust` (the system's CAs
    /// otherwise); an error when the CAs cannot be read.
    pub fn with_trust(mut self, trust: &Trust) -> Result<Pusher, PushError> {
        if self.base_urls.iter().any(|url| is_https(url)) {
            self.agent = agent(SEND_TIMEOUT, Some(tls::config(trust)?));
        }
        Ok(self)
    }

    /// The address of the replica tried first: the one that answered last.
    pub fn base_url(&self) -> &str {
        &self.base_urls[self.current_index()]
    }

    /// Every replica's address, in the order they are tried after the first.
    pub fn base_urls(&self) -> &[String] {
        &self.base_urls
    }

    /// The server for messages: its address, or the replicas' in their order.
    pub fn describe(&self) -> String {
        match self.base_urls.as_slice() {
            [one] => one.clone(),
            several => format!("one of {}", several.join(", ")),
        }
    }

    fn current_index(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.base_urls.len()
    }

    /// Sends one entry; `Ok` when a replica accepted it (stored now or before). Tries
    /// the replica that answered last, then the others in turn while each fails in a
    /// way the next might not; stays with the first that answers.
    pub fn send(&self, entry: &OutboxEntry) -> Result<(), PushError> {
        let count = self.base_urls.len();
        let first = self.current_index();
        let mut failures = Vec::new();
        for index in (0..count).map(|step| (first + step) % count) {
            match self.send_to(&self.base_urls[index], entry) {
                Ok(()) => {
                    self.current.store(index, Ordering::Relaxed);
                    return Ok(());
                }
                Err(error) => {
                    let next = after_failure(&error);
                    failures.push(error);
                    if next == AfterFailure::Stop {
                        // It answered: it is up, and the others would answer the same.
                        self.current.store(index, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
        Err(match failures.len() {
            1 => failures.remove(0),
            _ => PushError::NoServerTook { failures },
        })
    }

    fn send_to(&self, base_url: &str, entry: &OutboxEntry) -> Result<(), PushError> {
        let path = match entry.kind {
            OutboxKind::Attempt => "/api/v1/attempts",
            OutboxKind::Report => "/api/v1/reports",
            OutboxKind::Event => "/api/v1/events",
        };
        let url = format!("{base_url}{path}");
        let mut request = self
            .agent
            .post(&url)
            .header("content-type", "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let mut response =
            request
                .send(entry.body.as_bytes())
                .map_err(|source| PushError::Unreachable {
                    url: url.clone(),
                    source: Box::new(source),
                })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| retry_after(value, SystemTime::now()));
        let (message, hint) = error_body(&mut response);
        Err(PushError::Refused {
            url,
            status,
            message,
            hint,
            retry_after,
        })
    }
}

/// The replica a node starts with: a hash of `key` (FNV-1a, the same on every
/// platform and build) modulo the number of replicas.
pub fn start_index(key: &str, replicas: usize) -> usize {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    usize::try_from(hash % replicas.max(1) as u64).expect("below the number of replicas")
}

/// The agent every client of a server uses: bounded times (`timeout` for the whole of
/// one exchange), a 4xx or 5xx read as an answer rather than a transport error, and
/// `tls` for an `https://` server (without it, one would be refused: no CA is trusted
/// until [`Trust`] says which).
pub(crate) fn agent(timeout: Duration, tls: Option<ureq::tls::TlsConfig>) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(Duration::from_secs(3)))
        .http_status_as_error(false);
    config = config.tls_config(tls.unwrap_or_else(|| {
        ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(
                Vec::new(),
            )))
            .unversioned_rustls_crypto_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .build()
    }));
    config.build().into()
}

/// Whether `url` is an `https://` address.
pub(crate) fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

/// The `message` and `hint` of the server's JSON error, else the start of whatever it
/// sent and no hint.
pub(crate) fn error_body(
    response: &mut ureq::http::Response<ureq::Body>,
) -> (String, Option<String>) {
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    error_message(&body)
}

fn error_message(body: &str) -> (String, Option<String>) {
    let json = serde_json::from_str::<serde_json::Value>(body).ok();
    let field = |key: &str| {
        json.as_ref()
            .and_then(|json| json["error"][key].as_str().map(str::to_owned))
    };
    match field("message") {
        Some(message) => (message, field("hint")),
        None => (body.chars().take(200).collect(), None),
    }
}

/// What one drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    pub sent: u64,
    pub failed: u64,
    /// Entries still in the outbox afterwards, due or not.
    pub waiting: u64,
    /// The last send's error, when one failed.
    pub last_error: Option<String>,
    /// How long the server asked to be left alone (`Retry-After`), when the last
    /// failure said so: no entry should be sent before then.
    pub retry_after: Option<Duration>,
}

/// Sends the entries due at `now_ms` (every entry with `all`, whatever its next try),
/// oldest first; stops at the first failure (after every replica was tried, where the
/// failure lets the next one be), since the server is then most likely unreachable or
/// refusing for the rest too, and that failure's next try is pushed back: by the
/// backoff, and to at least the server's `Retry-After` when it sent one.
pub fn drain(
    store: &mut Store,
    pusher: &Pusher,
    now_ms: impl Fn() -> u64,
    all: bool,
) -> Result<Drained, PushError> {
    let mut drained = Drained::default();
    'rounds: loop {
        let due_by = if all { u64::MAX } else { now_ms() };
        let entries = store.outbox_due(due_by, BATCH)?;
        if entries.is_empty() {
            break;
        }
        for entry in &entries {
            match pusher.send(entry) {
                Ok(()) => {
                    store.outbox_sent(entry.id)?;
                    drained.sent += 1;
                }
                Err(error) => {
                    let retry_after = error.retry_after();
                    // The outbox keeps the failure as text, causes and all.
                    let text = gpuvet_model::diagnostics::with_causes(&error);
                    let now = now_ms();
                    // The store adds the backoff to the time given: shifting it makes
                    // the next try the later of the backoff and `Retry-After`.
                    let failed_at = retry_after.map_or(now, |wait| {
                        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                        let backoff = next_try_delay_ms(entry.tries.saturating_add(1));
                        now.saturating_add(wait_ms.saturating_sub(backoff))
                    });
                    store.outbox_failed(entry.id, &text, failed_at)?;
                    drained.failed += 1;
                    drained.last_error = Some(text);
                    drained.retry_after = retry_after;
                    break 'rounds;
                }
            }
        }
    }
    drained.waiting = store.outbox_len()?;
    Ok(drained)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_error_message_is_taken_from_its_json() {
        let body = r#"{"error":{"status":401,"message":"the token does not match the server's","hint":"set it"}}"#;
        assert_eq!(
            error_message(body),
            (
                "the token does not match the server's".to_owned(),
                Some("set it".to_owned())
            )
        );
        assert_eq!(
            error_message("<html>bad gateway</html>"),
            ("<html>bad gateway</html>".to_owned(), None)
        );
        assert_eq!(error_message(&"x".repeat(500)).0.len(), 200);
    }

    #[test]
    fn the_base_address_loses_its_trailing_slash_and_an_empty_token_sends_none() {
        let pusher = Pusher::new("http://server:9470/", Some(""));
        assert_eq!(pusher.base_url(), "http://server:9470");
        assert!(pusher.authorization.is_none());
        let pusher = Pusher::new("http://server:9470", Some("t"));
        assert_eq!(pusher.authorization.as_deref(), Some("Bearer t"));
    }
}
