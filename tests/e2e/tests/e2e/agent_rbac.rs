//! The agent under exactly the permissions `joiner_agent` gives it, on a real Kubernetes
//! control plane (kube-apiserver with `--authorization-mode=Node,RBAC`), through the real
//! Terraform (kube-sim enforces RBAC too, and the agent's world tests run it under the same
//! rendered roles: `agent/tests/world/rbac.rs`).
//!
//! The real Terraform applies `joiner_agent`, an interruption queue and its rules, a
//! `joiner_node_class` and a `joiner_node_pool` through the provider's `kubernetes {}` block,
//! so the ServiceAccount, ClusterRole, Role, bindings and CRDs are the provider's own,
//! written through a real API server. Then the built `joiner-agent run` runs as a local
//! process with only a TokenRequest token of that ServiceAccount, and does its whole job:
//! pending pods → NodeClaims → CreateFleet in moto → Nodes (the EC2 → Node bridge, KWOK as
//! kubelet) → pods Running; a Spot interruption through EventBridge and SQS → replacement,
//! cordon, eviction; a node whose pods a PodDisruptionBudget holds, deleted on a pool with a
//! short `termination_grace_period` → the drain ends at that deadline (pods deleted, instance
//! terminated, Node and NodeClaim gone); scale to zero → consolidation deletes the nodes and
//! terminates the instances; `terraform destroy` of the pools and class → the agent releases
//! the class's finalizer. Its log must not hold a single refusal, and the same token must be
//! refused what the agent has no business doing.
//!
//! Why the agent's pods are "Running" although no agent runs in them: KWOK plays the
//! kubelet of the Nodes it manages and runs no process. A KWOK Node labelled as Fargate
//! capacity stands in for the Fargate profile that hosts the agent in a real groupless
//! cluster, so the Deployment rolls out for real and the provider's rollout wait is
//! exercised unchanged (rather than shrinking `replicas`, which the resource keeps at 1 or
//! more, or skipping the wait). The process started here plays one of those pods: it gets
//! the container's args and env read back from the applied Deployment, with the pod's
//! field references resolved, a kubeconfig with the minted token instead of the in-cluster
//! files, the emulator's endpoint and dummy keys instead of IRSA, and its metrics/health
//! ports moved to free loopback ports (a pod has a network namespace of its own).

use crate::common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::eks_with_fargate_role;
use joiner_e2e::{agent_bin, Aws, MotoServer, Workspace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

const CLUSTER: &str = "rbac";
const NAMESPACE: &str = "joiner";
const SERVICE_ACCOUNT: &str = "joiner-agent";
const APP: &str = "rbac-demo";
const REPLICAS: usize = 6;
/// The workload a PodDisruptionBudget holds, on the pool with a short grace period.
const HELD_APP: &str = "rbac-held";
const HELD_REPLICAS: usize = 2;
/// The `guarded` pool's `termination_grace_period`, in seconds.
const GRACE: i64 = 20;
/// The stand-in for the Fargate capacity the agent's own pods run on.
const SYSTEM_NODE: &str = "fargate-ip-10-0-200-1.ec2.internal";

fn filter(name: &str, value: &str) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder()
        .name(name)
        .values(value)
        .build()
}

fn config(
    url: &str,
    ca_pem: &str,
    admin_token: &str,
    subnets: &[String],
    security_group: &str,
    image_id: &str,
) -> String {
    let subnet_terms: String = subnets
        .iter()
        .map(|s| format!("  subnet_selector_term {{\n    id = \"{s}\"\n  }}\n"))
        .collect();
    format!(
        r#"provider "joiner" {{
  region = "us-east-1"
  kubernetes {{
    host                   = "{url}"
    cluster_ca_certificate = <<-PEM
{ca}
PEM
    token = "{admin_token}"
  }}
}}

resource "joiner_interruption_queue" "q" {{
  name = "{CLUSTER}-interruptions"
}}

resource "joiner_interruption_rules" "r" {{
  cluster_name = "{CLUSTER}"
  queue_arn    = joiner_interruption_queue.q.arn
}}

resource "joiner_agent" "this" {{
  cluster_name = "{CLUSTER}"
  queue_url    = joiner_interruption_queue.q.url
  role_arn     = "arn:aws:iam::123456789012:role/{CLUSTER}-agent"
  # Shorter batching than production, so the test does not wait on it.
  env = {{
    JOINER_BATCH_IDLE = "300ms"
    JOINER_BATCH_MAX  = "3s"
  }}
}}

resource "joiner_node_class" "default" {{
  cluster_name = "{CLUSTER}"
  name         = "default"
  role         = "{CLUSTER}-node"
  ami_selector_term {{
    id = "{image_id}"
  }}
{subnet_terms}  security_group_selector_term {{
    id = "{security_group}"
  }}
  depends_on = [joiner_agent.this]
}}

