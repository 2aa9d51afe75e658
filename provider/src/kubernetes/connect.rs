//! How the provider reaches a cluster's Kubernetes API.
//!
//! By default from EKS: `DescribeCluster` gives the endpoint and CA, and a token presigned
//! with the provider's own AWS credentials authenticates (see [`super::eks_token`]). This is
//! resolved on first use, at apply or refresh time, never while configuring the provider, so
//! that Kubernetes objects plan before their cluster exists. The provider block's
//! `kubernetes {}` overrides it with a fixed host/CA/token or a kubeconfig.
//!
//! Clients are cached per cluster; EKS clients are rebuilt before their token expires.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use tokio::sync::Mutex;

use super::error::KubeError;
use super::{eks_token, unauthorized};
use crate::aws::client::AwsClients;
use crate::protocol::prelude::*;

/// How long one request may wait for a TCP/TLS connection; an unreachable endpoint fails
/// with a clear error instead of hanging until the resource's timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The provider block's `kubernetes {}` settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KubeSettings {
    /// No block: each resource's `cluster_name` through EKS.
    #[default]
    FromEks,
    Explicit {
        host: String,
        ca_pem: Option<String>,
        token: Option<String>,
        insecure: bool,
    },
    Kubeconfig {
        path: String,
        context: Option<String>,
    },
    /// The block refers to values unknown when Terraform configured the provider (for
    /// example the endpoint of a cluster created in the same run).
    Deferred,
}

impl KubeSettings {
    /// Reads the `kubernetes` block (a Single nested block: null when absent).
    pub fn from_config(block: &Value) -> KubeSettings {
        if block.is_null() {
            return KubeSettings::FromEks;
        }
        if !block.is_fully_known() {
            return KubeSettings::Deferred;
        }
        let s = |n: &str| block.get(n).as_str().map(str::to_string);
        if let Some(path) = s("config_path") {
            return KubeSettings::Kubeconfig {
                path,
                context: s("config_context"),
            };
        }
        match s("host") {
            Some(host) => KubeSettings::Explicit {
                host,
                ca_pem: s("cluster_ca_certificate"),
                token: s("token"),
                insecure: block.get("insecure").as_bool().unwrap_or(false),
            },
            None => KubeSettings::FromEks,
        }
    }

    /// The provider block's `kubernetes` schema.
    pub fn block() -> NestedBlock {
        NestedBlock::single(
            "kubernetes",
            Block::new()
                .description("How to reach the cluster's Kubernetes API. Default: from EKS, by each resource's cluster_name, with a token presigned from the provider's AWS credentials, resolved at apply time.")
                .attribute(
                    Attribute::string("host")
                        .optional()
                        .description("API server URL (https://...).")
                        .validate(|v| match v.as_str() {
                            Some(s) if s.starts_with("https://") || s.starts_with("http://") => Ok(()),
                            _ => Err("must be an https:// URL".into()),
                        }),
                )
                .attribute(
                    Attribute::string("cluster_ca_certificate")
                        .optional()
                        .description("The API server's CA: PEM, or base64 of the PEM as EKS returns it."),
                )
                .attribute(
                    Attribute::string("token")
                        .optional()
                        .sensitive()
                        .description("Bearer token."),
                )
                .attribute(
                    Attribute::bool("insecure")
                        .optional()
                        .description("Skip verifying the server certificate (never in production)."),
                )
                .attribute(
                    Attribute::string("config_path")
                        .optional()
                        .description("A kubeconfig file, instead of host/CA/token."),
                )
                .attribute(
                    Attribute::string("config_context")
                        .optional()
                        .description("The kubeconfig context (default: its current context)."),
                ),
        )
    }

    /// Cross-field checks for the provider block.
    pub fn validate(block: &Value, diags: &mut Diagnostics) {
        if block.is_null() {
            return;
        }
        let set = |n: &str| !block.get(n).is_null();
        let at = |n: &str| AttributePath::new("kubernetes").attr(n);
        if set("config_path") && set("host") {
            diags.push(Diagnostic::error_at(
                at("host"),
                "Conflicting Kubernetes settings",
                "set either host (with cluster_ca_certificate and token) or config_path, not both",
            ));
        }
        if set("config_context") && !set("config_path") {
            diags.push(Diagnostic::error_at(
                at("config_context"),
                "config_context without config_path",
                "config_context selects a context of the kubeconfig named by config_path",
            ));
        }
        if !set("config_path") && !set("host") && (set("token") || set("cluster_ca_certificate")) {
            diags.push(Diagnostic::error_at(
                at("host"),
                "Missing host",
                "token and cluster_ca_certificate need host, the API server URL",
            ));
        }
    }
}

/// A client for one cluster, with the endpoint every error names.
#[derive(Clone)]
pub struct Kube {
    pub client: kube::Client,
    pub endpoint: String,
    /// Set when the client authenticates with an EKS token: what a 401 is explained with.
    pub eks: Option<std::sync::Arc<EksAuth>>,
}

