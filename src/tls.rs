//! The External Metrics API's own listener: HTTPS with a required client certificate, which is
//! how the kube-apiserver's aggregation layer reaches an APIService (its front-proxy certificate,
//! signed by the CA in `--requestheader-client-ca-file`). The certificate is the authentication:
//! the kube-apiserver has already authenticated and authorised the HPA controller's request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::BadInput;

/// `serve --external-metrics-listen … --tls-cert … --tls-key … --client-ca …`.
#[derive(Debug, Clone)]
pub struct ExternalMetricsTls {
    pub listen: std::net::SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

fn read(flag: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        BadInput(format!(
            "{flag}: cannot read {}: {e}; give a PEM file",
            path.display()
        ))
        .into()
    })
}

fn certificates(flag: &str, path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            BadInput(format!(
                "{flag}: {} is not PEM certificates: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(BadInput(format!(
            "{flag}: {} holds no certificate; give a PEM file with BEGIN CERTIFICATE blocks",
            path.display()
        ))
        .into());
    }
    Ok(certs)
}

/// The server's TLS settings: its certificate chain and key, and clients only with a certificate
/// the client CA signed.
pub fn server_config(tls: &ExternalMetricsTls) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("--tls-cert", &tls.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&read("--tls-key", &tls.key)?).map_err(|e| {
        BadInput(format!(
            "--tls-key: {} is not a PEM private key: {e}",
            tls.key.display()
        ))
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates("--client-ca", &tls.client_ca)? {
        roots.add(ca).map_err(|e| {
            BadInput(format!(
                "--client-ca: {} holds a certificate rustls cannot use as a CA: {e}",
                tls.client_ca.display()
            ))
        })?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .context("--client-ca: building the client certificate check")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| BadInput(format!("--tls-key: does not match --tls-cert: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` over TLS on `listener` until `stop` completes. A handshake that fails (no client
/// certificate, one another CA signed) or stalls ends that connection only.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: axum::Router,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => accepted.context("accepting on --external-metrics-listen")?,
            () = &mut stop => return Ok(()),
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let handshake =
                tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(stream))
                    .await;
            let stream = match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::warn!(%peer, error = %e, "external metrics: TLS handshake refused");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "external metrics: connection ended");
            }
        });
    }
}
