//! Helpers of the conformance tests: running kubectl against a target
//! cluster, throwaway namespaces, and polling.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kube_sim::TargetCluster;

/// Runs kubectl against the target (its kubeconfig only, never the user's).
pub fn kubectl(target: &TargetCluster, args: &[&str]) -> Output {
    kubectl_stdin(target, args, None)
}

pub fn kubectl_stdin(target: &TargetCluster, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new("kubectl");
    cmd.env("KUBECONFIG", target.kubeconfig_path())
        .env_remove("KUBECTL_EXTERNAL_DIFF")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdin(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .expect("kubectl is on PATH (v1.32 is installed on these machines)");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().expect("kubectl runs")
}

/// Runs kubectl and fails the test, with its stderr, unless it succeeds. Returns stdout.
pub fn kubectl_ok(target: &TargetCluster, args: &[&str]) -> String {
    let out = kubectl(target, args);
    assert!(
        out.status.success(),
        "[{}] kubectl {} failed: {}\n{}",
        target.name(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn kubectl_json(target: &TargetCluster, args: &[&str]) -> serde_json::Value {
    let out = kubectl_ok(target, args);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("kubectl {} output is not JSON ({e}): {out}", args.join(" ")))
}

/// A namespace of its own for one test on one target, deleted when dropped.
pub struct TestNamespace<'a> {
    pub name: String,
    target: &'a TargetCluster,
}

impl<'a> TestNamespace<'a> {
    pub fn create(target: &'a TargetCluster, prefix: &str) -> TestNamespace<'a> {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        kubectl_ok(target, &["create", "namespace", &name]);
        TestNamespace { name, target }
    }
}

impl Drop for TestNamespace<'_> {
    fn drop(&mut self) {
        let _ = kubectl(
            self.target,
            &["delete", "namespace", &self.name, "--wait=false"],
        );
    }
}

/// Polls `f` until it returns Some, or panics with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub async fn wait_for_async<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Adds a Ready node with the given capacity to a kube-sim through kubectl (create, then
/// the status subresource), as a kubelet would register.
pub fn add_fake_node(
    target: &TargetCluster,
    name: &str,
    cpu: &str,
    memory: &str,
    labels: &[(&str, &str)],
) {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}});
    let out = kubectl_stdin(target, &["create", "-f", "-"], Some(&node.to_string()));
    assert!(
        out.status.success(),
        "create node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = serde_json::json!({"status": {
        "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
    }});
    kubectl_ok(
        target,
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
}
