//! A real `gpuvet serve` process for tests, on a port it picks or is given, and a
//! little HTTP client to read what it holds.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::Scratch;

/// The token the tests' servers and nodes share.
pub const TOKEN: &str = "test-report-token";

/// A running `gpuvet serve`; killed when dropped.
#[derive(Debug)]
pub struct Serve {
    child: Child,
    pub addr: SocketAddr,
}

impl Serve {
    /// Starts `gpuvet serve` on `listen` (port 0: any free one) over `store`, with
    /// [`TOKEN`], and waits until it says where it listens.
    pub fn start(scratch: &Scratch, store: &Path, listen: &str) -> Serve {
        let mut child = scratch
            .gpuvet()
            .args(["serve", "--listen", listen, "--store"])
            .arg(store)
            .env("GPUVET_REPORT_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting gpuvet serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("gpuvet serve says where it listens");
        Serve {
            child,
            addr: addr.parse().expect("an address"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET path` as JSON; panics on anything but 200.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut response = agent.get(&self.url(path)).call().expect("a reply");
        let text = response.body_mut().read_to_string().expect("a body");
        assert_eq!(response.status().as_u16(), 200, "{path}: {text}");
        serde_json::from_str(&text).expect("JSON")
    }

    /// Stops the server and waits for it to exit.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// A loopback address with a port that nothing listens on (just now).
pub fn free_loopback_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}
