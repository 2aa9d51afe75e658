//! Test tools for APIs the emulator lacks: see exactly what we send, and answer it.
//!
//! - [`Recorder`] is an SDK interceptor that keeps every request as it goes on the wire
//!   (method, path, body), whatever endpoint answers it.
//! - [`ScriptedEndpoint`] is a loopback HTTP/1.1 server that records each request and
//!   answers from a routing function, so that tests can exercise the success paths of
//!   EKS APIs (add-ons, version upgrades) that moto answers with a bare 404.

use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One request as sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub method: String,
    pub path: String,
    pub body: String,
}

impl Sent {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Recorder {
    sent: Arc<Mutex<Vec<Sent>>>,
}

impl Recorder {
    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "joiner-test-recorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let req = context.request();
        let uri = req.uri();
        let after_scheme = uri.split_once("://").map(|(_, r)| r).unwrap_or(uri);
        let path_and_query = after_scheme
            .find('/')
            .map(|i| &after_scheme[i..])
            .unwrap_or("/");
        self.sent.lock().unwrap().push(Sent {
            method: req.method().to_string(),
            path: path_and_query.split('?').next().unwrap_or("/").to_string(),
            body: req
                .body()
                .bytes()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
        });
        Ok(())
    }
}

/// An EKS client for `endpoint` with dummy credentials, recording what it sends.
pub fn eks_client(endpoint: &str) -> (aws_sdk_eks::Client, Recorder) {
    let recorder = Recorder::default();
    let conf = aws_sdk_eks::Config::builder()
        .behavior_version(aws_sdk_eks::config::BehaviorVersion::latest())
        .region(aws_sdk_eks::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_credential_types::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .http_client(crate::aws::client::http_client())
        .interceptor(recorder.clone())
        .build();
    (aws_sdk_eks::Client::from_conf(conf), recorder)
}

type Route = dyn Fn(&Sent) -> (u16, String) + Send + Sync;

/// A loopback server answering every request with `route(request)` as JSON.
pub struct ScriptedEndpoint {
    pub url: String,
    sent: Arc<Mutex<Vec<Sent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedEndpoint {
    pub async fn start(
        route: impl Fn(&Sent) -> (u16, String) + Send + Sync + 'static,
    ) -> ScriptedEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let route: Arc<Route> = Arc::new(route);
        let log = sent.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let route = route.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let mut reader = BufReader::new(stream);
                    // Keep-alive: serve requests on this connection until it closes.
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let mut parts = line.split_whitespace();
                        let method = parts.next().unwrap_or_default().to_string();
                        let target = parts.next().unwrap_or_default().to_string();
                        let mut length = 0usize;
                        loop {
                            let mut h = String::new();
                            if reader.read_line(&mut h).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let h = h.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = h.split_once(':') {
                                if k.eq_ignore_ascii_case("content-length") {
                                    length = v.trim().parse().unwrap_or(0);
                                }
                            }
                        }
                        let mut body = vec![0u8; length];
                        if reader.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        let sent = Sent {
                            method,
                            path: target.split('?').next().unwrap_or_default().to_string(),
                            body: String::from_utf8_lossy(&body).into_owned(),
                        };
                        let (status, reply) = route(&sent);
                        log.lock().unwrap().push(sent);
                        let mut head = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                            reply.len()
                        );
                        // restJson error code, as EKS sends it.
                        if status >= 400 {
                            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&reply) {
                                if let Some(code) = v.get("__type").and_then(|c| c.as_str()) {
                                    head.push_str(&format!("x-amzn-ErrorType: {code}\r\n"));
                                }
                            }
                        }
                        head.push_str("\r\n");
                        let stream = reader.get_mut();
                        if stream.write_all(head.as_bytes()).await.is_err()
                            || stream.write_all(reply.as_bytes()).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        ScriptedEndpoint { url, sent, task }
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

impl Drop for ScriptedEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}
