//! Container logs: what the runner's processes write on stdout and stderr, kept per
//! container (the current run and the previous one), served as the `pods/log` subresource
//! with the query parameters `kubectl logs` sends (container, previous, tailLines,
//! limitBytes, timestamps, sinceSeconds, follow).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Response};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::status::{ApiError, ApiResult};
use crate::store::Store;

/// Bytes kept per container run: like the kubelet's default log rotation (10 MiB).
const MAX_BYTES: usize = 10 << 20;

#[derive(Debug)]
pub struct Line {
    pub at: jiff::Timestamp,
    pub bytes: Vec<u8>,
}

#[derive(Default)]
struct Run {
    lines: VecDeque<Arc<Line>>,
    bytes: usize,
}

struct ContainerLog {
    uid: String,
    current: Run,
    previous: Option<Run>,
    /// New lines for followers; `None` ends a follow (the container stopped).
    tx: broadcast::Sender<Option<Arc<Line>>>,
    /// Whether a process is writing: a follow of a stopped container ends at once.
    running: bool,
}

type Key = (String, String, String);

/// Every process-backed container's log, shared by the runner and the API.
#[derive(Default)]
pub struct PodLogs {
    inner: Mutex<HashMap<Key, ContainerLog>>,
}

fn key(ns: &str, pod: &str, container: &str) -> Key {
    (ns.to_string(), pod.to_string(), container.to_string())
}

impl PodLogs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, ContainerLog>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A container (re)starts: its last run becomes `previous`. A pod of the same name but
    /// another uid starts afresh.
    pub fn start(&self, ns: &str, pod: &str, uid: &str, container: &str) {
        let mut m = self.lock();
        let k = key(ns, pod, container);
        match m.get_mut(&k) {
            Some(log) if log.uid == uid => {
                log.previous = Some(std::mem::take(&mut log.current));
                log.running = true;
            }
            _ => {
                let (tx, _) = broadcast::channel(1024);
                m.insert(
                    k,
                    ContainerLog {
                        uid: uid.to_string(),
                        current: Run::default(),
                        previous: None,
                        tx,
                        running: true,
                    },
                );
            }
        }
    }

    pub fn append(&self, ns: &str, pod: &str, container: &str, bytes: Vec<u8>) {
        let mut m = self.lock();
        let Some(log) = m.get_mut(&key(ns, pod, container)) else {
            return;
        };
        let line = Arc::new(Line {
            at: jiff::Timestamp::now(),
            bytes,
        });
        log.current.bytes += line.bytes.len();
        log.current.lines.push_back(line.clone());
        while log.current.bytes > MAX_BYTES {
            match log.current.lines.pop_front() {
                Some(l) => log.current.bytes -= l.bytes.len(),
                None => break,
            }
        }
        let _ = log.tx.send(Some(line));
    }

    /// The container's process ended: followers' streams end.
    pub fn stop(&self, ns: &str, pod: &str, container: &str) {
        if let Some(log) = self.lock().get_mut(&key(ns, pod, container)) {
            log.running = false;
            let _ = log.tx.send(None);
        }
    }

    /// The pod is gone: its logs go too, as on a node.
    pub fn remove_pod(&self, ns: &str, pod: &str, uid: &str) {
        self.lock().retain(|(n, p, _), log| {
            if n == ns && p == pod && log.uid == uid {
                let _ = log.tx.send(None);
                false
            } else {
                true
            }
        });
    }

    /// All lines of the current (or previous) run, for tests and the API.
    pub fn text(&self, ns: &str, pod: &str, container: &str, previous: bool) -> Option<String> {
        let m = self.lock();
        let log = m.get(&key(ns, pod, container))?;
        let run = if previous {
            log.previous.as_ref()?
        } else {
            &log.current
        };
        let mut out = Vec::new();
        for l in &run.lines {
            out.extend_from_slice(&l.bytes);
        }
        Some(String::from_utf8_lossy(&out).into_owned())
    }
}

