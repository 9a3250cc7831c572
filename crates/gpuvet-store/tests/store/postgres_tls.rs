//! TLS to PostgreSQL, against a PostgreSQL server started here with `ssl = on`, a
//! certificate from a CA made in the test, and a `pg_hba.conf` that refuses every
//! connection in clear: so a store that opens at all spoke TLS. Each `sslmode` takes
//! or refuses what libpq's does. Needs root (PostgreSQL runs as `postgres`) and
//! Debian's PostgreSQL server binaries; ignored unless asked for, as CI does.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuvet_store::{Store, StoreLocation};
use gpuvet_testkit::tls::TestCa;

/// A PostgreSQL server of one test, stopped when dropped.
struct TlsServer {
    data: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

fn pg_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Debian's PostgreSQL server in /usr/lib/postgresql (apt install postgresql)")
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin").join(name)))
        .filter(|path| path.exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .unwrap_or_else(|| panic!("no `{name}` under /usr/lib/postgresql"))
}

fn as_postgres(program: &Path, args: &[&str]) {
    let output = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .output()
        .expect("runuser");
    assert!(
        output.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn chown_to_postgres(path: &Path) {
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

impl TlsServer {
    /// A server whose certificate names `names`, signed by `ca`.
    fn start(ca: &TestCa, names: &[&str]) -> TlsServer {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "run as root: PostgreSQL runs as the `postgres` user"
        );
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        chown_to_postgres(dir.path());
        as_postgres(
            &pg_bin("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
        );
        let files = ca.server_files(&data, "server", names);
        let port = gpuvet_testkit::free_port();
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nfsync = off\n",
            dir.path().display(),
            files.cert.display(),
            files.key.display()
        );
        let mut existing = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        existing.push_str(&conf);
        std::fs::write(data.join("postgresql.conf"), existing).unwrap();
        // TLS or nothing over TCP.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\n",
        )
        .unwrap();
        chown_to_postgres(&data);
        std::fs::set_permissions(
            &files.key,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let log = dir.path().join("log");
        as_postgres(
            &pg_bin("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        TlsServer {
            data,
            port,
            _dir: dir,
        }
    }

    fn url(&self, host: &str, query: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{query}", self.port)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg_bin("pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"])
            .output();
    }
}

fn open(url: &str) -> Result<Store, String> {
    Store::open_location(&StoreLocation::Postgres(url.to_owned())).map_err(|error| {
        let hint = error.hint().unwrap_or_default().to_owned();
        format!("{error}: {}\nhint: {hint}", chain(&error))
    })
}

fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut causes = Vec::new();
    let mut cause = error.source();
    while let Some(error) = cause {
        causes.push(error.to_string());
        cause = error.source();
    }
    causes.join(": ")
}

#[test]
#[ignore = "needs root and PostgreSQL's server binaries"]
fn each_sslmode_takes_or_refuses_what_libpq_does() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("database CA");
    let stranger = TestCa::new("another CA");
    let ca_file = ca.write_cert(dir.path(), "ca.pem");
    let stranger_file = stranger.write_cert(dir.path(), "stranger.pem");
    let server = TlsServer::start(&ca, &["localhost"]);
    let root = |path: &Path| format!("sslrootcert={}", path.display());

    // Taken: the right CA and name; the CA only; encryption only.
    for (host, query) in [
        (
            "localhost",
            format!("sslmode=verify-full&{}", root(&ca_file)),
        ),
        ("127.0.0.1", format!("sslmode=verify-ca&{}", root(&ca_file))),
        ("127.0.0.1", "sslmode=require".to_owned()),
    ] {
        let url = server.url(host, &query);
        let store = open(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(store.location_display().contains(host));
    }

    // Refused: another CA; a name the certificate does not have; `require` with a CA
    // file checks it (as libpq); in clear, the server refuses.
    for (host, query, expected) in [
        (
            "localhost",
            format!("sslmode=verify-full&{}", root(&stranger_file)),
            "UnknownIssuer",
        ),
        (
            "127.0.0.1",
            format!("sslmode=verify-full&{}", root(&ca_file)),
            "not valid for name",
        ),
        (
            "127.0.0.1",
            format!("sslmode=require&{}", root(&stranger_file)),
            "UnknownIssuer",
        ),
        ("127.0.0.1", "sslmode=disable".to_owned(), "no encryption"),
    ] {
        let url = server.url(host, &query);
        let error = match open(&url) {
            Ok(_) => panic!("{url} was taken"),
            Err(error) => error,
        };
        assert!(error.contains(expected), "{url}: {error}");
        if query.contains("verify") {
            assert!(
                error.contains("hint: with `sslmode=verify-full`"),
                "{url}: {error}"
            );
        }
    }
}