resource "joiner_node_pool" "general" {{
  cluster_name = "{CLUSTER}"
  name         = "general"
  node_class   = joiner_node_class.default.name
  requirement {{
    key      = "kubernetes.io/arch"
    operator = "In"
    values   = ["amd64"]
  }}
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot", "on-demand"]
  }}
  requirement {{
    key      = "karpenter.k8s.aws/instance-category"
    operator = "In"
    values   = ["c", "m", "r"]
  }}
  requirement {{
    key      = "karpenter.k8s.aws/instance-generation"
    operator = "Gt"
    values   = ["4"]
  }}
  disruption {{
    consolidation_policy = "WhenEmpty"
    consolidate_after    = "1s"
    budget {{
      nodes = "100%"
    }}
  }}
}}

# Its nodes' drains end {GRACE} s after their deletion, whatever PDBs say.
resource "joiner_node_pool" "guarded" {{
  cluster_name             = "{CLUSTER}"
  name                     = "guarded"
  node_class               = joiner_node_class.default.name
  termination_grace_period = "{GRACE}s"
  requirement {{
    key      = "kubernetes.io/arch"
    operator = "In"
    values   = ["amd64"]
  }}
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["on-demand"]
  }}
  requirement {{
    key      = "karpenter.k8s.aws/instance-category"
    operator = "In"
    values   = ["c", "m", "r"]
  }}
  disruption {{
    consolidation_policy = "WhenEmpty"
    consolidate_after    = "1s"
    budget {{
      nodes = "100%"
    }}
  }}
}}
"#,
        ca = ca_pem.trim_end(),
    )
}

/// A Node KWOK manages, shaped like the one EKS gives a Fargate pod: the agent's home.
fn system_node() -> Value {
    let (k, v) = (kube_sim::aws::KWOK_NODE_ANNOTATION, "fake");
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": SYSTEM_NODE,
            "annotations": {k: v},
            "labels": {
                "kubernetes.io/hostname": SYSTEM_NODE,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "eks.amazonaws.com/compute-type": "fargate",
                "topology.kubernetes.io/zone": "us-east-1a",
            },
        },
        "status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        },
    })
}

/// A Deployment whose pods only the NodePool's nodes can host.
fn workload(replicas: usize) -> Value {
    workload_on(APP, "general", replicas)
}

/// A Deployment `app` whose pods only `pool`'s nodes can host, with no grace of their own.
fn workload_on(app: &str, pool: &str, replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": pool},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                    }],
                },
            },
        },
    })
}

/// A kubeconfig with the server, its CA and the agent's token, and nothing else.
fn agent_kubeconfig(dir: &Path, url: &str, ca_pem: &str, token: &str) -> PathBuf {
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, ca_pem).expect("write CA");
    let path = dir.join("agent.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: {url}
    certificate-authority: {}
users:
- name: {SERVICE_ACCOUNT}
  user:
    token: {token}
contexts:
- name: agent
  context:
    cluster: cluster
    user: {SERVICE_ACCOUNT}
    namespace: {NAMESPACE}
current-context: agent
",
            ca.display()
        ),
    )
    .expect("write kubeconfig");
    path
}

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(cfg).expect("client")
}

/// `joiner-agent run` as the rendered Deployment's container would run it.
struct AgentProcess {
    child: Option<Child>,
    log: PathBuf,
    health: String,
    metrics: String,
}

impl AgentProcess {
    fn start(
        deployment: &Value,
        pod: &Value,
        kubeconfig: &Path,
        moto: &MotoServer,
        log: &Path,
    ) -> AgentProcess {
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert!(
            container["command"].is_null(),
            "the image's entrypoint is joiner-agent"
        );
        let args: Vec<String> = container["args"]
            .as_array()
            .expect("container args")
            .iter()
            .map(|a| a.as_str().expect("string arg").to_string())
            .collect();
        let mut env = container_env(container, |path| match path {
            // The process shares the test's loopback, not a pod network.
            "status.podIP" => Some("127.0.0.1".into()),
            _ => field(pod, path),
        });
        let health = format!("127.0.0.1:{}", joiner_test_support::free_port());
        let metrics = format!("127.0.0.1:{}", joiner_test_support::free_port());
        let mut set = |k: &str, v: String| match env.iter_mut().find(|(n, _)| n == k) {
            Some(e) => e.1 = v,
            None => env.push((k.into(), v)),
        };
        // Rendered as $(POD_IP):8080/8081; the ports move so that nothing else on the
        // machine collides with them.
        set("JOINER_METRICS_ADDR", metrics.clone());
        set("JOINER_HEALTH_ADDR", health.clone());
        // In place of the in-cluster files and IRSA.
        set("KUBECONFIG", kubeconfig.display().to_string());
        for (k, v) in moto.env() {
            if k != "AWS_REGION" {
                set(&k, v);
            }
        }
        let out = File::create(log).expect("agent log file");
        let err = out.try_clone().expect("agent log file");
        let child = Command::new(agent_bin())
            .args(&args)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn joiner-agent");
        AgentProcess {
            child: Some(child),
            log: log.to_path_buf(),
            health,
            metrics,
        }
    }

