//! EKS bearer tokens (`k8s-aws-v1.`), authenticated the way EKS's API server does it: by a
//! TokenReview webhook (in the local world, `joiner_local.eks_token` inside the emulator,
//! which verifies the presigned STS URL and maps the caller through the cluster's access
//! entries).
//!
//! Like kube-apiserver's `--authentication-token-webhook-*`, answers are cached for two
//! minutes (successes and refusals alike; a webhook that cannot be reached is not cached),
//! and a refused token gets a bare 401 "Unauthorized": the API server never tells the client
//! why. The reason is logged and kept here, so a test can read who was authenticated; the user
//! and groups are then authorized by RBAC like any other ([`crate::authz`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// kube-apiserver's default `--authentication-token-webhook-cache-ttl`.
const CACHE_TTL: Duration = Duration::from_secs(120);
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// One decision, as the webhook gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentication {
    pub authenticated: bool,
    pub username: Option<String>,
    pub groups: Vec<String>,
    /// The webhook's `status.error` (its reason for a refusal), or why it could not be asked.
    pub error: Option<String>,
}

/// The webhook client with its cache and the log of decisions.
pub struct TokenWebhook {
    url: String,
    cache: Mutex<HashMap<[u8; 32], (Instant, Authentication)>>,
    log: Mutex<Vec<Authentication>>,
}

impl TokenWebhook {
    pub fn new(url: String) -> TokenWebhook {
        TokenWebhook {
            url,
            cache: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
        }
    }

    /// Every decision so far (cache hits excluded), oldest first.
    pub fn authentications(&self) -> Vec<Authentication> {
        self.log.lock().expect("log lock").clone()
    }

    /// Who the token is, asking the webhook unless a recent answer is cached.
    pub async fn authenticate(&self, token: &str) -> Authentication {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((at, a)) = self.cache.lock().expect("cache lock").get(&key) {
            if at.elapsed() < CACHE_TTL {
                return a.clone();
            }
        }
        let (a, cacheable) = match self.ask(token).await {
            Ok(a) => (a, true),
            Err(e) => (
                Authentication {
                    authenticated: false,
                    username: None,
                    groups: vec![],
                    error: Some(format!("token webhook {}: {e}", self.url)),
                },
                false,
            ),
        };
        match (&a.authenticated, &a.error) {
            (true, _) => {
                tracing::debug!(user = ?a.username, groups = ?a.groups, "EKS token authenticated")
            }
            (false, e) => tracing::warn!(error = ?e, "EKS token refused: 401"),
        }
        if cacheable {
            let mut cache = self.cache.lock().expect("cache lock");
            cache.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
            cache.insert(key, (Instant::now(), a.clone()));
        }
        self.log.lock().expect("log lock").push(a.clone());
        a
    }

    async fn ask(&self, token: &str) -> Result<Authentication, String> {
        let review = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let answer = tokio::time::timeout(WEBHOOK_TIMEOUT, post_json(&self.url, &review))
            .await
            .map_err(|_| format!("no answer within {WEBHOOK_TIMEOUT:?}"))??;
        let status = &answer["status"];
        let user = &status["user"];
        Ok(Authentication {
            authenticated: status["authenticated"].as_bool() == Some(true),
            username: user["username"].as_str().map(str::to_string),
            groups: user["groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            error: status["error"].as_str().map(str::to_string),
        })
    }
}

/// POSTs JSON to an `http://` URL (the local world is plain HTTP on loopback).
pub(crate) async fn post_json(url: &str, body: &Value) -> Result<Value, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err("only http:// webhook URLs are supported".into());
    }
    let host = uri.host().ok_or("URL has no host")?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    let request = http::Request::post(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(body).unwrap_or_default(),
        )))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("read answer: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("answer is not JSON: {e}"))
}