/// The EKS token a client sends, and the AWS clients to learn who signed it.
pub struct EksAuth {
    pub signing: unauthorized::EksSigning,
    aws: AwsClients,
}

impl Kube {
    /// A kube-rs error from `operation` on `object`, classified; a 401 to an EKS token is
    /// explained (who signed it, for which cluster, which causes are ruled out).
    pub async fn error(&self, e: kube::Error, operation: &str, object: &str) -> KubeError {
        let e = KubeError::from_kube(e, &self.endpoint, operation, object);
        match (&e, &self.eks) {
            (KubeError::Api { code: 401, .. }, Some(eks)) => KubeError::Unauthorized {
                operation: operation.to_string(),
                object: object.to_string(),
                explanation: self.explain_401(eks).await,
            },
            _ => e,
        }
    }

    async fn explain_401(&self, eks: &EksAuth) -> String {
        let caller = crate::aws::sts::caller_identity(&eks.aws.sts())
            .await
            .map(|c| c.arn)
            .map_err(|e| e.to_string());
        // The server's clock, from the Date header of any answer (a 401 carries one too).
        let request = http::Request::get("/version").body(Vec::new());
        let server_date = match request {
            Ok(r) => match self.client.send(r.map(Into::into)).await {
                Ok(resp) => resp
                    .headers()
                    .get(http::header::DATE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| {
                        aws_smithy_types::DateTime::from_str(
                            v,
                            aws_smithy_types::date_time::Format::HttpDate,
                        )
                        .ok()
                    })
                    .and_then(|d| SystemTime::try_from(d).ok()),
                Err(_) => None,
            },
            Err(_) => None,
        };
        unauthorized::explain(
            &eks.signing,
            &self.endpoint,
            caller.as_deref().map_err(String::as_str),
            server_date,
            SystemTime::now(),
        )
    }
}

struct Cached {
    kube: Kube,
    made: Instant,
    expires: bool,
}

/// Resolves and caches clients (one per cluster name).
pub struct Connector {
    settings: KubeSettings,
    aws: AwsClients,
    region: String,
    cache: Mutex<HashMap<String, Cached>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("mode", &self.mode())
            .finish()
    }
}

impl Connector {
    pub fn new(settings: KubeSettings, aws: AwsClients, region: String) -> Connector {
        Connector {
            settings,
            aws,
            region,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn mode(&self) -> &'static str {
        match self.settings {
            KubeSettings::FromEks => "eks",
            KubeSettings::Explicit { .. } => "explicit",
            KubeSettings::Kubeconfig { .. } => "kubeconfig",
            KubeSettings::Deferred => "deferred",
        }
    }

    /// True when a client can be had without waiting for anything created in this run
    /// (used by plan review, which must never fail a plan for lack of a cluster).
    pub fn is_configured(&self) -> bool {
        !matches!(self.settings, KubeSettings::Deferred)
    }

    /// The client for `cluster`, building (or rebuilding an expiring) one as needed.
    pub async fn client(&self, cluster: &str) -> Result<Kube, KubeError> {
        let mut cache = self.cache.lock().await;
        if let Some(c) = cache.get(cluster) {
            if !c.expires || c.made.elapsed() < eks_token::TOKEN_LIFETIME {
                return Ok(c.kube.clone());
            }
        }
        let (kube, expires) = self.build(cluster).await?;
        cache.insert(
            cluster.to_string(),
            Cached {
                kube: kube.clone(),
                made: Instant::now(),
                expires,
            },
        );
        Ok(kube)
    }

    async fn build(&self, cluster: &str) -> Result<(Kube, bool), KubeError> {
        match &self.settings {
            KubeSettings::Deferred => Err(KubeError::Config(
                "the provider's kubernetes block refers to values that were unknown when \
                 Terraform configured the provider; remove the block to resolve the cluster \
                 from EKS at apply time, or apply its inputs first"
                    .into(),
            )),
            KubeSettings::Explicit {
                host,
                ca_pem,
                token,
                insecure,
            } => {
                let config = config_for(host, ca_pem.as_deref(), token.clone(), *insecure)?;
                Ok((make(config, host)?, false))
            }
            KubeSettings::Kubeconfig { path, context } => {
                let kc = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| KubeError::Config(format!("read kubeconfig {path}: {e}")))?;
                let opts = kube::config::KubeConfigOptions {
                    context: context.clone(),
                    ..Default::default()
                };
                let mut config = kube::Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .map_err(|e| KubeError::Config(format!("kubeconfig {path}: {e}")))?;
                config.connect_timeout = Some(CONNECT_TIMEOUT);
                config.read_timeout = Some(REQUEST_TIMEOUT);
                let endpoint = config.cluster_url.to_string();
                Ok((make(config, &endpoint)?, false))
            }
            KubeSettings::FromEks => {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                let info = crate::aws::eks::cluster::describe(&self.aws.eks(), cluster, deadline)
                    .await
                    .map_err(|e| KubeError::Config(e.to_string()))?
                    .ok_or_else(|| {
                        KubeError::ClusterGone(format!(
                            "EKS cluster {cluster:?} does not exist in {} \
                                 (eks:DescribeCluster)",
                            self.region
                        ))
                    })?;
                let endpoint = info.endpoint.clone().ok_or_else(|| {
                    KubeError::Config(format!(
                        "EKS cluster {cluster:?} has no API endpoint yet (status {})",
                        info.status
                    ))
                })?;
                let signed_at = SystemTime::now();
                let token = self.eks_token(cluster, signed_at).await?;
                let config = config_for(
                    &endpoint,
                    info.certificate_authority.as_deref(),
                    Some(token),
                    false,
                )?;
                let mut kube = make(config, &endpoint)?;
                kube.eks = Some(std::sync::Arc::new(EksAuth {
                    signing: unauthorized::EksSigning {
                        cluster: cluster.to_string(),
                        region: self.region.clone(),
                        signed_at,
                    },
                    aws: self.aws.clone(),
                }));
                Ok((kube, true))
            }
        }
    }