    fn check_alive(&mut self) {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!(
                "joiner-agent exited ({status}); its log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }

    /// SIGTERM, as the kubelet stops a pod; its whole log.
    fn stop(&mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        assert!(status.success(), "joiner-agent stopped with {status}");
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        panic!("joiner-agent did not stop within 20 s of SIGTERM");
                    }
                }
            }
        }
        std::fs::read_to_string(&self.log).expect("agent log")
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!(
                    "--- joiner-agent log (last 60 lines)\n{}",
                    lines[lines.len().saturating_sub(60)..].join("\n")
                );
            }
        }
    }
}

/// The container's environment as the kubelet builds it: literal values with `$(VAR)`
/// expanded from the variables defined before them, and `fieldRef`s resolved by `field`.
fn container_env(
    container: &Value,
    field: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_string();
        let value = if let Some(v) = e["value"].as_str() {
            expand(v, &env)
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field(path).unwrap_or_else(|| panic!("fieldRef {path} of {name}"))
        } else {
            panic!("env {name}: only values and fieldRefs are rendered, got {e}");
        };
        env.push((name, value));
    }
    env
}

/// Kubernetes' `$(VAR)` expansion; `$$` escapes, unknown references stay as written.
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after
            .strip_prefix('(')
            .and_then(|a| a.find(')').map(|j| (&a[..j], &a[j + 1..])))
        {
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A pod field by its `fieldPath` (`metadata.name`, `status.podIP`...).
fn field(obj: &Value, path: &str) -> Option<String> {
    path.split('.')
        .try_fold(obj, |v, k| v.get(k))
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// A log line that says the API server refused the agent: the status 403 (not a digit of
/// a timestamp, an ID or a hash) or the word Forbidden, which every RBAC refusal carries.
fn is_refusal(line: &str) -> bool {
    if line.to_ascii_lowercase().contains("forbidden") {
        return true;
    }
    let b = line.as_bytes();
    line.match_indices("403").any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + 3).copied();
        let separate = |c: Option<u8>| c.is_none_or(|c| !c.is_ascii_alphanumeric());
        separate(before) && separate(after) && !matches!(before, Some(b'.' | b'-' | b'/'))
    })
}

/// Things the agent must not be able to do, each tried with its token and refused with
/// 403; what was refused, for the test's output.
async fn refused_by_rbac(agent: &kube::Client) -> Vec<String> {
    let mut refused = Vec::new();
    let mut expect_403 = |what: &str, r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => refused.push(what.to_string()),
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    let secrets_all = api(agent, "", "v1", "Secret", "secrets", None);
    expect_403(
        "list Secrets cluster-wide",
        secrets_all.list(&ListParams::default()).await.map(drop),
    );
    let secrets_own = api(agent, "", "v1", "Secret", "secrets", Some(NAMESPACE));
    expect_403(
        "list Secrets in its own namespace",
        secrets_own.list(&ListParams::default()).await.map(drop),
    );
    let namespaces = api(agent, "", "v1", "Namespace", "namespaces", None);
    expect_403(
        "delete a Namespace",
        namespaces
            .delete("rbac-canary", &DeleteParams::default())
            .await
            .map(drop),
    );
    let pods = api(agent, "", "v1", "Pod", "pods", Some("default"));
    let pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "not-the-agents"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .unwrap();
    expect_403(
        "create a Pod",
        pods.create(&PostParams::default(), &pod).await.map(drop),
    );
    // Pods are deleted at a drain's deadline, never changed.
    expect_403(
        "change a Pod",
        pods.patch(
            "not-the-agents",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .map(drop),
    );
    let roles = api(
        agent,
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        None,
    );
    expect_403(
        "widen its own ClusterRole",
        roles
            .patch(
                "joiner-agent",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
                ),
            )
            .await
            .map(drop),
    );
    let service_accounts = api(
        agent,
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        Some(NAMESPACE),
    );
    expect_403(
        "read ServiceAccounts",
        service_accounts.get(SERVICE_ACCOUNT).await.map(drop),
    );
    let nodes = api(agent, "", "v1", "Node", "nodes", None);
    let node: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "invented-capacity"},
    }))
    .unwrap();
    expect_403(
        "register a Node",
        nodes.create(&PostParams::default(), &node).await.map(drop),
    );
    // And the token does work for what the agent needs (not a 401 in disguise).
    nodes
        .list(&ListParams::default())
        .await
        .expect("the agent's token lists Nodes");
    refused
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn nodes(client: &kube::Client) -> Api<DynamicObject> {
    api(client, "", "v1", "Node", "nodes", None)
}

async fn create(api: &Api<DynamicObject>, obj: Value) {
    let what = format!("{} {}", obj["kind"], obj["metadata"]["name"]);
    let o: DynamicObject = serde_json::from_value(obj).expect("object");
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("create {what}: {e}"));
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Value {
    let o = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"));
    serde_json::to_value(o).expect("JSON")
}

async fn get_opt(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"))
        .map(|o| serde_json::to_value(o).expect("JSON"))
}

async fn list(api: &Api<DynamicObject>, labels: &str) -> Vec<Value> {
    api.list(&ListParams::default().labels(labels))
        .await
        .unwrap_or_else(|e| panic!("list: {e}"))
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("JSON"))
        .collect()
}

