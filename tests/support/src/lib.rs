//! Test plumbing shared by every crate's end-to-end tests.
//!
//! It only knows where the project's installed tools live (`.tools/`, filled by
//! `scripts/install-tools.sh`) and how to run the AWS emulator as a child process that
//! never outlives the test. It uses the standard library only, so that depending on it
//! costs nothing at build time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod binaries;
mod farm;
pub mod prometheus;
pub use binaries::{agent_bin, provider_bin, workspace_bin};

/// The workspace root, found from this crate's manifest directory (`tests/support`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root exists")
}

/// `.tools/` under the workspace root, where `scripts/install-tools.sh` installs things.
pub fn tools_dir() -> PathBuf {
    workspace_root().join(".tools")
}

/// The Terraform binary under test: `$TERRAFORM` when set (newer Terraform or OpenTofu),
/// otherwise the pinned 1.0.3 in `.tools/bin`.
pub fn terraform_bin() -> PathBuf {
    match std::env::var_os("TERRAFORM") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => tools_dir().join("bin/terraform"),
    }
}

/// Path of the emulator's server entry point in `.tools/venv`.
pub fn moto_server_bin() -> PathBuf {
    tools_dir().join("venv/bin/moto_server")
}

/// The Python of the emulator's venv.
pub fn moto_python() -> PathBuf {
    tools_dir().join("venv/bin/python")
}

/// The command that starts the local AWS world on `127.0.0.1:port`: moto with the
/// extensions of `tests/aws-local/joiner_local` applied (the EKS APIs moto lacks, and the
/// refusals it does not make), with AWS managed policies loaded (attaching
/// AmazonEKSClusterPolicy and the like fails with NoSuchEntity otherwise; real IAM always
/// has them). Every test and the sandbox start the emulator through this.
pub fn moto_command(port: u16) -> Command {
    let python = moto_python();
    assert!(
        python.exists() && moto_server_bin().exists(),
        "{} is missing: run scripts/install-tools.sh first",
        moto_server_bin().display()
    );
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "joiner_local",
        "-H",
        "127.0.0.1",
        "-p",
        &port.to_string(),
    ])
    .env("PYTHONPATH", workspace_root().join("tests/aws-local"))
    .env("MOTO_IAM_LOAD_MANAGED_POLICIES", "true");
    cmd
}

/// The environment variable that turns IAM enforcement on in the local world.
pub const IAM_ENV: &str = "JOINER_LOCAL_IAM";
/// Where the local world serves its IAM decisions.
pub const IAM_DECISIONS_PATH: &str = "/moto-api/joiner-local/iam/decisions";

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Asks the kernel for a free loopback port. The port is released before returning, so a
/// race with another process is possible but harmless in tests: the server fails to bind
/// and the caller sees a clear error.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// A running AWS emulator (moto server) bound to a free loopback port.
///
/// Each test gets its own server, so tests can run in parallel without sharing state. It is
/// forked from this process's farm (see [`farm`]), so it starts in milliseconds. The
/// process is killed on drop, and with the farm when this process ends however it ends, so a
/// failing test leaves no stray server.
pub struct MotoServer {
    /// A child of the farm, not of this process: the farm kills it and the kernel reaps it.
    pid: u32,
    addr: SocketAddr,
}

/// Whether the local world enforces IAM (`JOINER_LOCAL_IAM=enforce`, see
/// `tests/aws-local/joiner_local/iam_enforce.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iam {
    /// Every signed call is allowed (moto's default).
    Open,
    /// Every call is authenticated and authorized against its principal's identity policies,
    /// with IAM's semantics; refusals answer as AWS does. The default credentials (`testing`)
    /// are the admin user `local-admin`, so only principals under test are limited.
    Enforced,
}

impl MotoServer {
    /// Starts the emulator and waits (up to 30 s) until it answers HTTP.
    pub fn start() -> MotoServer {
        MotoServer::start_with(Iam::Open)
    }

    /// Starts the emulator with IAM enforced: see [`Iam::Enforced`].
    pub fn start_enforced() -> MotoServer {
        MotoServer::start_with(Iam::Enforced)
    }

