//! The two local stand-ins the sandbox runs: the AWS emulator (moto) and kube-sim.
//!
//! Both run as processes of their own, in their own process groups, so that `KEEP=1` can
//! leave them running after the player exits (the user then points kubectl and terraform at
//! them) and so that Ctrl-C in the terminal reaches the player, which stops them in order.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A child process that is stopped (SIGTERM, then SIGKILL) on drop unless it was detached.
pub struct Proc {
    pub name: &'static str,
    child: Child,
    detached: bool,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Leaves the process running when this handle goes (KEEP=1).
    pub fn detach(&mut self) {
        self.detached = true;
    }

    /// Fails with the log's tail when the process has exited.
    pub fn check_alive(&mut self, log: &Path) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); the end of its log ({}):\n{}",
                self.name,
                log.display(),
                tail(log, 30)
            );
        }
        Ok(())
    }

    fn stop(&mut self) {
        if self.detached {
            return;
        }
        if let Ok(None) = self.child.try_wait() {
            // SIGTERM first: kube-sim stops the pod processes it started (the agents).
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> Result<Proc> {
    let out = File::create(log).with_context(|| format!("create {}", log.display()))?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let child = cmd
        .spawn()
        .with_context(|| format!("start {name} ({:?})", cmd.get_program()))?;
    Ok(Proc {
        name,
        child,
        detached: false,
    })
}

/// The local AWS world (moto and its extensions, `joiner_test_support::moto_command`) on
/// `port`.
pub fn start_moto(port: u16, log: &Path) -> Result<Proc> {
    if !joiner_test_support::moto_server_bin().exists() {
        bail!("the AWS emulator is missing: run scripts/install-tools.sh");
    }
    let mut cmd = joiner_test_support::moto_command(port);
    // IAM enforced: every call is authorized against its principal's policies, so the agent
    // (on its role's IRSA credentials) is limited to the policy joiner_agent_role renders.
    cmd.env(joiner_test_support::IAM_ENV, "enforce");
    let mut p = spawn("moto", cmd, log)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if http_ok(addr, "/moto-api/data.json") {
            return Ok(p);
        }
        p.check_alive(log)?;
        if Instant::now() > deadline {
            bail!(
                "moto did not answer on {addr} within 60 s:\n{}",
                tail(log, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A GET on the emulator's control API: the status code and the body.
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    use std::io::Write;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connect to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .with_context(|| format!("read GET {path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: no HTTP answer"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("GET {path}: no status in {head:?}"))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let Some(chunk) = after.get(..n).filter(|_| n > 0) else {
            break;
        };
        out.push_str(chunk);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

fn http_ok(addr: SocketAddr, path: &str) -> bool {
    use std::io::Write;
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).is_ok() && line.contains(" 200 ")
}

/// How kube-sim is started: the EC2 bridge and Fargate simulation read the emulator, and
/// the agent's image runs unpacked in an empty root (or as the locally built binary).
pub struct KubeSimOptions<'a> {
    pub bin: &'a Path,
    pub kubeconfig: PathBuf,
    pub cluster_name: &'a str,
    pub aws_endpoint: String,
    pub boot_delay: &'a str,
    /// `(image name or prefix, local binary or unpacked image)` pairs.
    pub images: Vec<(String, PathBuf)>,
    pub env: Vec<(String, String)>,
    /// The TokenReview webhook for EKS tokens (`--eks-token-webhook`).
    pub eks_token_webhook: String,
}

/// kube-sim, once it has printed its URL and written the kubeconfig.
pub fn start_kube_sim(o: &KubeSimOptions, log: &Path) -> Result<Proc> {
    let mut cmd = Command::new(o.bin);
    cmd.args(["--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&o.kubeconfig)
        .args(["--cluster-name", o.cluster_name])
        .args(["--aws-endpoint", &o.aws_endpoint])
        .args(["--boot-delay", o.boot_delay])
        .args(["--eks-token-webhook", &o.eks_token_webhook])
        // Every Unschedulable verdict says in the log whether the pod only waited for its
        // turn: the storm's capacity figure leaves those out (crate::pending).
        .arg("--explain-unschedulable")
        // EKS's own CoreDNS, switched to Fargate by the kube-system profile's add-on.
        .arg("--eks-addons");
    for (name, path) in &o.images {
        cmd.arg("--image").arg(format!("{name}={}", path.display()));
    }
    cmd.envs(o.env.iter().map(|(k, v)| (k, v)));
    // Each bind too, so that a storm's capacity wait can be traced pod by pod.
    cmd.env("RUST_LOG", "kube_sim=info,kube_sim::scheduler=debug");
    let mut p = spawn("kube-sim", cmd, log)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if o.kubeconfig.exists() && std::fs::metadata(&o.kubeconfig)?.len() > 0 {
            return Ok(p);
        }
        p.check_alive(log)?;
        if Instant::now() > deadline {
            bail!(
                "kube-sim wrote no kubeconfig within 60 s:\n{}",
                tail(log, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Binds the EKS cluster `cluster` of `region` to the API server of `kubeconfig` in the
/// local world (`joiner_local/eks_token.py`): DescribeCluster then answers with kube-sim's
/// endpoint and CA, and the provider reaches it as it reaches EKS, with a presigned token.
pub fn bind_eks_endpoint(
    aws_port: u16,
    region: &str,
    cluster: &str,
    kubeconfig: &Path,
) -> Result<()> {
    use std::io::Write;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    let c = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("kube-sim's kubeconfig names no cluster")?;
    let body = serde_json::json!({
        "endpoint": c.server,
        "certificateAuthority": c.certificate_authority_data,
    })
    .to_string();
    let addr = SocketAddr::from(([127, 0, 0, 1], aws_port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "POST /joiner-local/eks/{region}/clusters/{cluster}/endpoint HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    if !answer.starts_with("HTTP/1.1 200") && !answer.starts_with("HTTP/1.0 200") {
        bail!("binding EKS cluster {cluster} to kube-sim failed: {answer}");
    }
    Ok(())
}

/// Whether `bin --help` mentions `needle`: how the player finds out, before starting
/// anything, that a piece it needs has not landed yet.
pub fn help_mentions(bin: &Path, args: &[&str], needle: &str) -> bool {
    Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            o.status.success() && text.contains(needle)
        })
        .unwrap_or(false)
}
