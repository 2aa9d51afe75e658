//! A fault-injecting HTTP proxy in front of the AWS emulator.
//!
//! The emulator never runs out of capacity, never throttles and never loses an answer, but
//! the agent must handle all three. Rather than mock the SDK, tests point the SDK at this
//! proxy (as `AWS_ENDPOINT_URL`), which forwards every request to the emulator unless a rule
//! set at run time says otherwise. The agent under test talks real HTTP and real AWS wire
//! formats the whole way.
//!
//! ```no_run
//! let moto = joiner_test_support::MotoServer::start();
//! let proxy = fault_proxy::FaultProxy::start(&moto.endpoint());
//! // Point the SDK (or the agent process) at proxy.endpoint().
//! proxy.insufficient_capacity("c5.large", "spot"); // per-override ICE in CreateFleet
//! proxy.fleet_error("Unsupported", "m5.large", "us-east-1a", "spot"); // any code
//! proxy.throttle("DescribeInstances", 2);          // two RequestLimitExceeded (503)
//! proxy.half_succeed("CreateFleet", 1);            // forwarded, then answered 500
//! assert_eq!(proxy.count("CreateFleet"), 0);
//! ```
//!
//! Rules match the request's action: the query protocol's `Action` form parameter (EC2, IAM,
//! SQS's query mode...), or the operation part of `X-Amz-Target` for JSON protocols (SSM:
//! `AmazonSSM.GetParameter` → `GetParameter`). REST protocols (EKS) are forwarded untouched.
//! Every request is recorded ([`FaultProxy::requests`]) so tests can assert what was sent
//! where the emulator ignores it (allocation strategy, client token).
//!
//! The proxy runs on its own thread and runtime, so it works from sync and async tests alike
//! and serves agent processes started by the test. It stops when dropped.

mod fleet;
mod form;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

pub use fleet::Override;

/// A request the proxy saw, after decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `Action` (query protocols), the `X-Amz-Target` operation (JSON) or empty (REST).
    pub action: String,
    /// The decoded form parameters, in order (empty for non-query protocols).
    pub params: Vec<(String, String)>,
    /// What the proxy did instead of (or on top of) forwarding, if anything:
    /// `error:<code>`, `fleet-errors:<n>` (overrides failed), `half-succeed`.
    pub fault: Option<String>,
}

