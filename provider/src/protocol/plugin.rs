//! The go-plugin side of Terraform's plugin system: handshake, transport security and the
//! helper services every plugin serves next to its own.
//!
//! Terraform launches the provider with a magic cookie, the protocol versions it speaks and
//! (with auto-mTLS) its own client certificate in the environment. We answer with one line on
//! stdout, `CORE-VERSION|APP-VERSION|NETWORK|ADDRESS|PROTOCOL|SERVER-CERT`, then serve gRPC.

use super::proto::{health, plugin as gp, tfplugin6 as pb};
use super::resource::Provider;
use super::server::ProviderService;
use super::stop::StopToken;
use anyhow::{anyhow, bail, Context as _};
use base64::Engine as _;
use futures::Stream;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use std::io::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status};

pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// go-plugin's own protocol version (the first handshake field).
pub const CORE_PROTOCOL_VERSION: u32 = 1;
/// The Terraform plugin protocol major version we serve.
pub const APP_PROTOCOL_VERSION: u32 = 6;

/// True when the process was started by Terraform (or something that knows the cookie).
pub fn launched_by_terraform() -> bool {
    std::env::var(MAGIC_COOKIE_KEY).ok().as_deref() == Some(MAGIC_COOKIE_VALUE)
}

/// The message for someone who ran the binary by hand.
pub fn not_a_command_message(binary: &str) -> String {
    format!(
        "{binary} is a Terraform provider plugin, not a command to run directly.\n\
         Terraform starts it itself: declare the provider in a `required_providers` block, \
         or point Terraform at a local build with `dev_overrides` in a CLI config file \
         (TF_CLI_CONFIG_FILE).\n\
         To debug it, run `{binary} --debug` and export the TF_REATTACH_PROVIDERS value it prints."
    )
}

/// Picks the protocol version from `PLUGIN_PROTOCOL_VERSIONS` (a comma-separated list the
/// client supports). Absent means the client accepts our default.
pub fn negotiate_version(offered: Option<&str>) -> Result<u32, String> {
    let Some(list) = offered.filter(|s| !s.trim().is_empty()) else {
        return Ok(APP_PROTOCOL_VERSION);
    };
    let versions: Vec<u32> = list
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    if versions.contains(&APP_PROTOCOL_VERSION) {
        Ok(APP_PROTOCOL_VERSION)
    } else {
        Err(format!(
            "this provider speaks plugin protocol {APP_PROTOCOL_VERSION}, but the client offered {list:?}; \
             use Terraform 1.0 or later (or OpenTofu)"
        ))
    }
}

/// The handshake line (without the newline).
pub fn handshake_line(addr: &std::net::SocketAddr, server_cert_der: Option<&[u8]>) -> String {
    let cert = server_cert_der
        .map(|d| base64::engine::general_purpose::STANDARD_NO_PAD.encode(d))
        .unwrap_or_default();
    format!("{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|tcp|{addr}|grpc|{cert}")
}

/// The `TF_REATTACH_PROVIDERS` value for a provider served in debug mode, keyed by its
/// address and, for a public-registry address, by its twin on the other registry:
/// `source = "joiner/joiner"` means registry.terraform.io under Terraform and
/// registry.opentofu.org under OpenTofu, and each ignores the entry it has no use for.
pub fn reattach_json(provider_address: &str, addr: &std::net::SocketAddr) -> String {
    let entry = serde_json::json!({
        "Protocol": "grpc",
        "ProtocolVersion": APP_PROTOCOL_VERSION,
        "Pid": std::process::id(),
        "Test": true,
        "Addr": {"Network": "tcp", "String": addr.to_string()},
    });
    let mut map = serde_json::Map::new();
    map.insert(provider_address.to_string(), entry.clone());
    const REGISTRIES: [&str; 2] = ["registry.terraform.io/", "registry.opentofu.org/"];
    for (from, to) in [(0, 1), (1, 0)] {
        if let Some(rest) = provider_address.strip_prefix(REGISTRIES[from]) {
            map.insert(format!("{}{rest}", REGISTRIES[to]), entry.clone());
        }
    }
    serde_json::Value::Object(map).to_string()
}

pub struct ServeOptions {
    /// Serve without the cookie and TLS, print TF_REATTACH_PROVIDERS, run until Ctrl-C.
    pub debug: bool,
    /// Full provider source address, e.g. `registry.terraform.io/joiner/joiner`.
    pub provider_address: String,
}

/// A self-signed server certificate, made the way go-plugin clients expect to verify it
/// (ECDSA P-256, valid for `localhost`, usable for server and client auth).
pub struct ServerIdentity {
    pub cert: CertificateDer<'static>,
    pub key: PrivateKeyDer<'static>,
}

