//! The RAS text protocol over TCP, with a timeout on every step.
//!
//! The exchange, as NCCL's own `ncclras` client and the server in
//! `src/ras/client_support.cc` do it: the client sends `CLIENT PROTOCOL 2`, the server
//! answers `SERVER PROTOCOL <n>`; optional `TIMEOUT <secs>` and `SET FORMAT json` are each
//! answered with `OK` (or `ERROR: ...`); `STATUS` or `VERBOSE STATUS` makes the server
//! collect data from every NCCL process and send one report, after which it closes the
//! connection. Commands are lines ending in `\n`, matched case-insensitively.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::RasError;
use super::status::{RasStatus, parse_status};

/// NCCL's default RAS address: the server binds `localhost`, so the client resolves the
/// same name and tries every address it gets (IPv4 and IPv6).
pub const DEFAULT_RAS_ADDR: &str = "localhost:28028";
/// The environment variable NCCL reads to move the RAS port (`host:port`).
pub const RAS_ADDR_ENV: &str = "NCCL_RAS_ADDR";
/// The client protocol version that NCCL's `ncclras` sends (`NCCL_RAS_CLIENT_PROTOCOL`).
pub const RAS_CLIENT_PROTOCOL: u32 = 2;

/// Replies to handshake and settings commands are single short lines.
const MAX_LINE_BYTES: usize = 4096;
/// A status report of a very large job is big, but not unbounded: a rank's entry is
/// about 350 bytes, so 16 MiB is more than the value bound lets through
/// ([`super::MAX_STATUS_VALUES`], about 18,000 entries), and the buffers stay under 50 MB.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// `ncclras` starts with a 1 s timeout to weed out unresponsive processes quickly.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The RAS server waits up to 5 s per leg plus 5 s extra while it collects data from
/// the other processes (`RAS_COLLECTIVE_LEG_TIMEOUT_SEC`, `..._EXTRA_TIMEOUT_SEC`).
const DEFAULT_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);

/// The address to query, from the value of `NCCL_RAS_ADDR` (unset or empty: the default).
pub fn ras_addr_from(value: Option<&str>) -> Result<String, RasError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_RAS_ADDR.to_string());
    };
    let invalid = || RasError::InvalidAddress {
        addr: value.to_string(),
    };
    let (host, port) = value.rsplit_once(':').ok_or_else(invalid)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(invalid());
    }
    Ok(value.to_string())
}

/// What one exchange returned before parsing: the server's protocol version and the
/// status document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RasExchange {
    /// The number after `SERVER PROTOCOL`; a different version is tolerated, as
    /// `ncclras` does.
    pub server_protocol: Option<u32>,
    pub document: String,
}

/// A client for one NCCL RAS endpoint. Each query opens a new connection, because the
/// server closes it after every status report.
#[derive(Debug, Clone)]
pub struct RasClient {
    addr: String,
    connect_timeout: Duration,
    exchange_timeout: Duration,
    verbose: bool,
    ras_timeout: Option<Duration>,
    max_response_bytes: usize,
}

