//! A fleet server for tests, on a port it picks or is given, and a little HTTP client
//! to read what it holds. The server is `gpuvet-server`'s own library on a runtime in
//! this test process (the `gpuvet-server` program belongs to another package, which
//! these tests cannot name); `serve_cli.rs` tests what `gpuvet serve` adds.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

use gpuvet_server::pool::StorePool;
use gpuvet_server::{Server, ServerTls, TlsFiles};
use gpuvet_store::StoreLocation;

/// The token the tests' servers and nodes share.
pub const TOKEN: &str = "test-report-token";

/// The read token of the tests' servers that guard their reads.
pub const READ_TOKEN: &str = "test-read-token";

/// A running server; stopped when dropped.
#[derive(Debug)]
pub struct Serve {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub addr: SocketAddr,
    scheme: &'static str,
}

impl Serve {
    /// Starts a server on `listen` (port 0: any free one) over `store`, with
    /// [`TOKEN`], and waits until it listens.
    pub fn start(store: &Path, listen: &str) -> Serve {
        Serve::start_with(sqlite(store), listen, None, None)
    }

    /// As [`Serve::start`], with reads that need [`READ_TOKEN`].
    pub fn start_guarded(store: &Path, listen: &str) -> Serve {
        Serve::start_with(sqlite(store), listen, Some(READ_TOKEN), None)
    }

    /// As [`Serve::start`], over HTTPS with the certificate and key in `files`.
    pub fn start_tls(store: &Path, listen: &str, files: TlsFiles) -> Serve {
        let tls = Arc::new(ServerTls::load(files).expect("the TLS files"));
        Serve::start_with(sqlite(store), listen, None, Some(tls))
    }

    /// As [`Serve::start_guarded`], over HTTPS with the certificate and key in `files`.
    pub fn start_tls_guarded(store: &Path, listen: &str, files: TlsFiles) -> Serve {
        let tls = Arc::new(ServerTls::load(files).expect("the TLS files"));
        Serve::start_with(sqlite(store), listen, Some(READ_TOKEN), Some(tls))
    }

    /// One replica of a fleet server on the shared `store` (PostgreSQL): HTTPS with
    /// `files`, reads that need [`READ_TOKEN`].
    pub fn start_replica(store: StoreLocation, files: TlsFiles) -> Serve {
        let tls = Arc::new(ServerTls::load(files).expect("the TLS files"));
        Serve::start_with(store, "127.0.0.1:0", Some(READ_TOKEN), Some(tls))
    }

    fn start_with(
        store: StoreLocation,
        listen: &str,
        read_token: Option<&'static str>,
        tls: Option<Arc<ServerTls>>,
    ) -> Serve {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listen: SocketAddr = listen.parse().expect("an address to listen on");
        let pool = StorePool::new(store).expect("the store");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, addr) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let mut server = Server::bind(listen, pool, Some(TOKEN.to_owned()))
                    .await
                    .expect("binding the server")
                    .with_read_token(read_token);
                if let Some(tls) = tls {
                    server = server.with_tls(tls);
                }
                bound.send(server.local_addr().unwrap()).unwrap();
                server
                    .run(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("serving");
            });
        });
        let addr = addr
            .recv_timeout(Duration::from_secs(30))
            .expect("the server listens");
        Serve {
            stop: Some(stop),
            thread: Some(thread),
            addr,
            scheme,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// `GET path` as JSON (with [`READ_TOKEN`], which a server that does not guard its
    /// reads ignores); panics on anything but 200.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let mut response = self
            .agent()
            .get(&self.url(path))
            .header("authorization", &format!("Bearer {READ_TOKEN}"))
            .call()
            .expect("a reply");
        let text = response.body_mut().read_to_string().expect("a body");
        assert_eq!(response.status().as_u16(), 200, "{path}: {text}");
        serde_json::from_str(&text).expect("JSON")
    }

    /// The tests' own client: reading back what the server holds; whom a node trusts is
    /// what the tests of the `gpuvet` binary check, not this helper's.
    fn agent(&self) -> ureq::Agent {
        let tls = ureq::tls::TlsConfig::builder()
            .disable_verification(true)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .build()
            .into()
    }

    /// A one-time sign-in link's path (`/session/TICKET`), asked for with
    /// [`READ_TOKEN`].
    pub fn sign_in_link(&self) -> String {
        let mut response = self
            .agent()
            .post(&self.url("/api/v1/session"))
            .header("authorization", &format!("Bearer {READ_TOKEN}"))
            .send_empty()
            .expect("a sign-in link");
        let link: serde_json::Value =
            serde_json::from_str(&response.body_mut().read_to_string().expect("a body"))
                .expect("JSON");
        link["path"].as_str().expect("the link's path").to_owned()
    }

    /// Stops the server and waits until it no longer listens.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn sqlite(path: &Path) -> StoreLocation {
    StoreLocation::Sqlite(path.to_owned())
}

/// A loopback address with a port that nothing listens on (just now).
pub fn free_loopback_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}