struct LogQuery {
    container: Option<String>,
    previous: bool,
    follow: bool,
    timestamps: bool,
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
    since_seconds: Option<i64>,
}

fn parse_query(q: &[(String, String)]) -> ApiResult<LogQuery> {
    let get = |k: &str| q.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let flag = |k: &str| matches!(get(k), Some("true") | Some("1"));
    let num = |k: &str| -> ApiResult<Option<i64>> {
        get(k)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid value {v:?} for {k}: not an integer"))
                })
            })
            .transpose()
    };
    Ok(LogQuery {
        container: get("container")
            .filter(|c| !c.is_empty())
            .map(str::to_string),
        previous: flag("previous"),
        follow: flag("follow"),
        timestamps: flag("timestamps"),
        tail_lines: num("tailLines")?.map(|n| n.max(0) as usize),
        limit_bytes: num("limitBytes")?.map(|n| n.max(1) as usize),
        since_seconds: num("sinceSeconds")?,
    })
}

fn render(line: &Line, timestamps: bool) -> Vec<u8> {
    if !timestamps {
        return line.bytes.clone();
    }
    let mut out = format!("{} ", line.at).into_bytes();
    out.extend_from_slice(&line.bytes);
    out
}

fn container_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `GET .../pods/NAME/log`: answers as the kubelet (through the API server) does.
pub fn respond(
    logs: &Arc<PodLogs>,
    store: &Store,
    ns: &str,
    name: &str,
    query: &[(String, String)],
) -> ApiResult<Response<Body>> {
    let pods = store.find_type("", "v1", "pods").expect("pods type");
    let pod = store.get(&pods, Some(ns), name)?;
    let q = parse_query(query)?;
    let names = container_names(&pod);
    let container = match &q.container {
        Some(c) if names.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )))
        }
        None if names.len() == 1 => names[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )))
        }
    };
    let text_response = |body: Body| {
        Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(body)
            .expect("response")
    };
    let m = logs.lock();
    let k = key(ns, name, &container);
    if !m.contains_key(&k) {
        drop(m);
        // Not a process-backed container: a running simulated container has said nothing.
        let phase = pod["status"]["phase"].as_str().unwrap_or("");
        if phase == "Pending" {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        }
        if q.previous {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        return Ok(text_response(Body::empty()));
    }
    let log = &m[&k];
    let run = if q.previous {
        match &log.previous {
            Some(r) => r,
            None => {
                return Err(ApiError::bad_request(format!(
                    "previous terminated container \"{container}\" in pod \"{name}\" not found"
                )))
            }
        }
    } else {
        &log.current
    };
    let since = q
        .since_seconds
        .map(|s| jiff::Timestamp::now() - jiff::SignedDuration::from_secs(s));
    let mut lines: Vec<&Arc<Line>> = run
        .lines
        .iter()
        .filter(|l| since.is_none_or(|t| l.at >= t))
        .collect();
    if let Some(n) = q.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    let mut body = Vec::new();
    for l in lines {
        body.extend_from_slice(&render(l, q.timestamps));
    }
    if let Some(limit) = q.limit_bytes {
        body.truncate(limit);
    }
    let follow = q.follow && !q.previous && q.limit_bytes.is_none() && log.running;
    if !follow {
        return Ok(text_response(Body::from(body)));
    }
    // Subscribe under the same lock as the snapshot: no line is lost or repeated.
    let rx = log.tx.subscribe();
    drop(m);
    let timestamps = q.timestamps;
    let stream = futures::stream::unfold((Some(body), rx), move |(first, mut rx)| async move {
        if let Some(b) = first {
            return Some((
                Ok::<_, std::convert::Infallible>(bytes::Bytes::from(b)),
                (None, rx),
            ));
        }
        loop {
            match rx.recv().await {
                Ok(Some(line)) => {
                    return Some((
                        Ok(bytes::Bytes::from(render(&line, timestamps))),
                        (None, rx),
                    ))
                }
                Ok(None) | Err(broadcast::error::RecvError::Closed) => return None,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
            }
        }
    });
    Ok(text_response(Body::from_stream(stream)))
}