impl RasClient {
    /// A client for `addr` (`host:port`) with the default timeouts.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            exchange_timeout: DEFAULT_EXCHANGE_TIMEOUT,
            verbose: false,
            ras_timeout: None,
            max_response_bytes: MAX_RESPONSE_BYTES,
        }
    }

    /// A client for the address in `NCCL_RAS_ADDR`, or NCCL's default.
    pub fn from_env() -> Result<Self, RasError> {
        let value = std::env::var(RAS_ADDR_ENV).ok();
        Ok(Self::new(ras_addr_from(value.as_deref())?))
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// How long to wait for the TCP connection, per resolved address.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The deadline for the whole exchange after connecting: handshake, settings and
    /// the full report. A server that trickles bytes cannot extend it.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.exchange_timeout = timeout;
        self
    }

    /// Ask for `VERBOSE STATUS` instead of `STATUS`.
    pub fn with_verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// Send `TIMEOUT <secs>`: how long the RAS thread waits for the other processes.
    /// Keep it below the exchange timeout.
    pub fn with_ras_timeout(mut self, timeout: Duration) -> Self {
        self.ras_timeout = Some(timeout);
        self
    }

    /// The most bytes one report may have.
    pub fn with_max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// Query and parse the JSON status.
    pub fn status(&self) -> Result<RasStatus, RasError> {
        let exchange = self.query()?;
        parse_status(&exchange.document, &self.addr)
    }

    /// Run the exchange and return the raw document.
    pub fn query(&self) -> Result<RasExchange, RasError> {
        let stream = self.connect()?;
        let mut session = Session {
            stream,
            addr: &self.addr,
            deadline: Instant::now() + self.exchange_timeout,
            timeout: self.exchange_timeout,
            pending: Vec::new(),
        };

        session.send(
            &format!("CLIENT PROTOCOL {RAS_CLIENT_PROTOCOL}"),
            "CLIENT PROTOCOL",
        )?;
        let reply = session.read_line("CLIENT PROTOCOL")?;
        let server_protocol = parse_server_protocol(&reply).ok_or_else(|| RasError::Handshake {
            addr: self.addr.clone(),
            reply: reply.clone(),
        })?;

        if let Some(timeout) = self.ras_timeout {
            let command = format!("TIMEOUT {}", timeout.as_secs_f64());
            session.expect_ok(&command, "TIMEOUT", "")?;
        }
        session.expect_ok(
            "SET FORMAT json",
            "SET FORMAT json",
            " (json output needs nccl 2.28.7 or newer)",
        )?;

        let (command, stage) = if self.verbose {
            ("VERBOSE STATUS", "VERBOSE STATUS")
        } else {
            ("STATUS", "STATUS")
        };
        session.send(command, stage)?;
        let document = session.read_document(stage, self.max_response_bytes)?;
        Ok(RasExchange {
            server_protocol,
            document,
        })
    }

    fn connect(&self) -> Result<TcpStream, RasError> {
        let addrs: Vec<SocketAddr> = self
            .addr
            .to_socket_addrs()
            .map_err(|source| RasError::Resolve {
                addr: self.addr.clone(),
                source,
            })?
            .collect();
        let mut last_error = io::Error::new(io::ErrorKind::NotFound, "no address resolved");
        for socket_addr in addrs {
            match TcpStream::connect_timeout(&socket_addr, self.connect_timeout) {
                Ok(stream) => return Ok(stream),
                Err(error) => last_error = error,
            }
        }
        Err(RasError::Connect {
            addr: self.addr.clone(),
            source: last_error,
        })
    }
}

/// `Some(version)` for a `SERVER PROTOCOL <n>` line (`Some(None)` when `<n>` is not a
/// number), `None` for anything else.
fn parse_server_protocol(reply: &str) -> Option<Option<u32>> {
    const PREFIX: &str = "SERVER PROTOCOL";
    let head = reply.get(..PREFIX.len())?;
    if !head.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    Some(reply[PREFIX.len()..].trim().parse().ok())
}

/// One connection: every read and write is bounded by the exchange deadline.
struct Session<'a> {
    stream: TcpStream,
    addr: &'a str,
    deadline: Instant,
    timeout: Duration,
    /// Bytes received but not yet consumed.
    pending: Vec<u8>,
}

impl Session<'_> {
    fn remaining(&self, stage: &'static str) -> Result<Duration, RasError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.timed_out(stage));
        }
        Ok(left)
    }

    fn timed_out(&self, stage: &'static str) -> RasError {
        RasError::Timeout {
            addr: self.addr.to_string(),
            stage,
            after: self.timeout,
        }
    }

    fn io_error(&self, stage: &'static str, source: io::Error) -> RasError {
        match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => self.timed_out(stage),
            io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted => RasError::Closed {
                addr: self.addr.to_string(),
                stage,
            },
            _ => RasError::Io {
                addr: self.addr.to_string(),
                stage,
                source,
            },
        }
    }

    fn send(&mut self, command: &str, stage: &'static str) -> Result<(), RasError> {
        let left = self.remaining(stage)?;
        let line = format!("{command}\n");
        self.stream
            .set_write_timeout(Some(left))
            .and_then(|()| self.stream.write_all(line.as_bytes()))
            .map_err(|source| self.io_error(stage, source))
    }

    /// Read more bytes into `pending`; `Ok(0)` at end of stream.
    fn fill(&mut self, stage: &'static str) -> Result<usize, RasError> {
        let mut chunk = [0u8; 8192];
        loop {
            let left = self.remaining(stage)?;
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|source| self.io_error(stage, source))?;
            match self.stream.read(&mut chunk) {
                Ok(read) => {
                    self.pending.extend_from_slice(&chunk[..read]);
                    return Ok(read);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                // A reset after the server wrote its report is just how it hung up.
                Err(error) if error.kind() == io::ErrorKind::ConnectionReset => return Ok(0),
                Err(error) => return Err(self.io_error(stage, error)),
            }
        }
    }

    fn read_line(&mut self, stage: &'static str) -> Result<String, RasError> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Ok(String::from_utf8_lossy(&line).trim_end().to_string());
            }
            if self.pending.len() > MAX_LINE_BYTES {
                return Err(RasError::TooLarge {
                    addr: self.addr.to_string(),
                    stage,
                    limit: MAX_LINE_BYTES,
                });
            }
            if self.fill(stage)? == 0 {
                return Err(RasError::Closed {
                    addr: self.addr.to_string(),
                    stage,
                });
            }
        }
    }

    /// Send a settings command and require `OK`.
    fn expect_ok(
        &mut self,
        command: &str,
        stage: &'static str,
        hint: &'static str,
    ) -> Result<(), RasError> {
        self.send(command, stage)?;
        let reply = self.read_line(stage)?;
        if reply.eq_ignore_ascii_case("OK") {
            return Ok(());
        }
        let hint = if reply_is_error(&reply) { hint } else { "" };
        Err(RasError::Rejected {
            addr: self.addr.to_string(),
            command: command.to_string(),
            reply,
            hint,
        })
    }

    /// Read the report: until the top-level JSON value closes, or the server hangs up.
    fn read_document(&mut self, stage: &'static str, limit: usize) -> Result<String, RasError> {
        let mut end = DocumentEnd::default();
        let mut scanned = 0;
        loop {
            if let Some(offset) = end.feed(&self.pending[scanned..]) {
                let document = &self.pending[..scanned + offset];
                return Ok(String::from_utf8_lossy(document).into_owned());
            }
            scanned = self.pending.len();
            if scanned > limit {
                return Err(RasError::TooLarge {
                    addr: self.addr.to_string(),
                    stage,
                    limit,
                });
            }
            if self.fill(stage)? == 0 {
                if self.pending.is_empty() {
                    return Err(RasError::Closed {
                        addr: self.addr.to_string(),
                        stage,
                    });
                }
                return Ok(String::from_utf8_lossy(&self.pending).into_owned());
            }
        }
    }
}