impl RecordedRequest {
    /// The first value of a form parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every `(name, value)` whose name starts with `prefix`.
    pub fn params_with_prefix(&self, prefix: &str) -> Vec<(&str, &str)> {
        self.params
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// For CreateFleet: the overrides as sent by the client (before any rule removed some).
    pub fn fleet_overrides(&self) -> Vec<Override> {
        fleet::overrides(&self.params).0
    }
}

#[derive(Debug, Clone)]
struct ErrorRule {
    action: String,
    remaining: usize,
    status: u16,
    code: String,
}

#[derive(Debug, Clone)]
struct HalfRule {
    action: String,
    remaining: usize,
}

/// CreateFleet overrides that fail with `code`.
#[derive(Debug, Clone)]
struct FleetErrorRule {
    code: String,
    /// An instance type, or `*`.
    instance_type: String,
    /// A zone, or `*`.
    zone: String,
    /// `spot` or `on-demand` (the request's default target capacity type).
    capacity_type: String,
}

impl FleetErrorRule {
    fn matches(&self, o: &Override, lifecycle: &str) -> bool {
        let zone = o.fields.get("AvailabilityZone").map(String::as_str);
        (self.instance_type == "*" || self.instance_type == o.instance_type())
            && (self.zone == "*" || Some(self.zone.as_str()) == zone)
            && self.capacity_type == lifecycle
    }
}

#[derive(Debug, Default)]
struct Rules {
    /// The first rule an override matches decides its error.
    fleet_errors: Vec<FleetErrorRule>,
    errors: Vec<ErrorRule>,
    half: Vec<HalfRule>,
    log: Vec<RecordedRequest>,
    request_no: u64,
}

struct Shared {
    upstream: String,
    rules: Mutex<Rules>,
}

/// The running proxy. Cheap to share by reference; stops on drop.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream`
    /// (`http://127.0.0.1:PORT`, e.g. `MotoServer::endpoint()`).
    pub fn start(upstream: &str) -> FaultProxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind fault proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::new(Rules::default()),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fault proxy runtime");
                rt.block_on(serve(listener, s, stopped));
            })
            .expect("spawn fault proxy");
        FaultProxy {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`: give this to the SDK as the endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, CreateFleet overrides of `instance_type` (or `*` for every type) asked
    /// for with `capacity_type` (`spot` or `on-demand`) fail with InsufficientInstanceCapacity.
    pub fn insufficient_capacity(&self, instance_type: &str, capacity_type: &str) {
        self.fleet_error(
            "InsufficientInstanceCapacity",
            instance_type,
            "*",
            capacity_type,
        );
    }

    /// From now on, CreateFleet overrides of `instance_type` in `zone` (`*` for any)
    /// asked for with `capacity_type` (`spot` or `on-demand`) fail with the error `code`:
    /// one `errorSet` item per override, as EC2 answers an instant fleet
    /// (`VcpuLimitExceeded`, `Unsupported`, `InsufficientFreeAddressesInSubnet`, ...). An
    /// override two rules match gets the first one's code.
    pub fn fleet_error(&self, code: &str, instance_type: &str, zone: &str, capacity_type: &str) {
        self.rules().fleet_errors.push(FleetErrorRule {
            code: code.to_string(),
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: capacity_type.to_string(),
        });
    }

    /// Capacity is back everywhere: no CreateFleet override fails any more.
    pub fn clear_insufficient_capacity(&self) {
        self.rules().fleet_errors.clear();
    }

    /// The next `times` requests for `action` get `RequestLimitExceeded` with HTTP 503
    /// (`ThrottlingException` with 400 for JSON protocols), as EC2 throttles.
    pub fn throttle(&self, action: &str, times: usize) {
        let code = "RequestLimitExceeded";
        self.fail(action, times, 503, code);
    }

    /// The next `times` requests for `action` get the error `code` with HTTP `status`
    /// without reaching the emulator. `usize::MAX` for "until cleared".
    pub fn fail(&self, action: &str, times: usize, status: u16, code: &str) {
        self.rules().errors.push(ErrorRule {
            action: action.to_string(),
            remaining: times,
            status,
            code: code.to_string(),
        });
    }

    /// The next `times` requests for `action` are forwarded (the emulator acts on them) but
    /// answered with HTTP 500 `InternalError`, so the caller does not know they succeeded.
    pub fn half_succeed(&self, action: &str, times: usize) {
        self.rules().half.push(HalfRule {
            action: action.to_string(),
            remaining: times,
        });
    }

    /// Removes every rule (the request log is kept).
    pub fn clear(&self) {
        let mut r = self.rules();
        r.fleet_errors.clear();
        r.errors.clear();
        r.half.clear();
    }

    /// Every request seen so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.rules().log.clone()
    }

    /// The requests seen so far for one action.
    pub fn requests_for(&self, action: &str) -> Vec<RecordedRequest> {
        self.rules()
            .log
            .iter()
            .filter(|r| r.action == action)
            .cloned()
            .collect()
    }

    /// How many requests for `action` the proxy has seen (faulted ones included).
    pub fn count(&self, action: &str) -> usize {
        self.rules()
            .log
            .iter()
            .filter(|r| r.action == action)
            .count()
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.shared.rules.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    loop {
        let conn = tokio::select! {
            _ = &mut stopped => return,
            c = listener.accept() => c,
        };
        let Ok((stream, _)) = conn else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(shared.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// What to do with one request, decided under the lock.
enum Plan {
    Forward,
    Error {
        status: u16,
        code: String,
    },
    Fleet {
        kept: Vec<Override>,
        /// Each with the error code it fails with.
        failed: Vec<(Override, String)>,
        lifecycle: String,
    },
    HalfSucceed,
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let is_form = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_string());
    let params = if is_form {
        form::decode(&body)
    } else {
        Vec::new()
    };
    let action = params
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone())
        .or(target.clone())
        .unwrap_or_default();

    let (plan, fleet_no) = {
        let mut rules = shared.rules.lock().unwrap_or_else(|e| e.into_inner());
        let plan = decide(&mut rules, &action, &params);
        let fault = match &plan {
            Plan::Forward => None,
            Plan::Error { code, .. } => Some(format!("error:{code}")),
            Plan::Fleet { failed, .. } => Some(format!("fleet-errors:{}", failed.len())),
            Plan::HalfSucceed => Some("half-succeed".into()),
        };
        rules.log.push(RecordedRequest {
            action: action.clone(),
            params: params.clone(),
            fault,
        });
        rules.request_no += 1;
        (plan, rules.request_no)
    };

    let json = target.is_some() && !is_form;
    Ok(match plan {
        Plan::Forward => forward(&shared.upstream, &parts, body).await,
        Plan::Error { status, code } => error_response(status, &code, json),
        Plan::HalfSucceed => {
            let _ = forward(&shared.upstream, &parts, body).await;
            error_response(500, "InternalError", json)
        }
        Plan::Fleet {
            kept,
            failed,
            lifecycle,
        } => {
            let items = fleet::error_items(&params, &failed, &lifecycle);
            if kept.is_empty() {
                xml_response(200, fleet::errors_only_response(&items, fleet_no))
            } else {
                let (_, rest) = fleet::overrides(&params);
                let new_body = form::encode(&fleet::rebuild(&rest, &kept));
                let resp = forward(&shared.upstream, &parts, Bytes::from(new_body)).await;
                if resp.status() != StatusCode::OK {
                    resp
                } else {
                    let status = resp.status().as_u16();
                    let text = resp
                        .into_body()
                        .collect()
                        .await
                        .map(|c| String::from_utf8_lossy(&c.to_bytes()).into_owned())
                        .unwrap_or_default();
                    xml_response(status, fleet::inject_errors(&text, &items))
                }
            }
        }
    })
}

fn decide(rules: &mut Rules, action: &str, params: &[(String, String)]) -> Plan {
    if let Some(r) = rules
        .errors
        .iter_mut()
        .find(|r| r.action == action && r.remaining > 0)
    {
        r.remaining = r.remaining.saturating_sub(1);
        return Plan::Error {
            status: r.status,
            code: r.code.clone(),
        };
    }
    if let Some(r) = rules
        .half
        .iter_mut()
        .find(|r| r.action == action && r.remaining > 0)
    {
        r.remaining -= 1;
        return Plan::HalfSucceed;
    }
    if action == "CreateFleet" && !rules.fleet_errors.is_empty() {
        let lifecycle = fleet::capacity_type(params);
        let (all, _) = fleet::overrides(params);
        let mut kept = Vec::new();
        let mut failed = Vec::new();
        for o in all {
            match rules
                .fleet_errors
                .iter()
                .find(|r| r.matches(&o, &lifecycle))
            {
                Some(r) => failed.push((o, r.code.clone())),
                None => kept.push(o),
            }
        }
        if !failed.is_empty() {
            return Plan::Fleet {
                kept,
                failed,
                lifecycle,
            };
        }
    }
    Plan::Forward
}

async fn forward(
    upstream: &str,
    parts: &http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    match try_forward(upstream, parts, body).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = Response::new(Full::new(Bytes::from(format!(
                "fault-proxy: upstream {upstream}: {e}"
            ))));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            r
        }
    }
}

async fn try_forward(
    upstream: &str,
    parts: &http::request::Parts,
    body: Bytes,
) -> Result<Response<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::net::TcpStream::connect(upstream).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut req = Request::builder().method(parts.method.clone()).uri(path);
    // The client's Host header is kept: SigV4 signs it, and the emulator verifies signatures
    // when IAM is enforced.
    for (k, v) in &parts.headers {
        if k != hyper::header::CONTENT_LENGTH {
            req = req.header(k, v);
        }
    }
    if !parts.headers.contains_key(hyper::header::HOST) {
        req = req.header(hyper::header::HOST, upstream);
    }
    let req = req
        .header(hyper::header::CONTENT_LENGTH, body.len())
        .body(Full::new(body))?;
    let resp = sender.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let mut out = Response::from_parts(parts, Full::new(bytes.clone()));
    out.headers_mut().remove(hyper::header::TRANSFER_ENCODING);
    out.headers_mut()
        .insert(hyper::header::CONTENT_LENGTH, bytes.len().into());
    Ok(out)
}

fn error_response(status: u16, code: &str, json: bool) -> Response<Full<Bytes>> {
    let msg = format!("{code} (injected by fault-proxy)");
    if json {
        let (status, code) = if code == "RequestLimitExceeded" {
            (400, "ThrottlingException")
        } else {
            (status, code)
        };
        let body = format!("{{\"__type\":\"{code}\",\"message\":\"{msg}\"}}");
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-amz-json-1.1"),
        );
        return r;
    }
    xml_response(
        status,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}\
             </Code><Message>{msg}</Message></Error></Errors><RequestID>fault-proxy</RequestID>\
             </Response>"
        ),
    )
}

fn xml_response(status: u16, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/xml;charset=UTF-8"),
    );
    r
}
