//! A throwaway certificate authority and serving certificate, generated at start-up.
//!
//! Clients (kubectl, kube-rs) verify the server against the CA written into the kubeconfig,
//! so the TLS path they exercise is the same one they use against a real cluster.

use std::sync::Arc;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};

/// The CA (PEM, for the kubeconfig) and a rustls configuration serving a leaf it signed.
pub struct TlsMaterial {
    pub ca_pem: String,
    pub server_config: Arc<ServerConfig>,
}

/// Generates a fresh CA and a leaf for `localhost` / `127.0.0.1` / `::1` plus `extra_names`.
pub fn generate(extra_names: &[String]) -> anyhow::Result<TlsMaterial> {
    let ca_key = KeyPair::generate().context("generate CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kube-sim CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).context("self-sign CA")?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default.svc".to_string(),
    ];
    names.extend(extra_names.iter().cloned());
    let leaf_key = KeyPair::generate().context("generate server key")?;
    let mut leaf_params = CertificateParams::new(names)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let leaf = leaf_params
        .signed_by(&leaf_key, &issuer)
        .context("sign server certificate")?;

    let certs = vec![
        CertificateDer::from_pem_slice(leaf.pem().as_bytes()).context("parse leaf PEM")?,
        CertificateDer::from_pem_slice(ca_cert.pem().as_bytes()).context("parse CA PEM")?,
    ];
    let key = PrivateKeyDer::from_pem_slice(leaf_key.serialize_pem().as_bytes())
        .context("parse server key PEM")?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("server certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(config),
    })
}
