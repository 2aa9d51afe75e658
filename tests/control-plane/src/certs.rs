//! The control plane's key material, generated per instance: a CA (which also signs CSRs
//! for the controller-manager), the apiserver's serving certificate for the loopback names,
//! and the service-account signing key.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

pub(crate) struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

pub(crate) fn generate(dir: &Path) -> anyhow::Result<Pki> {
    let ca_key = KeyPair::generate().context("generate CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "joiner control plane CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).context("self-sign CA")?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let names = [
        "localhost",
        "127.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .map(String::from)
    .to_vec();
    let server_key = KeyPair::generate().context("generate apiserver key")?;
    let mut server_params = CertificateParams::new(names)?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .context("sign apiserver certificate")?;

    // ES256: the apiserver signs service-account tokens with the private half and
    // verifies them with the public half (a PKIX PEM: it refuses a PKCS#8 private key there).
    let sa_key = KeyPair::generate().context("generate service-account key")?;

    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        ca_key: dir.join("ca.key"),
        server_cert: dir.join("apiserver.crt"),
        server_key: dir.join("apiserver.key"),
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
    };
    let write =
        |p: &Path, s: &str| std::fs::write(p, s).with_context(|| format!("write {}", p.display()));
    write(&pki.ca_cert, &ca_cert.pem())?;
    write(&pki.ca_key, &ca_key_pem)?;
    write(&pki.server_cert, &server_cert.pem())?;
    write(&pki.server_key, &server_key.serialize_pem())?;
    write(&pki.sa_key, &sa_key.serialize_pem())?;
    write(&pki.sa_pub, &sa_key.public_key_pem())?;
    Ok(pki)
}

/// A bearer token: 32 hex digits from the kernel's random source.
pub(crate) fn random_token() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read /dev/urandom");
    b.iter().map(|x| format!("{x:02x}")).collect()
}