    pub fn start_with(iam: Iam) -> MotoServer {
        let port = free_port();
        let mode = match iam {
            Iam::Enforced => "enforce",
            Iam::Open => "open",
        };
        let pid: u32 = farm::request(&format!("start {port} {mode}"))
            .parse()
            .unwrap_or_else(|e| panic!("the local AWS world's farm answered no PID: {e}"));
        let server = MotoServer {
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        // Listening is enough: werkzeug binds before it serves, and a request sent now waits
        // in the backlog. (`/moto-api/data.json` would serialize every model instance, the
        // managed policies included: seconds of CPU.)
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect_timeout(&server.addr, Duration::from_secs(1)).is_ok() {
                return server;
            }
            assert!(
                Path::new(&format!("/proc/{pid}")).exists(),
                "the local AWS world on port {port} exited before it listened"
            );
            assert!(
                Instant::now() < deadline,
                "the local AWS world did not listen on {} within 30 s",
                server.addr
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `http://127.0.0.1:<port>`, the value for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment a child process (terraform, the provider, the agent) needs to
    /// reach this emulator with the official AWS SDK: endpoint, credentials, region.
    ///
    /// The credentials are the long-term key of the IAM user `local-admin` (see
    /// `joiner_local/identity.py`), with no session token: AWS refuses a session token
    /// with a long-term key, and so does the local world where it checks signatures (the
    /// EKS token webhook).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".into(), self.endpoint()),
            ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_DEFAULT_REGION".into(), "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ]
    }

    /// The IAM decisions recorded under enforcement (JSON: `calls`, `refused`, `unmodelled`,
    /// `decisions`), for principals whose ARN contains `principal` (all when empty).
    pub fn iam_decisions(&self, principal: &str) -> String {
        let path = if principal.is_empty() {
            IAM_DECISIONS_PATH.to_string()
        } else {
            format!(
                "{IAM_DECISIONS_PATH}?principal={}",
                percent_encode(principal)
            )
        };
        let (status, body) = self
            .request("GET", &path, "")
            .expect("reach moto for the IAM decisions");
        assert_eq!(status, 200, "IAM decisions (is IAM enforced?): {body}");
        body
    }

    /// Clears every resource in the emulator (`POST /moto-api/reset`).
    pub fn reset(&self) {
        let (status, body) = self
            .request("POST", "/moto-api/reset", "")
            .expect("reach moto for reset");
        assert_eq!(status, 200, "moto reset failed: {body}");
    }

    /// A minimal HTTP/1.1 exchange over loopback, enough for the emulator's control API.
    /// Returns the status code and the body.
    pub fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        Ok(http_answer(&raw))
    }
}

/// Status and body of a whole HTTP/1.x answer read to the end (`Connection: close` or
/// HTTP/1.0, so never chunked).
pub(crate) fn http_answer(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        farm::kill(self.pid);
    }
}

/// Every AWS call `docs/aws-fidelity.md` names, as IAM actions (`service:Action`, written in
/// backticks there). The tests that log a principal's calls under enforced IAM (the agent's
/// round trip, the deployer's quickstart, the sandbox) check each call against this set: a
/// call the ledger does not name has not been held against AWS's rules and Karpenter's.
pub fn ledger_calls() -> std::collections::BTreeSet<String> {
    let path = workspace_root().join("docs/aws-fidelity.md");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    ledger_calls_in(&text)
}

/// [`ledger_calls`] over the ledger's text.
pub fn ledger_calls_in(text: &str) -> std::collections::BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|token| {
            token.split_once(':').is_some_and(|(service, action)| {
                !service.is_empty()
                    && service
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && action.starts_with(|c: char| c.is_ascii_uppercase())
                    && action.chars().all(|c| c.is_ascii_alphanumeric())
            })
        })
        .map(str::to_string)
        .collect()
}

/// The calls in `used` the ledger does not name.
pub fn calls_missing_from_ledger<'a>(used: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let ledger = ledger_calls();
    let mut missing: Vec<String> = used
        .into_iter()
        .filter(|a| !ledger.contains(*a))
        .map(str::to_string)
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

