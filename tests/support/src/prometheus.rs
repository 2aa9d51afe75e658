//! A real Prometheus (Debian's build, installed into `.tools/bin` by
//! `scripts/install-prometheus.sh`) scraping the agents of a test or of the sandbox, with
//! `monitoring/rules.yml` loaded, and its HTTP API. Answers are returned as text: the
//! callers parse the JSON (this crate stays on the standard library).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, workspace_root};

/// `monitoring/`: the dashboard, the rules and their unit tests.
pub fn monitoring_dir() -> PathBuf {
    workspace_root().join("monitoring")
}

/// Installs Prometheus and promtool if they are missing (idempotent; a few ms when
/// installed) and returns the directory holding both.
pub fn install() -> Result<PathBuf, String> {
    let out = Command::new(workspace_root().join("scripts/install-prometheus.sh"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running scripts/install-prometheus.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/install-prometheus.sh failed ({})",
            out.status
        ));
    }
    let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    bin.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("install-prometheus.sh printed {}", bin.display()))
}

pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus in `dir` (config, data, log), scraping `targets` (host:port, path
    /// `/metrics`) every `interval` and evaluating `monitoring/rules.yml` as often.
    /// Returns once it answers `/-/ready`.
    pub fn start(dir: &Path, targets: &[String], interval: Duration) -> Result<Prometheus, String> {
        let bin = install()?.join("prometheus");
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let every = format!("{}ms", interval.as_millis().max(100));
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n  evaluation_interval: {every}\n\
             rule_files:\n  - '{}'\n\
             scrape_configs:\n  - job_name: joiner-agent\n    static_configs:\n      - targets: [{list}]\n",
            monitoring_dir().join("rules.yml").display()
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        let log = std::fs::File::create(dir.join("prometheus.log")).map_err(|e| e.to_string())?;
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let p = Prometheus {
            child,
            addr,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if matches!(p.get("/-/ready"), Ok((200, _))) {
                return Ok(p);
            }
            if Instant::now() > deadline {
                return Err(format!("Prometheus not ready after 60 s: {}", p.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Leaves Prometheus running past this handle (the sandbox's `KEEP=1`); returns its pid.
    pub fn detach(self) -> u32 {
        let pid = self.child.id();
        std::mem::forget(self);
        pid
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path` (with its query string): status and body.
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        // HTTP/1.0: the answer comes whole, never chunked.
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        Ok(crate::http_answer(&raw))
    }

    /// `/api/v1/query` at now: the JSON answer, whatever its status (a bad expression
    /// answers 400 with `"status":"error"`).
    pub fn query(&self, expr: &str) -> std::io::Result<String> {
        self.get(&format!("/api/v1/query?query={}", encode(expr)))
            .map(|(_, b)| b)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter's value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// An alert expression as a query that answers for every series it compares, firing or
/// not: each comparison with a number gets `bool` (`x > 600` becomes `x > bool 600`), so
/// a healthy system still shows that the expression reads series that exist.
pub fn with_bool(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len() + 16);
    let mut rest = expr;
    while let Some(c) = rest.chars().next() {
        let op_len = match (c, rest.as_bytes().get(1)) {
            ('>' | '<' | '=' | '!', Some(b'=')) => 2,
            ('>' | '<', _) => 1,
            _ => 0,
        };
        if op_len == 0 {
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        out.push_str(&rest[..op_len]);
        rest = &rest[op_len..];
        if rest.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str(" bool");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bool_goes_after_comparisons_with_numbers_only() {
        assert_eq!(
            with_bool(r#"max(x{a!="b",c=~"d"}) > 600 or sum(y) <= 2"#),
            r#"max(x{a!="b",c=~"d"}) > bool 600 or sum(y) <= bool 2"#
        );
        assert_eq!(with_bool("a > b"), "a > b");
        assert_eq!(encode("a b+{c=\"d\"}"), "a%20b%2B%7Bc%3D%22d%22%7D");
    }
}