pub fn generate_server_identity() -> anyhow::Result<ServerIdentity> {
    use rcgen::{
        CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose,
        PKCS_ECDSA_P256_SHA256,
    };
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "terraform-provider-joiner");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = std::time::SystemTime::now();
    params.not_before = (now - Duration::from_secs(30)).into();
    params.not_after = (now + Duration::from_secs(30 * 86400)).into();
    let cert = params.self_signed(&key)?;
    Ok(ServerIdentity {
        cert: cert.der().clone(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

/// Accepts exactly the client certificate Terraform put in `PLUGIN_CLIENT_CERT`.
///
/// Pinning the exact certificate is stricter than chain validation, and necessary: the
/// go-plugin client certificate is a self-signed CA certificate, which WebPKI path
/// validation refuses as an end-entity certificate.
#[derive(Debug)]
struct PinnedClientCert {
    expected: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for PinnedClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.expected.as_ref() {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The rustls server configuration for auto-mTLS with the client's PEM certificate.
pub fn tls_config(
    client_cert_pem: &str,
    identity: &ServerIdentity,
) -> anyhow::Result<rustls::ServerConfig> {
    let expected = CertificateDer::from_pem_slice(client_cert_pem.as_bytes())
        .map_err(|e| anyhow!("PLUGIN_CLIENT_CERT is not a PEM certificate: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = PinnedClientCert {
        expected,
        algorithms: super::p521::algorithms(),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(vec![identity.cert.clone()], identity.key.clone_key())?;
    // gRPC clients (grpc-go >= 1.67) insist on ALPN h2.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A plain or TLS connection handed to tonic.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Connected for Conn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Binds the listener, honouring go-plugin's PLUGIN_MIN_PORT / PLUGIN_MAX_PORT.
async fn bind() -> anyhow::Result<TcpListener> {
    let port = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u16>().ok());
    match (port("PLUGIN_MIN_PORT"), port("PLUGIN_MAX_PORT")) {
        (Some(min), Some(max)) if min <= max => {
            for p in min..=max {
                if let Ok(l) = TcpListener::bind(("127.0.0.1", p)).await {
                    return Ok(l);
                }
            }
            bail!("no free port between PLUGIN_MIN_PORT={min} and PLUGIN_MAX_PORT={max}")
        }
        _ => Ok(TcpListener::bind("127.0.0.1:0").await?),
    }
}

/// Accepts connections (completing TLS when configured) and feeds them to tonic.
fn incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> impl Stream<Item = std::io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Conn>>(16);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            match &acceptor {
                None => {
                    if tx.send(Ok(Conn::Plain(stream))).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        match acceptor.accept(stream).await {
                            Ok(s) => {
                                let _ = tx.send(Ok(Conn::Tls(Box::new(s)))).await;
                            }
                            // A peer without the right client certificate: drop it, keep serving.
                            Err(e) => tracing::warn!("TLS handshake refused: {e}"),
                        }
                    });
                }
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// go-plugin's controller, stdio, broker and health services. They share the shutdown signal
/// so that their long-lived streams end when the plugin is asked to exit.
#[derive(Clone)]
struct PluginServices {
    shutdown: watch::Sender<bool>,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl PluginServices {
    /// A stream that yields nothing and ends at shutdown.
    fn idle_until_shutdown<T: Send + 'static>(&self) -> BoxStream<T> {
        let mut rx = self.shutdown.subscribe();
        Box::pin(
            futures::stream::once(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .filter_map(|()| async { None }),
        )
    }
}

use futures::StreamExt as _;

#[tonic::async_trait]
impl gp::grpc_controller_server::GrpcController for PluginServices {
    async fn shutdown(&self, _: Request<gp::Empty>) -> Result<Response<gp::Empty>, Status> {
        tracing::debug!("GRPCController.Shutdown: exiting");
        self.shutdown.send_replace(true);
        Ok(Response::new(gp::Empty {}))
    }
}

#[tonic::async_trait]
impl gp::grpc_stdio_server::GrpcStdio for PluginServices {
    type StreamStdioStream = BoxStream<gp::StdioData>;
    /// We never write to stdout after the handshake and log to stderr, which Terraform
    /// already captures, so there is nothing to mirror.
    async fn stream_stdio(
        &self,
        _: Request<gp::Empty>,
    ) -> Result<Response<Self::StreamStdioStream>, Status> {
        Ok(Response::new(self.idle_until_shutdown()))
    }
}

#[tonic::async_trait]
impl gp::grpc_broker_server::GrpcBroker for PluginServices {
    type StartStreamStream = BoxStream<gp::ConnInfo>;
    async fn start_stream(
        &self,
        _: Request<tonic::Streaming<gp::ConnInfo>>,
    ) -> Result<Response<Self::StartStreamStream>, Status> {
        Ok(Response::new(self.idle_until_shutdown()))
    }
}

#[tonic::async_trait]
impl health::health_server::Health for PluginServices {
    async fn check(
        &self,
        _: Request<health::HealthCheckRequest>,
    ) -> Result<Response<health::HealthCheckResponse>, Status> {
        Ok(Response::new(health::HealthCheckResponse {
            status: health::health_check_response::ServingStatus::Serving as i32,
        }))
    }
}

/// Serves `provider` until Terraform shuts it down (or, in debug mode, until Ctrl-C).
pub async fn serve<P: Provider>(provider: P, opts: ServeOptions) -> anyhow::Result<()> {
    if !opts.debug {
        negotiate_version(std::env::var("PLUGIN_PROTOCOL_VERSIONS").ok().as_deref())
            .map_err(|e| anyhow!(e))?;
    }
    let listener = bind().await.context("binding the plugin listener")?;
    let addr = listener.local_addr()?;

    let client_cert = std::env::var("PLUGIN_CLIENT_CERT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let (tls, server_cert) = match (&client_cert, opts.debug) {
        (Some(pem), false) => {
            let identity = generate_server_identity().context("generating the TLS certificate")?;
            let config = tls_config(pem, &identity)?;
            (Some(Arc::new(config)), Some(identity.cert))
        }
        // Terraform disabled auto-mTLS (or we are debugging): plaintext on loopback.
        _ => (None, None),
    };

    let (shutdown, _) = watch::channel(false);
    let services = PluginServices {
        shutdown: shutdown.clone(),
    };
    let stop = StopToken::new();
    let provider = ProviderService::new(provider, stop.clone());

    let router = tonic::transport::Server::builder()
        .add_service(pb::provider_server::ProviderServer::new(provider))
        .add_service(gp::grpc_controller_server::GrpcControllerServer::new(
            services.clone(),
        ))
        .add_service(gp::grpc_stdio_server::GrpcStdioServer::new(
            services.clone(),
        ))
        .add_service(gp::grpc_broker_server::GrpcBrokerServer::new(
            services.clone(),
        ))
        .add_service(health::health_server::HealthServer::new(services.clone()));

    {
        let mut out = std::io::stdout().lock();
        if opts.debug {
            eprintln!(
                "terraform-provider-joiner is running in debug mode. In another shell, set this \
                 and run terraform; press Ctrl-C here to stop the provider:"
            );
            writeln!(
                out,
                "TF_REATTACH_PROVIDERS='{}'",
                reattach_json(&opts.provider_address, &addr)
            )?;
        } else {
            writeln!(
                out,
                "{}",
                handshake_line(&addr, server_cert.as_ref().map(|c| c.as_ref()))
            )?;
        }
        out.flush()?;
    }

    // Terraform forwards Ctrl-C to the whole process group and then calls StopProvider;
    // dying on SIGINT would cut an apply short, so only debug mode exits on it.
    let debug = opts.debug;
    let signals = shutdown.clone();
    tokio::spawn(async move {
        loop {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            if debug {
                signals.send_replace(true);
                return;
            }
            tracing::info!("interrupt received; waiting for Terraform to stop the provider");
        }
    });

    let mut on_shutdown = shutdown.subscribe();
    let signal = async move {
        let _ = on_shutdown.wait_for(|s| *s).await;
        stop.stop();
        // The client may keep its connection open; do not let that hold the process.
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            std::process::exit(0);
        });
    };
    router
        .serve_with_incoming_shutdown(incoming(listener, tls), signal)
        .await
        .context("serving gRPC")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation() {
        assert_eq!(negotiate_version(None), Ok(6));
        assert_eq!(negotiate_version(Some("5,6")), Ok(6));
        assert_eq!(negotiate_version(Some(" 6 ")), Ok(6));
        let e = negotiate_version(Some("4,5")).unwrap_err();
        assert!(e.contains("protocol 6"), "{e}");
    }

    #[test]
    fn handshake_line_format() {
        let addr: std::net::SocketAddr = "127.0.0.1:4321".parse().unwrap();
        assert_eq!(handshake_line(&addr, None), "1|6|tcp|127.0.0.1:4321|grpc|");
        let line = handshake_line(&addr, Some(&[0xde, 0xad, 0xbe]));
        // go-plugin decodes with RawStdEncoding: no padding allowed.
        assert_eq!(line, "1|6|tcp|127.0.0.1:4321|grpc|3q2+");
        let json: serde_json::Value =
            serde_json::from_str(&reattach_json("registry.terraform.io/joiner/joiner", &addr))
                .unwrap();
        let p = &json["registry.terraform.io/joiner/joiner"];
        assert_eq!(p["ProtocolVersion"], 6);
        assert_eq!(p["Addr"]["String"], "127.0.0.1:4321");
        // OpenTofu resolves the same source to its own registry.
        assert_eq!(&json["registry.opentofu.org/joiner/joiner"], p);
        assert_eq!(json.as_object().unwrap().len(), 2);
        let private: serde_json::Value =
            serde_json::from_str(&reattach_json("example.com/joiner/joiner", &addr)).unwrap();
        assert_eq!(private.as_object().unwrap().len(), 1);
    }

    #[test]
    fn tls_config_pins_the_client_certificate() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = generate_server_identity().unwrap();
        let client = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let config = tls_config(&client.cert.pem(), &server).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(tls_config("not pem", &server).is_err());
    }
}