/// The Nodes the agent's claims became.
fn our_nodes(rt: &tokio::runtime::Runtime, admin: &kube::Client) -> Vec<Value> {
    rt.block_on(list(&nodes(admin), "joiner.dev/nodeclaim"))
}

fn condition(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Instance IDs in moto that are not terminated.
fn live_instances(aws: &Aws) -> Vec<String> {
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let out = ec2
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .values("stopping")
                    .values("stopped")
                    .build(),
            )
            .send()
            .await
            .expect("ec2:DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect()
    })
}

/// A plain HTTP GET on loopback: the body of a 200 answer.
fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The sum of a metric's samples whose labels contain every one of `labels`
/// (`result="evicted"`), from the text exposition format.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls `f` until it returns `Some`, or panics naming `what`.
fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn env_expansion_follows_the_kubelet() {
    let env = vec![("POD_IP".to_string(), "10.0.0.7".to_string())];
    assert_eq!(expand("$(POD_IP):8080", &env), "10.0.0.7:8080");
    assert_eq!(expand("$(NOPE):1", &env), "$(NOPE):1");
    assert_eq!(expand("$$(POD_IP)", &env), "$(POD_IP)");
    assert_eq!(expand("a$b", &env), "a$b");
    let container = json!({"env": [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "ADDR", "value": "$(POD_NAME):1"},
    ]});
    let pod = json!({"metadata": {"name": "p-1"}});
    assert_eq!(
        container_env(&container, |p| field(&pod, p)),
        vec![
            ("POD_NAME".into(), "p-1".into()),
            ("ADDR".into(), "p-1:1".into())
        ]
    );
}

