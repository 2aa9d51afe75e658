//! Readiness probes, as the kubelet runs them: `httpGet` (a status from 200 to 399 is a
//! success) and `tcpSocket` (a connection is a success), each within its timeout.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A probe resolved against its container: where to connect and what to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Http {
        addr: SocketAddr,
        path: String,
        host: String,
    },
    Tcp {
        addr: SocketAddr,
    },
    /// `exec` and `grpc` are not run: kube-sim reports them as passing.
    Unsupported,
}

#[derive(Debug, Clone)]
pub struct ProbeSpec {
    pub probe: Probe,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn port_of(port: &Value, container: &Value) -> Option<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = port.as_str()?;
    if let Ok(n) = name.parse::<u16>() {
        return Some(n);
    }
    container["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)?["containerPort"]
        .as_u64()
        .and_then(|n| u16::try_from(n).ok())
}

/// The readiness probe of a container, resolved against the pod IP; None without one.
pub fn readiness(container: &Value, pod_ip: IpAddr) -> Option<ProbeSpec> {
    let p = &container["readinessProbe"];
    if !p.is_object() {
        return None;
    }
    let secs = |k: &str, d: u64| Duration::from_secs(p[k].as_u64().unwrap_or(d));
    let probe = if p["httpGet"].is_object() {
        let h = &p["httpGet"];
        match port_of(&h["port"], container) {
            Some(port) => {
                let ip = h["host"]
                    .as_str()
                    .and_then(|s| s.parse::<IpAddr>().ok())
                    .unwrap_or(pod_ip);
                let addr = SocketAddr::new(ip, port);
                Probe::Http {
                    addr,
                    path: h["path"].as_str().unwrap_or("/").to_string(),
                    host: addr.to_string(),
                }
            }
            None => Probe::Unsupported,
        }
    } else if p["tcpSocket"].is_object() {
        match port_of(&p["tcpSocket"]["port"], container) {
            Some(port) => Probe::Tcp {
                addr: SocketAddr::new(pod_ip, port),
            },
            None => Probe::Unsupported,
        }
    } else {
        Probe::Unsupported
    };
    Some(ProbeSpec {
        probe,
        initial_delay: secs("initialDelaySeconds", 0),
        period: secs("periodSeconds", 10).max(Duration::from_secs(1)),
        timeout: secs("timeoutSeconds", 1).max(Duration::from_secs(1)),
        success_threshold: p["successThreshold"].as_u64().unwrap_or(1).max(1) as u32,
        failure_threshold: p["failureThreshold"].as_u64().unwrap_or(3).max(1) as u32,
    })
}

/// Runs one probe; true on success.
pub async fn check(probe: &Probe, timeout: Duration) -> bool {
    let fut = async {
        match probe {
            Probe::Unsupported => true,
            Probe::Tcp { addr } => tokio::net::TcpStream::connect(addr).await.is_ok(),
            Probe::Http { addr, path, host } => {
                let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                    return false;
                };
                let req = format!(
                    "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n\r\n"
                );
                if s.write_all(req.as_bytes()).await.is_err() {
                    return false;
                }
                let mut head = Vec::with_capacity(64);
                let mut buf = [0u8; 256];
                while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head);
                line.split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse::<u16>().ok())
                    .is_some_and(|c| (200..400).contains(&c))
            }
        }
    };
    tokio::time::timeout(timeout, fut).await.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn named_ports_resolve_against_the_container() {
        let c = json!({"ports": [{"name": "health", "containerPort": 8081}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 2}});
        let spec = readiness(&c, "127.5.0.1".parse().unwrap()).unwrap();
        assert_eq!(
            spec.probe,
            Probe::Http {
                addr: "127.5.0.1:8081".parse().unwrap(),
                path: "/readyz".into(),
                host: "127.5.0.1:8081".into()
            }
        );
        assert_eq!(spec.period, Duration::from_secs(2));
        assert_eq!(spec.failure_threshold, 3);
    }

    #[tokio::test]
    async fn http_probe_accepts_2xx_3xx_and_refuses_the_rest() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            for code in [200, 302, 503] {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let p = Probe::Http {
            addr,
            path: "/".into(),
            host: addr.to_string(),
        };
        assert!(check(&p, Duration::from_secs(2)).await);
        assert!(check(&p, Duration::from_secs(2)).await);
        assert!(!check(&p, Duration::from_secs(2)).await);
        assert!(
            !check(&p, Duration::from_secs(2)).await,
            "nothing listens any more"
        );
    }
}
