//! TLS to PostgreSQL with rustls, asked for the way libpq's users ask: `sslmode` and
//! `sslrootcert` in the URL's query (PostgreSQL's documentation, "SSL Support",
//! table "SSL Mode Descriptions"). The `postgres` crate parses only `disable`,
//! `prefer` and `require`, so both keys are taken off the URL here and the rest goes
//! to it.
//!
//! | `sslmode` | encrypted | the certificate's CA checked | its name checked |
//! |---|---|---|---|
//! | `disable`, `prefer`, none | no | no | no |
//! | `require` | yes | only with `sslrootcert` (as libpq) | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! `prefer` connects in clear: a client that cannot fall back after a failed handshake
//! would otherwise refuse servers that never asked for TLS. The CA is
//! `sslrootcert=FILE` (PEM), or the system's CAs (`sslrootcert=system`, and the
//! default), read by rustls-native-certs.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the CAs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    System,
    File(PathBuf),
}

/// What the URL asked of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsRequest {
    pub mode: SslMode,
    /// `None`: `sslrootcert` was not given.
    pub root: Option<RootCert>,
}

/// Why TLS to PostgreSQL cannot be set up as asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsSetupError {
    #[error(
        "`sslmode={0}` is not a mode PostgreSQL knows; expected `disable`, `prefer`, `require`, `verify-ca` or `verify-full`"
    )]
    Mode(String),
    #[error("cannot read the CA file `sslrootcert={path}`: {reason}")]
    RootFile { path: String, reason: String },
    #[error(
        "no CA certificate of the system could be read ({0}); name one with `sslrootcert=FILE`"
    )]
    NoSystemRoots(String),
}

/// Takes `sslmode` and `sslrootcert` off `url`'s query: the URL the `postgres` crate
/// parses, and the request.
pub(crate) fn split_url(url: &str) -> Result<(String, TlsRequest), TlsSetupError> {
    let mut request = TlsRequest {
        mode: SslMode::Prefer,
        root: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), request));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => {
                request.mode = match value {
                    "disable" => SslMode::Disable,
                    "prefer" | "allow" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => return Err(TlsSetupError::Mode(other.to_owned())),
                }
            }
            "sslrootcert" => {
                let value = percent_decode(value);
                request.root = Some(if value == "system" {
                    RootCert::System
                } else {
                    RootCert::File(PathBuf::from(value))
                });
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, request))
}

/// `%XX` escapes decoded (a path in a query may have them); anything else kept.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(u8::try_from(hi * 16 + lo).expect("two hex digits fit a byte"));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration `request` asks for; `None`: connect in clear.
pub(crate) fn client_config(
    request: &TlsRequest,
) -> Result<Option<rustls::ClientConfig>, TlsSetupError> {
    let check_ca = match request.mode {
        SslMode::Disable | SslMode::Prefer => return Ok(None),
        SslMode::Require => request.root.is_some(),
        SslMode::VerifyCa | SslMode::VerifyFull => true,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let verifier: Arc<dyn ServerCertVerifier> = if check_ca {
        let roots = Arc::new(roots(request.root.as_ref().unwrap_or(&RootCert::System))?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsSetupError::NoSystemRoots(e.to_string()))?;
        Arc::new(Checked {
            inner: webpki,
            check_name: request.mode == SslMode::VerifyFull,
        })
    } else {
        Arc::new(Unchecked(provider()))
    };
    Ok(Some(
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth(),
    ))
}

fn roots(root: &RootCert) -> Result<RootCertStore, TlsSetupError> {
    let mut store = RootCertStore::empty();
    match root {
        RootCert::File(path) => {
            let error = |reason: String| TlsSetupError::RootFile {
                path: path.display().to_string(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| error(format!("not PEM: {e}")))?;
                store.add(cert).map_err(|e| error(e.to_string()))?;
            }
            if store.is_empty() {
                return Err(error("holds no `BEGIN CERTIFICATE` block".to_owned()));
            }
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(TlsSetupError::NoSystemRoots(if why.is_empty() {
                    "none found".to_owned()
                } else {
                    why.join("; ")
                }));
            }
        }
    }
    Ok(store)
}

/// Checks the chain against the CAs, and the name only for `verify-full`.
#[derive(Debug)]
struct Checked {
    inner: Arc<WebPkiServerVerifier>,
    check_name: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `sslmode=require` without `sslrootcert`, as libpq: encrypted, any certificate
/// taken; the handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_leave_the_url_and_the_rest_stays() {
        let (url, request) = split_url(
            "postgres://u:p@db:5432/g?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(url, "postgres://u:p@db:5432/g?application_name=x");
        assert_eq!(request.mode, SslMode::VerifyFull);
        assert_eq!(request.root, Some(RootCert::File("/etc/ca.pem".into())));

        let (url, request) = split_url("postgres://db/g?sslmode=require").unwrap();
        assert_eq!(url, "postgres://db/g");
        assert_eq!((request.mode, request.root), (SslMode::Require, None));

        let (url, request) =
            split_url("postgres://db/g?sslrootcert=system&sslmode=verify-ca").unwrap();
        assert_eq!(url, "postgres://db/g");
        assert_eq!(request.root, Some(RootCert::System));

        let (url, request) = split_url("postgres://db/g").unwrap();
        assert_eq!(
            (url.as_str(), request.mode),
            ("postgres://db/g", SslMode::Prefer)
        );
    }

    #[test]
    fn an_unknown_mode_is_named_with_the_ones_that_exist() {
        let error = split_url("postgres://db/g?sslmode=verify")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`sslmode=verify`"), "{error}");
        assert!(error.contains("`verify-full`"), "{error}");
    }

    #[test]
    fn only_the_modes_that_encrypt_get_a_tls_config() {
        for (mode, encrypted) in [
            (SslMode::Disable, false),
            (SslMode::Prefer, false),
            (SslMode::Require, true),
        ] {
            let request = TlsRequest { mode, root: None };
            assert_eq!(
                client_config(&request).unwrap().is_some(),
                encrypted,
                "{mode:?}"
            );
        }
    }

    #[test]
    fn a_ca_file_that_cannot_serve_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing\n").unwrap();
        for (path, expected) in [
            (dir.path().join("missing.pem"), "missing.pem"),
            (empty, "holds no `BEGIN CERTIFICATE` block"),
        ] {
            let request = TlsRequest {
                mode: SslMode::VerifyFull,
                root: Some(RootCert::File(path)),
            };
            let error = client_config(&request).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn percent_escapes_decode_and_odd_ones_stay() {
        assert_eq!(percent_decode("%2Fa%20b"), "/a b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
