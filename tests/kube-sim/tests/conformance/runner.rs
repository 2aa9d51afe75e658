//! The process runner end to end, with real kubectl and kube-rs: a Deployment of
//! `sim-pod` (this crate's tiny container program) runs as local processes with the
//! environment a kubelet gives (downward API, `$(VAR)` expansion, service variables, a
//! service-account kubeconfig, IRSA), becomes Ready through its HTTP readiness probe, logs
//! through `kubectl logs`, is killed on deletion and replaced; exit codes become phases.
//! The runner is a kube-sim hook: these tests do not run against a real cluster.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::{add_fake_node, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use kube_sim::{ImageSource, Options, TargetCluster};
use serde_json::{json, Value};

fn sim_pod() -> ImageSource {
    ImageSource::Binary(PathBuf::from(env!("CARGO_BIN_EXE_sim-pod")))
}

fn start() -> TargetCluster {
    let target = TargetCluster::sim_with(Options {
        images: vec![("example.com/sim-pod".into(), sim_pod())],
        ..Default::default()
    })
    .expect("start kube-sim");
    add_fake_node(&target, "node-a", "8", "32Gi", &[]);
    target
}

fn apply(target: &TargetCluster, obj: &Value) {
    let out = kubectl_stdin(target, &["apply", "-f", "-"], Some(&obj.to_string()));
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `env NAME=value` lines the program printed, as a map.
fn printed_env(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("env "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pod_alive(pid: i32) -> bool {
    // A reaped process has no /proc entry; a zombie would show state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        })
        .unwrap_or(false)
}

fn pods_of(target: &TargetCluster, ns: &str, selector: &str) -> Vec<Value> {
    kubectl_json(
        target,
        &["get", "pods", "-n", ns, "-l", selector, "-o", "json"],
    )["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_as_processes_with_kubelet_env_readiness_logs_and_replacement() {
    let target = start();
    let sim = target.sim().expect("kube-sim");
    let ns = "runner";
    kubectl_ok(&target, &["create", "namespace", ns]);
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent", "namespace": ns,
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/agent"}}}),
    );
    // RBAC is enforced: the pod's service account may read pods in its namespace, no more.
    apply(
        &target,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "read-pods", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    );
    apply(
        &target,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "read-pods", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "agent"}]}),
    );
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": ns},
            "data": {"level": "debug"}}),
    );
    apply(
        &target,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
          "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "serviceAccountName": "agent",
            "containers": [{"name": "main", "image": "example.com/sim-pod:1.2.3", "args": ["serve"],
              "ports": [{"name": "health", "containerPort": 8081}],
              "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "HEALTH_ADDR", "value": "$(POD_IP):8081"},
                {"name": "LOG_LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
              ],
              "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 1}}]}}}}),
    );

    // Ready through the probe: the provider waits for exactly this.
    wait_for("deployment web ready", Duration::from_secs(60), || {
        let d = kubectl_json(
            &target,
            &["get", "deployment", "web", "-n", ns, "-o", "json"],
        );
        (d["status"]["readyReplicas"] == 2).then_some(())
    });
    let pods = pods_of(&target, ns, "app=web");
    assert_eq!(pods.len(), 2);
    let mut ips = Vec::new();
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let ip = p["status"]["podIP"].as_str().unwrap().to_string();
        let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
        assert!(parsed.is_loopback(), "pod IP {ip} is a loopback address");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
        assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);

        let log = kubectl_ok(&target, &["logs", "-n", ns, name]);
        let env = printed_env(&log);
        assert_eq!(env.get("POD_NAME").map(String::as_str), Some(name), "{log}");
        assert_eq!(env["POD_NAMESPACE"], ns);
        assert_eq!(env["POD_IP"], ip);
        assert_eq!(env["HEALTH_ADDR"], format!("{ip}:8081"));
        assert_eq!(env["LOG_LEVEL"], "debug");
        assert_eq!(env["HOSTNAME"], name);
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], sim.addr().ip().to_string());
        assert_eq!(
            env["KUBERNETES_SERVICE_PORT"],
            sim.addr().port().to_string()
        );
        assert_eq!(env["AWS_ROLE_ARN"], "arn:aws:iam::123456789012:role/agent");
        assert!(
            !env.contains_key("AWS_ENDPOINT_URL"),
            "no emulator configured: no endpoint injected"
        );
        assert!(
            !env.contains_key("AWS_ACCESS_KEY_ID"),
            "the test's own environment does not leak into pods"
        );
        let web_token = std::fs::read_to_string(&env["AWS_WEB_IDENTITY_TOKEN_FILE"]).unwrap();
        assert_eq!(web_token.split('.').count(), 3, "a JWT-shaped token");
        assert!(log.contains("sim-pod: stderr is captured too"), "{log}");
        assert!(log.contains("sim-pod: args=[\"serve\"]"), "{log}");

        // The pod's own kubeconfig works with kubectl: its service-account token is accepted.
        let out = std::process::Command::new("kubectl")
            .env("KUBECONFIG", &env["KUBECONFIG"])
            .args(["get", "pod", name, "-o", "name"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pod kubeconfig: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("pod/{name}")
        );
        let out = std::process::Command::new("kubectl")
            .env("KUBECONFIG", &env["KUBECONFIG"])
            .args(["get", "configmap", "cfg"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "the pod's role grants no ConfigMaps");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("configmaps \"cfg\" is forbidden: User \"system:serviceaccount:{ns}:agent\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"{ns}\"")),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ips.push(ip);
    }
    assert_ne!(ips[0], ips[1], "each pod has its own IP");

    // kube-rs reads the same log through the pods/log subresource, with tailLines.
    let client = sim.client().await.unwrap();
    let api: Api<Pod> = Api::namespaced(client, ns);
    let first = pods[0]["metadata"]["name"].as_str().unwrap().to_string();
    let tail = api
        .logs(
            &first,
            &LogParams {
                tail_lines: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tail.lines().count(), 1);
    let whole = api.logs(&first, &LogParams::default()).await.unwrap();
    assert!(whole.contains("sim-pod: serving on "), "{whole}");
    assert!(whole.ends_with(&tail) && whole.len() > tail.len(), "{tail}");

    // Deleting a pod kills its process and revokes its token; the Deployment replaces it.
    let pids = sim.runner().unwrap().pids(ns, &first);
    let pid = pids["main"];
    assert!(pod_alive(pid));
    let log = kubectl_ok(&target, &["logs", "-n", ns, &first]);
    // The pod's directory goes with the pod: keep a copy of its kubeconfig to try it after.
    let kubeconfig =
        std::env::temp_dir().join(format!("runner-test-{}.kubeconfig", std::process::id()));
    std::fs::copy(&printed_env(&log)["KUBECONFIG"], &kubeconfig).unwrap();
    kubectl_ok(&target, &["delete", "pod", "-n", ns, &first]);
    wait_for(
        "process of the deleted pod gone",
        Duration::from_secs(15),
        || (!pod_alive(pid)).then_some(()),
    );
    wait_for("replacement pod ready", Duration::from_secs(60), || {
        let pods = pods_of(&target, ns, "app=web");
        let ready = pods
            .iter()
            .filter(|p| p["metadata"]["name"] != first.as_str())
            .filter(|p| p["status"]["containerStatuses"][0]["ready"] == true)
            .count();
        (ready == 2).then_some(())
    });
    let out = std::process::Command::new("kubectl")
        .env("KUBECONFIG", &kubeconfig)
        .args(["get", "pods"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&kubeconfig);
    assert!(!out.status.success(), "a deleted pod's token is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized")
            || String::from_utf8_lossy(&out.stderr).contains("credentials"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Stopping kube-sim stops the processes.
    let remaining: Vec<i32> = pods_of(&target, ns, "app=web")
        .iter()
        .flat_map(|p| {
            sim.runner()
                .unwrap()
                .pids(ns, p["metadata"]["name"].as_str().unwrap())
                .into_values()
        })
        .collect();
    assert_eq!(remaining.len(), 2);
    drop(target);
    for pid in remaining {
        assert!(!pod_alive(pid), "process {pid} outlived kube-sim");
    }
}

#[test]
fn exit_codes_become_phases_and_restarts_keep_the_previous_log() {
    let target = start();
    let ns = "default";
    let pod = |name: &str, policy: &str, args: &[&str]| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "example.com/sim-pod", "args": args}]}})
    };
    apply(&target, &pod("ok", "Never", &["exit", "0"]));
    apply(&target, &pod("bad", "Never", &["exit", "3"]));
    apply(&target, &pod("crash", "Always", &["exit", "1"]));
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "simulated", "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}),
    );
    let phase = |name: &str| {
        kubectl_json(&target, &["get", "pod", name, "-n", ns, "-o", "json"])["status"]["phase"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    wait_for("ok Succeeded", Duration::from_secs(30), || {
        (phase("ok") == "Succeeded").then_some(())
    });
    wait_for("bad Failed", Duration::from_secs(30), || {
        (phase("bad") == "Failed").then_some(())
    });
    let bad = kubectl_json(&target, &["get", "pod", "bad", "-n", ns, "-o", "json"]);
    let term = &bad["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 3);
    assert_eq!(term["reason"], "Error");
    assert!(kubectl_ok(&target, &["logs", "bad"]).contains("sim-pod: exiting with 3"));

    // restartPolicy Always: the container is restarted, with back-off, and counted.
    let crash = wait_for("crash restarted", Duration::from_secs(30), || {
        let p = kubectl_json(&target, &["get", "pod", "crash", "-n", ns, "-o", "json"]);
        (p["status"]["containerStatuses"][0]["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1)
            .then_some(p)
    });
    assert_eq!(crash["status"]["phase"], "Running");
    assert_eq!(
        crash["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        1
    );
    // The restart is counted when the container exits; its log becomes "previous" only
    // when the next run starts, after the back-off, so wait for that rather than racing it.
    let previous = wait_for("previous log", Duration::from_secs(30), || {
        let out = kubectl(&target, &["logs", "crash", "--previous"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert!(previous.contains("sim-pod: exiting with 1"), "{previous}");

    // Another image: the simulated kubelet, as before (no process, a 10.x address).
    let sim_pod = wait_for("simulated pod running", Duration::from_secs(30), || {
        let p = kubectl_json(
            &target,
            &["get", "pod", "simulated", "-n", ns, "-o", "json"],
        );
        (p["status"]["phase"] == "Running").then_some(p)
    });
    assert!(sim_pod["status"]["podIP"]
        .as_str()
        .unwrap()
        .starts_with("10."));
    assert!(target
        .sim()
        .unwrap()
        .runner()
        .unwrap()
        .pids(ns, "simulated")
        .is_empty());

    // Bad requests get the API server's answers.
    let out = kubectl(&target, &["logs", "ok", "-c", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("container nope is not valid for pod ok"));
    let out = kubectl(&target, &["logs", "nothere"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

#[test]
fn a_process_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let target = start();
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stubborn", "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 1,
              "containers": [{"name": "c", "image": "example.com/sim-pod", "args": ["serve", "--ignore-sigterm"],
                "env": [{"name": "SIM_POD_PORT", "value": "0"}]}]}}),
    );
    let runner = target.sim().unwrap().runner().unwrap().clone();
    let pid = wait_for("stubborn started", Duration::from_secs(30), || {
        runner.pids("default", "stubborn").get("c").copied()
    });
    wait_for("stubborn serving", Duration::from_secs(10), || {
        kubectl_ok(&target, &["logs", "stubborn"])
            .contains("serving on")
            .then_some(())
    });
    let started = std::time::Instant::now();
    kubectl_ok(&target, &["delete", "pod", "stubborn", "--wait=false"]);
    wait_for("stubborn killed", Duration::from_secs(15), || {
        (!pod_alive(pid)).then_some(())
    });
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "SIGKILL only after the 1 s grace period"
    );
}