#[test]
fn refusals_are_told_from_timestamps_and_ids() {
    assert!(is_refusal(
        r#"{"level":"WARN","error":"ApiError: nodes is forbidden: User \"system:serviceaccount:joiner:joiner-agent\" cannot list"}"#
    ));
    assert!(is_refusal("status: 403, reason Forbidden"));
    assert!(is_refusal(r#"{"code":403}"#));
    assert!(!is_refusal(
        r#"{"timestamp":"2026-11-23T01:40:03.403112Z"}"#
    ));
    assert!(!is_refusal("instance i-0a403b1c launched"));
    assert!(!is_refusal("claim general-403ab"));
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    fn agent_does_its_whole_job_with_only_its_rendered_rbac() {
        let started = Instant::now();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let cluster = rt
            .block_on(kube_sim::TargetCluster::own_control_plane())
            .unwrap_or_else(|e| panic!("the real control plane: {e:#}"));
        let cp = cluster
            .control_plane_ref()
            .expect("a control plane of our own");
        let (url, ca_pem) = cluster.server().expect("a cluster this process started");
        let admin = rt.block_on(cluster.client()).expect("admin client");
        let moto = MotoServer::start();
        let aws = Aws::new(&moto);
        let t = |what: &str| eprintln!("[{:5.1}s] {what}", started.elapsed().as_secs_f64());
        t("control plane and moto up");

        // The AWS side the agent discovers: the EKS cluster (eks:DescribeCluster gives it the
        // endpoint for node bootstrap), its subnets, the VPC's default security group, an AMI.
        let eks = eks_with_fargate_role(&aws, CLUSTER, &format!("{CLUSTER}-fargate"), 42);
        // Its Fargate pod execution role goes unused: the KWOK node below plays Fargate.
        let _ = &eks.role_arn;
        let (security_group, image_id) = aws.block_on(async {
            let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
            let subnets = ec2
                .describe_subnets()
                .set_subnet_ids(Some(eks.subnets.clone()))
                .send()
                .await
                .expect("ec2:DescribeSubnets");
            let vpc = subnets.subnets()[0].vpc_id().expect("VPC id").to_string();
            let groups = ec2
                .describe_security_groups()
                .filters(filter("vpc-id", &vpc))
                .filters(filter("group-name", "default"))
                .send()
                .await
                .expect("ec2:DescribeSecurityGroups");
            let sg = groups.security_groups()[0]
                .group_id()
                .expect("group id")
                .to_string();
            let images = ec2
                .describe_images()
                .owners("amazon")
                .filters(filter("architecture", "x86_64"))
                .filters(filter("name", "al2022-ami-*"))
                .send()
                .await
                .expect("ec2:DescribeImages");
            let image = images.images()[0].image_id().expect("image id").to_string();
            (sg, image)
        });

        // KWOK plays the kubelet of the agent's home node and of every Node the bridge registers.
        rt.block_on(create(&nodes(&admin), system_node()));
        // The NodeClass role may join: its instance profile and EC2_LINUX access entry.
        rt.block_on(async {
            let conf = kube_sim::aws::sdk_config(&moto.endpoint(), "us-east-1").await;
            kube_sim::node_auth::node_role(&conf, CLUSTER, &format!("{CLUSTER}-node"), true)
                .await
                .expect("the node role and its access entry");
        });
        let (bridge_stop, bridge_rx) = tokio::sync::watch::channel(false);
        rt.block_on(cluster.bridge(
            kube_sim::aws::BridgeOptions {
                endpoint: moto.endpoint(),
                cluster: CLUSTER.into(),
                region: "us-east-1".into(),
                boot_delay: Duration::from_millis(500),
                node_grace: Duration::from_millis(500),
                poll: Duration::from_millis(200),
            },
            bridge_rx,
        ))
        .expect("EC2 -> Node bridge");

        let tf = Workspace::new(&moto);
        tf.write_config(&config(
            &url,
            &ca_pem,
            cp.token(),
            &eks.subnets,
            &security_group,
            &image_id,
        ));
        let applied = tf.apply();
        t(&format!(
            "terraform apply (agent rolled out on the KWOK node): {:.1}s",
            applied.elapsed.as_secs_f64()
        ));
        let queue_url = tf.attr("joiner_interruption_queue.q", "url");
        assert!(queue_url
            .as_str()
            .is_some_and(|u| u.ends_with("/rbac-interruptions")));

        // The agent's credential: a TokenRequest for its ServiceAccount (`kubectl create token`
        // is the TokenRequest API), in a kubeconfig that holds nothing else.
        let token = cp
            .kubectl(&[
                "create",
                "token",
                SERVICE_ACCOUNT,
                "-n",
                NAMESPACE,
                "--duration=1h",
            ])
            .expect("TokenRequest for the agent's ServiceAccount")
            .trim()
            .to_string();
        assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
        // The agent's kubeconfig and log; JOINER_E2E_KEEP=1 keeps them, as it keeps workspaces.
        let mut dir = tempfile::Builder::new()
            .prefix("joiner-agent-rbac-")
            .tempdir()
            .expect("temp dir");
        let keep = std::env::var_os("JOINER_E2E_KEEP").is_some_and(|v| !v.is_empty() && v != "0");
        dir.disable_cleanup(keep);
        let kubeconfig = agent_kubeconfig(dir.path(), &url, &ca_pem, &token);
        let agent_client = rt.block_on(client_for(&kubeconfig));

        // The process gets what the Deployment's container gets, read back from the cluster.
        let deployment = rt.block_on(get(
            &api(
                &admin,
                "apps",
                "v1",
                "Deployment",
                "deployments",
                Some(NAMESPACE),
            ),
            "joiner-agent",
        ));
        let pods = rt.block_on(list(
            &api(&admin, "", "v1", "Pod", "pods", Some(NAMESPACE)),
            "app.kubernetes.io/name=joiner-agent",
        ));
        let pod = pods
            .iter()
            .find(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"] == SYSTEM_NODE)
            .unwrap_or_else(|| panic!("an agent pod Running on {SYSTEM_NODE}: {pods:#?}"))
            .clone();
        let mut agent = AgentProcess::start(
            &deployment,
            &pod,
            &kubeconfig,
            &moto,
            &dir.path().join("agent.log"),
        );
        let identity = pod["metadata"]["name"].as_str().unwrap().to_string();
        let leases = api(
            &admin,
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            Some(NAMESPACE),
        );
        wait_for(
            "the agent to hold its Lease",
            Duration::from_secs(30),
            || {
                agent.check_alive();
                let lease = rt.block_on(get_opt(&leases, "joiner-agent"))?;
                (lease["spec"]["holderIdentity"] == identity.as_str()).then_some(())
            },
        );
        wait_for(
            "the agent ready (caches synced)",
            Duration::from_secs(30),
            || {
                agent.check_alive();
                http_get(&agent.health, "/readyz").map(drop)
            },
        );
        t("agent leading and ready with its own token");

        // Pending pods that only the NodePool can host.
        rt.block_on(create(
            &api(
                &admin,
                "apps",
                "v1",
                "Deployment",
                "deployments",
                Some("default"),
            ),
            workload(REPLICAS),
        ));
        let workload_pods = api(&admin, "", "v1", "Pod", "pods", Some("default"));
        let claims_api = api(&admin, "joiner.dev", "v1", "NodeClaim", "nodeclaims", None);
        let all_running = || {
            let pods = rt.block_on(list(&workload_pods, &format!("app={APP}")));
            (pods.len() == REPLICAS && pods.iter().all(|p| p["status"]["phase"] == "Running"))
                .then_some(pods)
        };
        wait_for(
            &format!("{REPLICAS} pods Running on the pool's nodes"),
            Duration::from_secs(120),
            || {
                agent.check_alive();
                all_running()
            },
        );
        t(&format!("{REPLICAS} pods Running"));
        // Claims, instances and Nodes agree once the fleet has settled (a claim launched for
        // pods kube-scheduler then placed elsewhere may still be registering, or be removed).
        let (claims, instances, node_names) = wait_for(
            "every claim Registered with one live instance and its Node",
            Duration::from_secs(60),
            || {
                let claims = rt.block_on(list(&claims_api, ""));
                let live = live_instances(&aws);
                let ours = our_nodes(&rt, &admin);
                let registered = claims.iter().all(|c| {
                    c["metadata"]["deletionTimestamp"].is_null()
                        && condition(c, "Registered")
                        && condition(c, "Initialized")
                });
                (!claims.is_empty()
                    && registered
                    && live.len() == claims.len()
                    && ours.len() == claims.len())
                .then_some((claims, live, ours))
            },
        );
        for c in &claims {
            assert_eq!(c["metadata"]["labels"]["karpenter.sh/nodepool"], "general");
            assert!(
                c["status"]["providerID"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("aws:///us-east-1")),
                "{c:#}"
            );
        }
        let node_names: Vec<&str> = node_names
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str())
            .collect();
        let pods = all_running().expect("still Running");
        for p in &pods {
            let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
            assert!(
                node_names.contains(&node),
                "pod {} on {node}, not on a claim's Node {node_names:?}",
                p["metadata"]["name"]
            );
        }
        t(&format!(
            "{} NodeClaims, {} instances in moto, {} Nodes",
            claims.len(),
            instances.len(),
            node_names.len()
        ));

        // A Spot interruption warning for the node with the most pods, through EventBridge and
        // the queue: the agent replaces it, cordons it and evicts its pods (pods/eviction).
        let (victim_node, victim_pods) = {
            let mut count = std::collections::BTreeMap::<String, usize>::new();
            for p in &pods {
                *count
                    .entry(p["spec"]["nodeName"].as_str().unwrap_or_default().into())
                    .or_default() += 1;
            }
            count.into_iter().max_by_key(|(_, n)| *n).unwrap()
        };
        let victim_instance = {
            let node = rt.block_on(get(&nodes(&admin), &victim_node));
            node["spec"]["providerID"]
                .as_str()
                .and_then(|p| p.rsplit('/').next())
                .expect("providerID aws:///<zone>/<instance>")
                .to_string()
        };
        aws.block_on(async {
            let events = aws_sdk_eventbridge::Client::new(aws.sdk_config());
            let out = events
                .put_events()
                .entries(
                    aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                        .source("aws.ec2")
                        .detail_type("EC2 Spot Instance Interruption Warning")
                        .detail(
                            json!({"instance-id": victim_instance, "instance-action": "terminate"})
                                .to_string(),
                        )
                        .build(),
                )
                .send()
                .await
                .expect("events:PutEvents");
            assert_eq!(out.failed_entry_count(), 0, "{out:?}");
        });
        let warned = Instant::now();
        wait_for(
            "the warned node drained and gone, every pod Running elsewhere",
            Duration::from_secs(90),
            || {
                agent.check_alive();
                let gone = rt.block_on(get_opt(&nodes(&admin), &victim_node)).is_none();
                let terminated = !live_instances(&aws).contains(&victim_instance);
                let pods = all_running()?;
                let moved = pods
                    .iter()
                    .all(|p| p["spec"]["nodeName"] != victim_node.as_str());
                (gone && terminated && moved).then_some(())
            },
        );
        t(&format!(
            "interruption of {victim_instance}: replaced, drained, terminated in {:.1}s",
            warned.elapsed().as_secs_f64()
        ));

        drain_ends_at_the_grace_period(&rt, &admin, &aws, &mut agent, &t);

        // Scale to zero: emptiness consolidation removes every node and instance.
        for app in [APP, HELD_APP] {
            rt.block_on(async {
                api(
                    &admin,
                    "apps",
                    "v1",
                    "Deployment",
                    "deployments",
                    Some("default"),
                )
                .patch(
                    app,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": 0}})),
                )
                .await
                .expect("scale the workload to zero")
            });
        }
        let emptied = Instant::now();
        wait_for(
            "claims, nodes and instances gone",
            Duration::from_secs(90),
            || {
                agent.check_alive();
                let claims = rt.block_on(list(&claims_api, "")).len();
                let nodes = our_nodes(&rt, &admin).len();
                let live = live_instances(&aws).len();
                (claims == 0 && nodes == 0 && live == 0).then_some(())
            },
        );
        t(&format!(
            "scaled to zero: nodes removed and instances terminated in {:.1}s",
            emptied.elapsed().as_secs_f64()
        ));

        // Destroying the pool and the class needs the running agent: it releases the class's
        // finalizer (nodeclasses patch) once no claim uses it.
        let r = tf.terraform(&[
            "destroy",
            "-no-color",
            "-input=false",
            "-auto-approve",
            "-target=joiner_node_pool.general",
            "-target=joiner_node_pool.guarded",
            "-target=joiner_node_class.default",
        ]);
        assert!(r.success(), "targeted destroy failed:\n{r}");
        t("terraform destroy of the pools and class (finalizer released by the agent)");

        // Least privilege: the same token is refused what the agent must never do.
        rt.block_on(create(
            &api(&admin, "", "v1", "Namespace", "namespaces", None),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rbac-canary"}}),
        ));
        let refusals = rt.block_on(refused_by_rbac(&agent_client));
        assert!(
            rt.block_on(get_opt(
                &api(&admin, "", "v1", "Namespace", "namespaces", None),
                "rbac-canary"
            ))
            .is_some_and(|n| n["metadata"]["deletionTimestamp"].is_null()),
            "the canary namespace survived the agent's delete"
        );
        t(&format!("refused: {}", refusals.join("; ")));

        // What the agent counted: every drain went through the Eviction API, the interruption
        // was acted on with a replacement, and no Kubernetes call came back 403.
        let metrics = http_get(&agent.metrics, "/metrics").expect("the agent's /metrics");
        let evicted = metric(&metrics, "joiner_evictions_total", &["result=\"evicted\""]);
        assert!(
            evicted >= victim_pods as f64,
            "{victim_pods} pods on the warned node, {evicted} evicted:\n{metrics}"
        );
        assert!(
            metric(&metrics, "joiner_interruption_replacements_total", &[]) >= 1.0,
            "{metrics}"
        );
        assert_eq!(
            metric(
                &metrics,
                "joiner_kubernetes_errors_total",
                &["code=\"403\""]
            ),
            0.0,
            "{metrics}"
        );
        t(&format!(
            "agent metrics: {evicted} evictions, {} Kubernetes errors, none 403",
            metric(&metrics, "joiner_kubernetes_errors_total", &[]) as u64
        ));

        // Its Events (core/v1 create, in the namespaces of what they are about) got written.
        let events = rt.block_on(list(&api(&admin, "", "v1", "Event", "events", None), ""));
        let mut reasons: Vec<&str> = events
            .iter()
            .filter(|e| e["reportingInstance"] == identity.as_str())
            .filter_map(|e| e["reason"].as_str())
            .collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert!(
            !reasons.is_empty(),
            "no Event from the agent ({identity}) among {} Events",
            events.len()
        );
        t(&format!(
            "Event reasons the agent wrote: {}",
            reasons.join(", ")
        ));

        let log = agent.stop();
        let lines: Vec<&str> = log.lines().collect();
        assert!(
            log.contains("caches synced"),
            "the agent's log is its own:\n{log}"
        );
        let refused: Vec<&&str> = lines.iter().filter(|l| is_refusal(l)).collect();
        assert!(
            refused.is_empty(),
            "the agent was refused under its own RBAC:\n{}",
            refused
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
        t(&format!(
            "agent log: {} lines, none refused (403/forbidden){}",
            lines.len(),
            if keep {
                format!(", kept in {}", dir.path().display())
            } else {
                String::new()
            }
        ));

        // The rest (agent, queue, rules) goes with the agent stopped, as on a real teardown.
        tf.destroy();
        let _ = bridge_stop.send(true);
        eprintln!(
            "agent under its own RBAC on the real control plane: done in {:.1}s (nproc={})",
            started.elapsed().as_secs_f64(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
    }

    /// A node whose pods a PodDisruptionBudget holds (minAvailable = replicas), deleted on
    /// the `guarded` pool: before the grace period the Eviction API refuses and nothing
    /// leaves; from its end the agent deletes the pods (`pods: delete`, which a ClusterRole
    /// without it answers with 403, leaving the node cordoned and billed forever), then the
    /// instance is terminated and the Node and NodeClaim go.
    fn drain_ends_at_the_grace_period(
        rt: &tokio::runtime::Runtime,
        admin: &kube::Client,
        aws: &Aws,
        agent: &mut AgentProcess,
        t: &dyn Fn(&str),
    ) {
        let held = held_workload_running(rt, admin, agent);
        let claims_api = api(admin, "joiner.dev", "v1", "NodeClaim", "nodeclaims", None);
        rt.block_on(claims_api.delete(&held.claim, &DeleteParams::default()))
            .expect("delete the NodeClaim");
        let deleted: jiff::Timestamp = rt.block_on(get(&claims_api, &held.claim))["metadata"]
            ["deletionTimestamp"]
            .as_str()
            .expect("held by its finalizer")
            .parse()
            .expect("RFC 3339");
        let deadline = deleted + jiff::SignedDuration::from_secs(GRACE);
        t(&format!(
            "NodeClaim {} deleted: {} {HELD_APP} pod(s) on {}, drain deadline {deadline}",
            held.claim,
            held.pods.len(),
            held.node
        ));
        assert_held_before(rt, admin, agent, &held, deadline);
        t("eviction refused by the PDB before the deadline");

        // From the deadline: deleted, then the instance, Node and NodeClaim go.
        let pods_api = api(admin, "", "v1", "Pod", "pods", Some("default"));
        wait_for(
            "the held pods deleted at the deadline",
            Duration::from_secs(GRACE as u64 + 60),
            || {
                agent.check_alive();
                let now = rt.block_on(list(&pods_api, &format!("app={HELD_APP}")));
                held.pods
                    .iter()
                    .all(|(_, uid)| !now.iter().any(|p| p["metadata"]["uid"] == uid.as_str()))
                    .then_some(())
            },
        );
        let gone_at = jiff::Timestamp::now();
        assert!(
            gone_at >= deadline,
            "pods deleted at {gone_at}, before the deadline {deadline}"
        );
        wait_for(
            "the instance terminated, the Node and the NodeClaim gone",
            Duration::from_secs(60),
            || {
                agent.check_alive();
                let live = live_instances(aws).contains(&held.instance);
                let node_left = rt.block_on(get_opt(&nodes(admin), &held.node)).is_some();
                let claim_left = rt.block_on(get_opt(&claims_api, &held.claim)).is_some();
                (!live && !node_left && !claim_left).then_some(())
            },
        );
        t(&format!(
            "drain ended at the grace period: pods deleted {:.1}s after the deadline, {} terminated, Node and NodeClaim gone",
            deadline.duration_until(gone_at).as_secs_f64(),
            held.instance
        ));
        wait_held_running(rt, admin, agent);
    }

    /// The node the drain test disrupts: its name, NodeClaim, instance, and the held pods
    /// on it as (name, uid).
    struct HeldNode {
        node: String,
        claim: String,
        instance: String,
        pods: Vec<(String, String)>,
    }

    /// The held workload and its PodDisruptionBudget, Running; the first pod's node.
    fn held_workload_running(
        rt: &tokio::runtime::Runtime,
        admin: &kube::Client,
        agent: &mut AgentProcess,
    ) -> HeldNode {
        let deployments = api(
            admin,
            "apps",
            "v1",
            "Deployment",
            "deployments",
            Some("default"),
        );
        rt.block_on(create(
            &deployments,
            workload_on(HELD_APP, "guarded", HELD_REPLICAS),
        ));
        let pdbs = api(
            admin,
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            Some("default"),
        );
        rt.block_on(create(
            &pdbs,
            json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": HELD_APP, "namespace": "default"},
                "spec": {"minAvailable": HELD_REPLICAS, "selector": {"matchLabels": {"app": HELD_APP}}},
            }),
        ));
        let running = wait_held_running(rt, admin, agent);
        let node_name = running[0]["spec"]["nodeName"].as_str().unwrap().to_string();
        let node = rt.block_on(get(&nodes(admin), &node_name));
        HeldNode {
            claim: node["metadata"]["labels"]["joiner.dev/nodeclaim"]
                .as_str()
                .expect("the Node names its NodeClaim")
                .to_string(),
            instance: node["spec"]["providerID"]
                .as_str()
                .and_then(|p| p.rsplit('/').next())
                .expect("providerID aws:///<zone>/<instance>")
                .to_string(),
            pods: running
                .iter()
                .filter(|p| p["spec"]["nodeName"] == node_name.as_str())
                .map(|p| {
                    let m = &p["metadata"];
                    (
                        m["name"].as_str().unwrap().into(),
                        m["uid"].as_str().unwrap().into(),
                    )
                })
                .collect(),
            node: node_name,
        }
    }

    /// Waits for every replica of the held workload Running; the pods.
    fn wait_held_running(
        rt: &tokio::runtime::Runtime,
        admin: &kube::Client,
        agent: &mut AgentProcess,
    ) -> Vec<Value> {
        let pods_api = api(admin, "", "v1", "Pod", "pods", Some("default"));
        wait_for(
            &format!("{HELD_REPLICAS} {HELD_APP} pods Running on guarded nodes"),
            Duration::from_secs(120),
            || {
                agent.check_alive();
                let pods = rt.block_on(list(&pods_api, &format!("app={HELD_APP}")));
                (pods.len() == HELD_REPLICAS
                    && pods.iter().all(|p| p["status"]["phase"] == "Running"))
                .then_some(pods)
            },
        )
    }

    /// Before the deadline: the drain has started (an `EvictionBlocked` Event on a held
    /// pod) and the PDB holds it: every held pod still there, not terminating.
    fn assert_held_before(
        rt: &tokio::runtime::Runtime,
        admin: &kube::Client,
        agent: &mut AgentProcess,
        held: &HeldNode,
        deadline: jiff::Timestamp,
    ) {
        let events_api = api(admin, "", "v1", "Event", "events", Some("default"));
        wait_for(
            "an EvictionBlocked Event on a held pod",
            Duration::from_secs(GRACE as u64),
            || {
                agent.check_alive();
                let events = rt.block_on(list(&events_api, ""));
                events
                    .iter()
                    .any(|e| {
                        e["reason"] == "EvictionBlocked"
                            && held
                                .pods
                                .iter()
                                .any(|(n, _)| e["involvedObject"]["name"] == n.as_str())
                    })
                    .then_some(())
            },
        );
        let pods_api = api(admin, "", "v1", "Pod", "pods", Some("default"));
        let still: Vec<(String, bool)> = rt
            .block_on(list(&pods_api, &format!("app={HELD_APP}")))
            .iter()
            .map(|p| {
                let m = &p["metadata"];
                let uid = m["uid"].as_str().unwrap_or_default().to_string();
                (uid, m["deletionTimestamp"].is_null())
            })
            .collect();
        assert!(
            jiff::Timestamp::now() < deadline,
            "the refusal was seen before the deadline {deadline}"
        );
        for (name, uid) in &held.pods {
            assert!(
                still.contains(&(uid.clone(), true)),
                "{name} still there and not terminating before the deadline: {still:?}"
            );
        }
    }
}
