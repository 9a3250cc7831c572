//! TLS for a node's client of an `https://` fleet server (rustls with `ring`): which
//! CAs it trusts, the system's (`/etc/ssl/certs`, `SSL_CERT_FILE`) unless
//! `gpuvet.report_ca` names a PEM file, and the server's name checked against its
//! certificate. Nothing is sent to a server whose certificate fails either check, so
//! what is queued stays in the outbox.

use std::path::PathBuf;
use std::sync::Arc;

use ureq::tls::{Certificate, RootCerts, TlsConfig};

use crate::PushError;

/// The CAs a client trusts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Trust {
    /// The system's CA certificates.
    #[default]
    System,
    /// Only the CAs in this PEM file (`gpuvet.report_ca`).
    CaFile(PathBuf),
}

impl Trust {
    /// `gpuvet.report_ca`, else `GPUVET_REPORT_CA`, else the system's CAs.
    pub fn from_settings(report_ca: Option<&std::path::Path>, env: Option<String>) -> Trust {
        match (report_ca, env.filter(|v| !v.trim().is_empty())) {
            (Some(path), _) => Trust::CaFile(path.to_owned()),
            (None, Some(path)) => Trust::CaFile(PathBuf::from(path)),
            (None, None) => Trust::System,
        }
    }
}

/// The TLS settings of an agent that trusts `trust`.
pub(crate) fn config(trust: &Trust) -> Result<TlsConfig, PushError> {
    let roots = match trust {
        Trust::CaFile(path) => ca_file(path)?,
        Trust::System => system_roots()?,
    };
    Ok(TlsConfig::builder()
        .root_certs(RootCerts::Specific(Arc::new(roots)))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build())
}

fn ca_file(path: &std::path::Path) -> Result<Vec<Certificate<'static>>, PushError> {
    let untrusted = |reason: String| PushError::Trust {
        source_of_trust: format!("the CA file `{}`", path.display()),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| untrusted(e.to_string()))?;
    let roots: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| untrusted(format!("not PEM: {e}")))?;
    if roots.is_empty() {
        return Err(untrusted("holds no `BEGIN CERTIFICATE` block".to_owned()));
    }
    Ok(roots)
}

fn system_roots() -> Result<Vec<Certificate<'static>>, PushError> {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(PushError::Trust {
            source_of_trust: "the system's CA certificates".to_owned(),
            reason: if errors.is_empty() {
                "none were found".to_owned()
            } else {
                format!("none could be read: {}", errors.join("; "))
            },
        });
    }
    Ok(found
        .certs
        .iter()
        .map(|der| Certificate::from_der(der.as_ref()).to_owned())
        .collect())
}

/// Whether a failed exchange failed on the server's certificate (its CA or its name).
pub(crate) fn is_certificate_error(error: &ureq::Error) -> bool {
    match error {
        ureq::Error::Rustls(_) => true,
        ureq::Error::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_wins_over_the_environment_and_both_over_the_system() {
        assert_eq!(
            Trust::from_settings(Some("/a.pem".as_ref()), Some("/b.pem".into())),
            Trust::CaFile("/a.pem".into())
        );
        assert_eq!(
            Trust::from_settings(None, Some("/b.pem".into())),
            Trust::CaFile("/b.pem".into())
        );
        assert_eq!(Trust::from_settings(None, Some(" ".into())), Trust::System);
        assert_eq!(Trust::from_settings(None, None), Trust::System);
    }

    #[test]
    fn a_ca_file_that_is_missing_or_holds_no_certificate_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        for (path, expected) in [
            (dir.path().join("missing.pem"), "missing.pem"),
            (empty, "holds no `BEGIN CERTIFICATE` block"),
        ] {
            let error = config(&Trust::CaFile(path)).unwrap_err();
            let text = format!("{error}");
            assert!(text.contains(expected), "{text}");
            assert!(error.hint().unwrap().contains("gpuvet.report_ca"));
        }
    }
}
