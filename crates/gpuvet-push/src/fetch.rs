//! One attempt of a job read back from a fleet server over its API: the timeline, the
//! explanation, or the fault bundle, as `gpuvet timeline|explain|bundle --server URL`
//! show them; and the fleet's baselines a node judges by (`gpuvet.baseline_from`). The server's read token (`GPUVET_READ_TOKEN`) is sent when there is one;
//! never the push token, which grants no reads (and would go to whatever `--server`
//! names). A server that asks for a token it was not given is a 401 whose hint says
//! which variable to set.

use std::io::{Read, Write};
use std::time::Duration;

use gpuvet_analysis::explain::Explanation;
use gpuvet_analysis::timeline::Timeline;
use gpuvet_model::env_vars::READ_TOKEN;
use gpuvet_model::fleet::FleetBaseline;
use gpuvet_model::node_history::NodeHistory;
use gpuvet_model::offenders::RepeatOffenderPolicy;
use gpuvet_store::StoredRun;
use serde::de::DeserializeOwned;

use crate::PushError;

/// How long one read may take: a bundle of a large group is megabytes.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest timeline or explanation read: a 4,096-node attempt's is a few MB.
const MAX_JSON_BYTES: u64 = 256 << 20;

/// The largest bundle read, as the bundle reader's own bound on a whole archive.
const MAX_BUNDLE_BYTES: u64 = 1 << 30;

/// A reader of one server's record of jobs.
#[derive(Debug)]
pub struct ServerReader {
    base_url: String,
    authorization: Option<String>,
    agent: ureq::Agent,
    timeout: Duration,
}

impl ServerReader {
    /// A reader of the server at `base_url` (`http://HOST[:PORT][/PATH]`), sending
    /// `read_token` when there is one.
    pub fn new(base_url: &str, read_token: Option<&str>) -> ServerReader {
        ServerReader {
            base_url: base_url.trim_end_matches('/').to_owned(),
            authorization: read_token
                .filter(|t| !t.is_empty())
                .map(|t| format!("Bearer {t}")),
            agent: crate::agent(FETCH_TIMEOUT, None),
            timeout: FETCH_TIMEOUT,
        }
    }

