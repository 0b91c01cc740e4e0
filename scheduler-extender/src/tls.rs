//! HTTPS for the scheduler's calls. Served over plain HTTP, anything that binds the port
//! while the extender is down (any local process can, on the loopback) would be believed
//! by kube-scheduler. With a serving certificate from a CA only graft holds, and the
//! scheduler's extender configuration trusting that CA alone (`tlsConfig.caData`), an
//! impostor cannot complete the handshake. With a client CA as well, the extender answers
//! only callers holding a certificate from it (the scheduler's `tlsConfig.certData`), so
//! nothing else can make it post Events.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A TLS setting that cannot be used, naming the file and why.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_err(path: &Path, what: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, e))?;
    if certs.is_empty() {
        return Err(file_err(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// An acceptor serving `cert` (PEM, the chain) with `key` (PEM); with `client_ca`, callers
/// must present a certificate that CA signed.
pub fn acceptor(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<TlsAcceptor, TlsError> {
    let chain = certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca)? {
                roots.add(c).map_err(|e| file_err(ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    // HTTP/1.1 only: the server speaks nothing else.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