fn reply_is_error(reply: &str) -> bool {
    reply
        .get(..5)
        .is_some_and(|head| head.eq_ignore_ascii_case("ERROR"))
}

/// Finds where a streamed JSON value ends, so a server that keeps the socket open after
/// the report does not cost the whole timeout. Anything that does not start with `{` or
/// `[` (a text report, an error line) is read until the server hangs up.
#[derive(Debug, Default)]
struct DocumentEnd {
    started: bool,
    not_json: bool,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl DocumentEnd {
    /// Feed the next bytes; returns the offset just past the value's closing bracket.
    fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        for (offset, &byte) in bytes.iter().enumerate() {
            if self.not_json {
                return None;
            }
            if !self.started {
                match byte {
                    b'{' | b'[' => {
                        self.started = true;
                        self.depth = 1;
                    }
                    _ if byte.is_ascii_whitespace() => {}
                    _ => self.not_json = true,
                }
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(offset + 1);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_comes_from_env_value_or_default() {
        assert_eq!(ras_addr_from(None).unwrap(), DEFAULT_RAS_ADDR);
        assert_eq!(ras_addr_from(Some("  ")).unwrap(), DEFAULT_RAS_ADDR);
        assert_eq!(
            ras_addr_from(Some("10.0.0.1:29000")).unwrap(),
            "10.0.0.1:29000"
        );
        assert_eq!(ras_addr_from(Some("[::1]:28028")).unwrap(), "[::1]:28028");
        for bad in ["10.0.0.1", ":28028", "host:port", "host:70000"] {
            let error = ras_addr_from(Some(bad)).unwrap_err();
            assert!(matches!(error, RasError::InvalidAddress { .. }), "{bad}");
            assert!(error.to_string().contains(&format!("`{bad}`")));
        }
    }

    #[test]
    fn handshake_reply_is_case_insensitive_and_tolerates_other_versions() {
        assert_eq!(parse_server_protocol("SERVER PROTOCOL 2"), Some(Some(2)));
        assert_eq!(parse_server_protocol("server protocol 3"), Some(Some(3)));
        assert_eq!(parse_server_protocol("SERVER PROTOCOL x"), Some(None));
        assert_eq!(parse_server_protocol("ERROR: Unknown command"), None);
        assert_eq!(parse_server_protocol(""), None);
    }

    #[test]
    fn document_end_skips_brackets_inside_strings() {
        let mut end = DocumentEnd::default();
        let text = br#" {"a": "}]\"{", "b": [1, {"c": 2}]} trailing"#;
        let offset = end.feed(text).unwrap();
        assert_eq!(&text[..offset], br#" {"a": "}]\"{", "b": [1, {"c": 2}]}"#);
    }

    #[test]
    fn document_end_works_across_chunks_and_ignores_text() {
        let mut end = DocumentEnd::default();
        assert_eq!(end.feed(b"{\"a\": [1,"), None);
        assert_eq!(end.feed(b" 2]}\n"), Some(4));

        let mut text = DocumentEnd::default();
        assert_eq!(text.feed(b"NCCL version 2.29 {}"), None);
        assert_eq!(text.feed(b"}"), None);
    }
}
