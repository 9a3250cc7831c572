//! TLS for the fleet server (rustls): its certificate chain and key from PEM files, and
//! reloading them in place, so that a renewed certificate (cert-manager, certbot) is
//! taken on SIGHUP without dropping a connection.
//!
//! Every handshake asks [`ServerTls`] for the current key; a reload that fails keeps
//! the one in use and says why, since a server that stopped serving over a typo in a
//! renewed file would take its whole fleet's pushes down with it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::error::ServerError;

/// Where the server's certificate chain and private key are (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate first, then any intermediates.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The server's TLS: the files, the key in use, and the acceptor that serves it.
pub struct ServerTls {
    files: TlsFiles,
    resolver: Arc<CurrentKey>,
    acceptor: TlsAcceptor,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// The key every new handshake gets.
#[derive(Debug)]
struct CurrentKey(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentKey {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerTls {
    /// Loads `files`; an error names the file and what is wrong with it.
    pub fn load(files: TlsFiles) -> Result<ServerTls, ServerError> {
        let key = load_key(&files)?;
        let resolver = Arc::new(CurrentKey(RwLock::new(Arc::new(key))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ServerError::Tls {
                path: files.cert.clone(),
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        // Nodes and browsers speak HTTP/1.1 to this server; it serves nothing else.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            files,
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads the files again and serves the new key to every later handshake; on an
    /// error the key in use stays.
    pub fn reload(&self) -> Result<(), ServerError> {
        let key = load_key(&self.files)?;
        *self.resolver.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    /// The files it serves.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

fn load_key(files: &TlsFiles) -> Result<CertifiedKey, ServerError> {
    let error = |path: &Path, reason: String| ServerError::Tls {
        path: path.to_owned(),
        reason,
    };
    let cert_pem = std::fs::read(&files.cert).map_err(|e| error(&files.cert, e.to_string()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(&files.cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(error(
            &files.cert,
            "holds no `BEGIN CERTIFICATE` block".to_owned(),
        ));
    }
    let key_pem = std::fs::read(&files.key).map_err(|e| error(&files.key, e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| error(&files.key, format!("not a PEM private key: {e}")))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        error(
            &files.key,
            format!(
                "does not go with the certificate `{}`: {e}",
                files.cert.display()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_testkit::tls::{ServerFiles, TestCa};

    /// A certificate for `localhost` from `ca` in `dir`, loaded.
    fn loaded(ca: &TestCa, dir: &Path) -> (ServerTls, ServerFiles) {
        let files = ca.server_files(dir, "server", &["localhost"]);
        let tls = ServerTls::load(TlsFiles {
            cert: files.cert.clone(),
            key: files.key.clone(),
        })
        .unwrap();
        (tls, files)
    }

    /// The certificate every new handshake gets.
    fn served(tls: &ServerTls) -> CertificateDer<'static> {
        tls.resolver.0.read().unwrap().cert[0].clone()
    }

    #[test]
    fn a_certificate_and_its_key_load_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (tls, _) = loaded(&ca, dir.path());
        let before = served(&tls);
        ca.server_files(dir.path(), "server", &["localhost"]);
        tls.reload().unwrap();
        assert_ne!(served(&tls), before);
    }

    #[test]
    fn a_broken_reload_keeps_the_key_in_use_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (tls, files) = loaded(&ca, dir.path());
        let before = served(&tls);
        std::fs::write(&files.cert, "half a file").unwrap();
        let error = tls.reload().unwrap_err().to_string();
        assert!(error.contains(&files.cert.display().to_string()), "{error}");
        assert!(error.contains("BEGIN CERTIFICATE"), "{error}");
        assert_eq!(served(&tls), before);
    }

    #[test]
    fn each_way_the_files_can_be_wrong_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let one = ca.server_files(dir.path(), "one", &["localhost"]);
        let other = ca.server_files(dir.path(), "other", &["localhost"]);
        let missing = dir.path().join("missing.crt");
        let cases = [
            (missing.clone(), one.key.clone(), "missing.crt"),
            (one.cert.clone(), one.cert.clone(), "not a PEM private key"),
            (
                one.cert.clone(),
                other.key.clone(),
                "does not go with the certificate",
            ),
        ];
        for (cert, key, expected) in cases {
            let error = ServerTls::load(TlsFiles { cert, key })
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