/// The variable that names an external cluster's kubeconfig for the end-to-end tests.
/// Only this one: an inherited `KUBECONFIG` (a developer's shell, a CI runner's) is never a
/// request to create CRDs and namespaces in whatever cluster it points at.
pub const TEST_KUBECONFIG_VAR: &str = "JOINER_TEST_KUBECONFIG";

/// The kubeconfig of a real cluster the tests were explicitly asked to run against
/// (`JOINER_TEST_KUBECONFIG`), in which case end-to-end tests that use kube-sim also run
/// against it. `KUBECONFIG` is ignored.
pub fn real_cluster_kubeconfig() -> Option<PathBuf> {
    real_cluster_kubeconfig_in(|k| std::env::var_os(k))
}

/// [`real_cluster_kubeconfig`] over an environment given as a lookup.
pub fn real_cluster_kubeconfig_in(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    env(TEST_KUBECONFIG_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A symmetric customer managed key in the emulator at `endpoint`'s KMS, made by its admin
/// (`testing`); its ARN. The workspace has no Rust KMS client: the emulator's own Python
/// has boto3, AWS's SDK.
pub fn create_kms_key(endpoint: &str, description: &str) -> String {
    let script = "import boto3, sys\n\
        kms = boto3.client('kms', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
            aws_access_key_id='testing', aws_secret_access_key='testing')\n\
        print(kms.create_key(Description=sys.argv[2])['KeyMetadata']['Arn'])\n";
    let out = Command::new(moto_python())
        .args(["-c", script, endpoint, description])
        .output()
        .expect("run boto3 kms:CreateKey");
    assert!(
        out.status.success(),
        "kms:CreateKey: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let arn = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string();
    assert!(arn.contains(":key/"), "{arn}");
    arn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moto_starts_answers_and_resets() {
        let moto = MotoServer::start();
        assert!(moto.endpoint().starts_with("http://127.0.0.1:"));
        moto.reset();
        let (status, body) = moto.request("GET", "/moto-api/data.json", "").unwrap();
        assert_eq!(status, 200);
        assert!(body.contains('{'), "data.json is JSON: {body}");
    }

    #[test]
    fn the_ledger_names_calls_as_iam_actions() {
        let calls = ledger_calls_in(
            "grants `ec2:CreateFleet` and `ec2:RunInstances` on `arn:aws:ec2:*:*:fleet/*`, \
             condition `aws:RequestTag/joiner.dev/cluster`, file `agent/src/cloud/fleet.rs`, \
             `sts:AssumeRoleWithWebIdentity` and `eks:DescribeClusterVersions`",
        );
        let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
        assert_eq!(
            calls,
            [
                "ec2:CreateFleet",
                "ec2:RunInstances",
                "eks:DescribeClusterVersions",
                "sts:AssumeRoleWithWebIdentity"
            ]
        );
        // The ledger itself names the calls every principal here makes.
        let real = ledger_calls();
        for call in ["ec2:CreateFleet", "sqs:ReceiveMessage", "eks:CreateCluster"] {
            assert!(real.contains(call), "{call} not in docs/aws-fidelity.md");
        }
    }

    #[test]
    fn only_the_dedicated_variable_names_an_external_cluster() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        // A developer's KUBECONFIG is not a request to test against their cluster.
        assert_eq!(
            real_cluster_kubeconfig_in(env(&[("KUBECONFIG", "/home/me/.kube/prod")])),
            None
        );
        assert_eq!(
            real_cluster_kubeconfig_in(env(&[
                ("KUBECONFIG", "/home/me/.kube/prod"),
                ("JOINER_TEST_KUBECONFIG", "/tmp/test-cluster"),
            ])),
            Some(PathBuf::from("/tmp/test-cluster"))
        );
        assert_eq!(
            real_cluster_kubeconfig_in(env(&[("JOINER_TEST_KUBECONFIG", "")])),
            None
        );
    }
}