    /// The same reader giving up on a read after `timeout` instead of
    /// [`FETCH_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> ServerReader {
        self.timeout = timeout;
        self.agent = crate::agent(timeout, None);
        self
    }

    /// Checks an `https://` server's certificate against `trust`; an error when the
    /// CAs cannot be read.
    pub fn with_trust(mut self, trust: &crate::Trust) -> Result<ServerReader, PushError> {
        if crate::is_https(&self.base_url) {
            self.agent = crate::agent(self.timeout, Some(crate::tls::config(trust)?));
        }
        Ok(self)
    }

    /// The attempt's timeline (the job's latest attempt when `attempt` is `None`).
    pub fn timeline(&self, job: &str, attempt: Option<u32>) -> Result<Timeline, PushError> {
        self.json(&self.url(job, "timeline", attempt))
    }

    /// The attempt's explanation: first error, lane, team, next step, hypotheses.
    pub fn explanation(&self, job: &str, attempt: Option<u32>) -> Result<Explanation, PushError> {
        self.json(&self.url(job, "explain", attempt))
    }

    /// The fleet's baseline of each GPU model and check (`GET /api/v1/baselines`).
    pub fn fleet_baselines(&self) -> Result<Vec<FleetBaseline>, PushError> {
        self.json(&format!("{}/api/v1/baselines", self.base_url))
    }

    /// The latest `limit` runs of `node` across jobs, the newest first (`GET
    /// /api/v1/runs?node=…`): what `gpuvet untaint --server` proves a node by.
    pub fn node_runs(&self, node: &str, limit: usize) -> Result<Vec<StoredRun>, PushError> {
        self.json(&format!(
            "{}/api/v1/runs?node={}&limit={limit}",
            self.base_url,
            path_segment(node)
        ))
    }

    /// `node`'s history across jobs (`GET /api/v1/nodes/{node}`): its latest `limit`
    /// runs, their figures, findings and quarantines, flagged under `policy`.
    pub fn node_history(
        &self,
        node: &str,
        limit: usize,
        policy: &RepeatOffenderPolicy,
    ) -> Result<NodeHistory, PushError> {
        self.json(&format!(
            "{}/api/v1/nodes/{}?limit={limit}&failures={}&of_last={}",
            self.base_url,
            path_segment(node),
            policy.failures,
            policy.of_last
        ))
    }

    /// Copies the attempt's bundle into `out`; returns its size in bytes.
    pub fn bundle(
        &self,
        job: &str,
        attempt: Option<u32>,
        out: &mut impl Write,
    ) -> Result<u64, PushError> {
        let url = self.url(job, "bundle", attempt);
        let mut response = self.get(&url)?;
        let mut body = response
            .body_mut()
            .with_config()
            .limit(MAX_BUNDLE_BYTES)
            .reader();
        // Read and write apart, so that each failure names its side.
        let mut buffer = vec![0; 64 * 1024];
        let mut copied = 0u64;
        loop {
            let read = body.read(&mut buffer).map_err(|source| PushError::Body {
                url: url.clone(),
                source,
            })?;
            if read == 0 {
                return Ok(copied);
            }
            out.write_all(&buffer[..read])
                .map_err(|source| PushError::Write {
                    url: url.clone(),
                    source,
                })?;
            copied += read as u64;
        }
    }

    fn url(&self, job: &str, what: &str, attempt: Option<u32>) -> String {
        let mut url = format!("{}/api/v1/jobs/{}/{what}", self.base_url, path_segment(job));
        if let Some(attempt) = attempt {
            url.push_str(&format!("?attempt={attempt}"));
        }
        url
    }

    fn get(&self, url: &str) -> Result<ureq::http::Response<ureq::Body>, PushError> {
        let mut request = self.agent.get(url);
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let mut response = request.call().map_err(|source| PushError::Unreachable {
            url: url.to_owned(),
            source: Box::new(source),
        })?;
        let status = response.status().as_u16();
        if status == 200 {
            return Ok(response);
        }
        let (message, hint) = crate::error_body(&mut response);
        let hint = if status == 401 {
            Some(self.unauthorized_hint())
        } else {
            hint
        };
        Err(PushError::Refused {
            url: url.to_owned(),
            status,
            message,
            hint,
            // A reader asks once and says what it got; it waits for nobody.
            retry_after: None,
        })
    }

    /// What to do about a 401: the server guards its reads with a token this reader
    /// did not send, or sent wrong.
    fn unauthorized_hint(&self) -> String {
        match self.authorization {
            None => format!("this server's reads need its read token: set `{READ_TOKEN}` to it"),
            Some(_) => format!(
                "set `{READ_TOKEN}` to the read token the server was started with (the push token grants no reads)"
            ),
        }
    }

    fn json<T: DeserializeOwned>(&self, url: &str) -> Result<T, PushError> {
        let mut response = self.get(url)?;
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_JSON_BYTES)
            .read_to_string()
            .map_err(|source| PushError::Body {
                url: url.to_owned(),
                source: source.into_io(),
            })?;
        serde_json::from_str(&text).map_err(|source| PushError::Decode {
            url: url.to_owned(),
            source,
        })
    }
}

/// `text` as one segment of a URL's path: every byte but the unreserved ones
/// percent-encoded, so a job id with `/`, `?` or spaces names that job.
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_id_is_one_path_segment_whatever_it_holds() {
        assert_eq!(path_segment("train-7.b_2~"), "train-7.b_2~");
        assert_eq!(path_segment("a/b?c d%"), "a%2Fb%3Fc%20d%25");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn urls_name_the_job_and_the_attempt_when_given() {
        let reader = ServerReader::new("http://server:9470/", None);
        assert_eq!(
            reader.url("job 1", "timeline", Some(2)),
            "http://server:9470/api/v1/jobs/job%201/timeline?attempt=2"
        );
        assert_eq!(
            reader.url("j", "bundle", None),
            "http://server:9470/api/v1/jobs/j/bundle"
        );
    }

    #[test]
    fn a_401_names_the_read_token_whether_one_was_sent_or_not() {
        let without = ServerReader::new("http://server:9470", Some(""));
        assert!(without.authorization.is_none());
        assert!(
            without
                .unauthorized_hint()
                .contains("need its read token: set `GPUVET_READ_TOKEN`"),
            "{}",
            without.unauthorized_hint()
        );
        let with = ServerReader::new("http://server:9470", Some("r"));
        assert_eq!(with.authorization.as_deref(), Some("Bearer r"));
        assert!(
            with.unauthorized_hint()
                .starts_with("set `GPUVET_READ_TOKEN` to the read token"),
            "{}",
            with.unauthorized_hint()
        );
    }

    #[test]
    fn a_server_that_is_not_there_is_unreachable_with_a_hint() {
        // A port nothing listens on (just now).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let reader = ServerReader::new(&format!("http://127.0.0.1:{port}"), None);
        let error = reader.timeline("j", None).unwrap_err();
        assert!(matches!(error, PushError::Unreachable { .. }), "{error:?}");
        assert!(error.hint().unwrap().contains("--server"));
        let text = gpuvet_model::diagnostics::with_causes(&error);
        assert!(
            text.starts_with("cannot reach `http://127.0.0.1:"),
            "{text}"
        );
    }
}