    async fn eks_token(&self, cluster: &str, now: SystemTime) -> Result<String, KubeError> {
        use aws_credential_types::provider::ProvideCredentials;
        let provider = self.aws.config().credentials_provider().ok_or_else(|| {
            KubeError::Config("no AWS credentials to sign an EKS token with".into())
        })?;
        let creds = provider
            .provide_credentials()
            .await
            .map_err(|e| KubeError::Config(format!("AWS credentials for the EKS token: {e}")))?;
        eks_token::token(&creds, &self.region, cluster, now).map_err(KubeError::Config)
    }
}

fn make(config: kube::Config, endpoint: &str) -> Result<Kube, KubeError> {
    let client = kube::Client::try_from(config).map_err(|e| KubeError::Unreachable {
        endpoint: endpoint.to_string(),
        cause: e.to_string(),
    })?;
    Ok(Kube {
        client,
        endpoint: endpoint.to_string(),
        eks: None,
    })
}

fn config_for(
    host: &str,
    ca: Option<&str>,
    token: Option<String>,
    insecure: bool,
) -> Result<kube::Config, KubeError> {
    let uri: http::Uri = host
        .parse()
        .map_err(|e| KubeError::Config(format!("invalid Kubernetes host {host:?}: {e}")))?;
    let mut config = kube::Config::new(uri);
    if let Some(ca) = ca {
        config.root_cert = Some(pem_to_der(ca)?);
    }
    config.accept_invalid_certs = insecure;
    config.auth_info.token = token.map(Into::into);
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.default_namespace = "default".into();
    Ok(config)
}

/// The DER certificates of a PEM bundle, given as PEM or as base64 of the PEM (EKS).
pub fn pem_to_der(ca: &str) -> Result<Vec<Vec<u8>>, KubeError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let pem = if ca.contains("-----BEGIN") {
        ca.to_string()
    } else {
        let compact: String = ca.chars().filter(|c| !c.is_whitespace()).collect();
        String::from_utf8(b64.decode(compact).map_err(|e| {
            KubeError::Config(format!(
                "cluster_ca_certificate is neither PEM nor base64 of a PEM: {e}"
            ))
        })?)
        .map_err(|_| KubeError::Config("cluster_ca_certificate: base64 of non-text".into()))?
    };
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        if line.starts_with("-----BEGIN CERTIFICATE") {
            body = Some(String::new());
        } else if line.starts_with("-----END CERTIFICATE") {
            if let Some(b) = body.take() {
                out.push(b64.decode(b).map_err(|e| {
                    KubeError::Config(format!("cluster_ca_certificate: bad PEM body: {e}"))
                })?);
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
    }
    if out.is_empty() {
        return Err(KubeError::Config(
            "cluster_ca_certificate holds no CERTIFICATE block".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nAAEC\nAwQ=\n-----END CERTIFICATE-----\n";

    #[test]
    fn ca_as_pem_or_base64_pem() {
        assert_eq!(pem_to_der(PEM).unwrap(), vec![vec![0, 1, 2, 3, 4]]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(PEM);
        assert_eq!(pem_to_der(&b64).unwrap(), vec![vec![0, 1, 2, 3, 4]]);
        assert!(pem_to_der("not a cert!")
            .unwrap_err()
            .to_string()
            .contains("neither PEM"));
    }

    #[test]
    fn settings_from_the_block() {
        assert_eq!(
            KubeSettings::from_config(&Value::Null),
            KubeSettings::FromEks
        );
        let b = Value::object([
            ("host", Value::string("https://h")),
            ("token", Value::Unknown),
        ]);
        assert_eq!(KubeSettings::from_config(&b), KubeSettings::Deferred);
        let b = Value::object([
            ("config_path", Value::string("/k")),
            ("config_context", Value::string("c")),
        ]);
        assert_eq!(
            KubeSettings::from_config(&b),
            KubeSettings::Kubeconfig {
                path: "/k".into(),
                context: Some("c".into())
            }
        );
        let mut d = Diagnostics::new();
        KubeSettings::validate(&Value::object([("token", Value::string("t"))]), &mut d);
        assert_eq!(d.iter().count(), 1);
    }
}
