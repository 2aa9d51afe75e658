//! kubectl v1.32 against kube-sim (and a real cluster when asked, see `TargetCluster::all`): the
//! commands the project's users and scripts run, with kubectl's own client-side logic
//! (apply's patch computation, drain's eviction retries, watch decoding) in the loop.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use kube_sim::{Options, TargetCluster};
use serde_json::{json, Value};

fn targets() -> Vec<TargetCluster> {
    TargetCluster::all(Options::default()).expect("start kube-sim")
}

const CRD_AND_OBJECTS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.kubesim.joiner.dev
spec:
  group: kubesim.joiner.dev
  names: {kind: Gadget, plural: gadgets, singular: gadget, shortNames: [gdg]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    subresources: {status: {}}
---
apiVersion: kubesim.joiner.dev/v1
kind: Gadget
metadata: {name: g1, namespace: NS}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: NS}
data: {mode: fast}
"#;

#[test]
fn apply_multi_document_with_crd_then_get_json() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-apply");
        let manifest = CRD_AND_OBJECTS.replace("NS", &ns.name);
        // As against a real server, the custom object cannot be mapped until its CRD is
        // established, so the first apply may report "ensure CRDs are installed first"
        // for it while creating everything else; the second apply completes.
        let first = kubectl_stdin(&t, &["apply", "-f", "-"], Some(&manifest));
        if !first.status.success() {
            let err = String::from_utf8_lossy(&first.stderr);
            assert!(
                err.contains("ensure CRDs are installed first"),
                "[{}] unexpected apply failure: {err}",
                t.name()
            );
        }
        let out = kubectl_stdin(&t, &["apply", "-f", "-"], Some(&manifest));
        assert!(
            out.status.success(),
            "[{}] second apply: {}",
            t.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        let g = kubectl_json(&t, &["get", "gdg", "g1", "-n", &ns.name, "-o", "json"]);
        assert_eq!(g["spec"]["size"], 3);
        assert_eq!(g["kind"], "Gadget");
        assert!(g["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
        let list = kubectl_json(&t, &["get", "configmaps", "-n", &ns.name, "-o", "json"]);
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert!(
            names.contains(&"settings"),
            "[{}] configmaps: {names:?}",
            t.name()
        );
        // Re-applying an unchanged manifest changes nothing.
        let rv = g["metadata"]["resourceVersion"].clone();
        kubectl_stdin(&t, &["apply", "-f", "-"], Some(&manifest));
        let again = kubectl_json(&t, &["get", "gadget", "g1", "-n", &ns.name, "-o", "json"]);
        assert_eq!(
            again["metadata"]["resourceVersion"],
            rv,
            "[{}] no-op apply bumped resourceVersion",
            t.name()
        );
        // The default table output works too.
        let table = kubectl_ok(&t, &["get", "gadgets", "-n", &ns.name]);
        assert!(table.contains("g1"), "{table}");
        drop(ns);
        kubectl(
            &t,
            &[
                "delete",
                "crd",
                "gadgets.kubesim.joiner.dev",
                "--wait=false",
            ],
        );
    }
}

#[test]
fn get_watch_streams_changes() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-watch");
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", t.kubeconfig_path())
            .args([
                "get",
                "configmaps",
                "-n",
                &ns.name,
                "-w",
                "--output-watch-events",
                "-o",
                "json",
                "--request-timeout=30s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            let reader = std::io::BufReader::new(stdout);
            for v in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
                match v {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        std::thread::sleep(Duration::from_millis(700));
        kubectl_ok(
            &t,
            &[
                "create",
                "configmap",
                "w1",
                "-n",
                &ns.name,
                "--from-literal=a=1",
            ],
        );
        kubectl_ok(
            &t,
            &[
                "patch",
                "configmap",
                "w1",
                "-n",
                &ns.name,
                "--type=merge",
                "-p",
                r#"{"data":{"a":"2"}}"#,
            ],
        );
        kubectl_ok(&t, &["delete", "configmap", "w1", "-n", &ns.name]);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let ev = rx
                .recv_timeout(Duration::from_secs(15))
                .unwrap_or_else(|_| panic!("[{}] watch events so far: {seen:?}", t.name()));
            if ev["object"]["metadata"]["name"] == "w1" {
                seen.push((
                    ev["type"].as_str().unwrap_or("").to_string(),
                    ev["object"]["data"]["a"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            seen,
            vec![
                ("ADDED".into(), "1".into()),
                ("MODIFIED".into(), "2".into()),
                ("DELETED".into(), "2".into())
            ],
            "[{}]",
            t.name()
        );
    }
}

fn deployment(ns: &str, name: &str, replicas: i64) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}},
                {"name": "side", "image": "registry.k8s.io/pause:3.9"}
            ]}},
        },
    })
    .to_string()
}

fn pod_names(t: &TargetCluster, ns: &str, selector: &str) -> Vec<(String, String)> {
    let list = kubectl_json(t, &["get", "pods", "-n", ns, "-l", selector, "-o", "json"]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn scale_deployment_up_and_down() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-scale");
        kubectl_stdin(
            &t,
            &["apply", "-f", "-"],
            Some(&deployment(&ns.name, "web", 1)),
        );
        let first = wait_for("one pod", Duration::from_secs(30), || {
            let p = pod_names(&t, &ns.name, "app=web");
            (p.len() == 1).then(|| p[0].0.clone())
        });
        std::thread::sleep(Duration::from_millis(1100));
        kubectl_ok(
            &t,
            &["scale", "deployment", "web", "-n", &ns.name, "--replicas=3"],
        );
        wait_for(
            "three pods and status.replicas=3",
            Duration::from_secs(30),
            || {
                let d = kubectl_json(
                    &t,
                    &["get", "deployment", "web", "-n", &ns.name, "-o", "json"],
                );
                (pod_names(&t, &ns.name, "app=web").len() == 3 && d["status"]["replicas"] == 3)
                    .then_some(())
            },
        );
        let owner = kubectl_json(&t, &["get", "pod", &first, "-n", &ns.name, "-o", "json"]);
        assert_eq!(owner["metadata"]["ownerReferences"][0]["controller"], true);
        kubectl_ok(
            &t,
            &["scale", "deployment", "web", "-n", &ns.name, "--replicas=1"],
        );
        let left = wait_for("one pod left", Duration::from_secs(60), || {
            let p = pod_names(&t, &ns.name, "app=web");
            (p.len() == 1).then_some(p)
        });
        if t.sim().is_some() {
            // All three pods are in the same state (no nodes), so the newest go first.
            assert_eq!(left[0].0, first, "scale-down kept the oldest pod");
        }
    }
}

#[test]
fn patch_with_merge_json_and_strategic() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-patch");
        let n = ns.name.as_str();
        kubectl_ok(
            &t,
            &[
                "create",
                "configmap",
                "c",
                "-n",
                n,
                "--from-literal=a=1",
                "--from-literal=b=2",
            ],
        );
        kubectl_ok(
            &t,
            &[
                "patch",
                "configmap",
                "c",
                "-n",
                n,
                "--type=merge",
                "-p",
                r#"{"data":{"a":"10","b":null,"c":"3"}}"#,
            ],
        );
        let c = kubectl_json(&t, &["get", "configmap", "c", "-n", n, "-o", "json"]);
        assert_eq!(
            c["data"],
            json!({"a": "10", "c": "3"}),
            "[{}] merge patch",
            t.name()
        );
        kubectl_ok(
            &t,
            &[
                "patch",
                "configmap",
                "c",
                "-n",
                n,
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/data/c"},{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]"#,
            ],
        );
        let c = kubectl_json(&t, &["get", "configmap", "c", "-n", n, "-o", "json"]);
        assert_eq!(c["data"], json!({"a": "10"}), "[{}] json patch", t.name());
        assert_eq!(c["metadata"]["labels"]["x"], "y");
        // A failing JSON patch test op is rejected and changes nothing.
        let bad = kubectl(
            &t,
            &[
                "patch",
                "configmap",
                "c",
                "-n",
                n,
                "--type=json",
                "-p",
                r#"[{"op":"test","path":"/data/a","value":"nope"}]"#,
            ],
        );
        assert!(!bad.status.success());

        kubectl_stdin(&t, &["apply", "-f", "-"], Some(&deployment(n, "web", 0)));
        let gen0 = kubectl_json(&t, &["get", "deployment", "web", "-n", n, "-o", "json"])
            ["metadata"]["generation"]
            .as_i64()
            .unwrap();
        // Strategic merge: containers merge by name; the other container is untouched.
        kubectl_ok(
            &t,
            &[
                "patch",
                "deployment",
                "web",
                "-n",
                n,
                "--type=strategic",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"registry.k8s.io/pause:3.10"}],"tolerations":[{"key":"k","operator":"Exists"}]}}}}"#,
            ],
        );
        let d = kubectl_json(&t, &["get", "deployment", "web", "-n", n, "-o", "json"]);
        let cs = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(
            cs.len(),
            2,
            "[{}] containers merged by name: {cs:?}",
            t.name()
        );
        assert_eq!(cs[0]["name"], "main");
        assert_eq!(cs[1]["image"], "registry.k8s.io/pause:3.10");
        assert_eq!(d["spec"]["template"]["spec"]["tolerations"][0]["key"], "k");
        assert_eq!(
            d["metadata"]["generation"].as_i64().unwrap(),
            gen0 + 1,
            "spec change bumps generation"
        );
        // Delete one container with the $patch directive.
        kubectl_ok(
            &t,
            &[
                "patch",
                "deployment",
                "web",
                "-n",
                n,
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","$patch":"delete"}]}}}}"#,
            ],
        );
        let d = kubectl_json(&t, &["get", "deployment", "web", "-n", n, "-o", "json"]);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // Labels-only change leaves generation alone.
        let gen1 = d["metadata"]["generation"].clone();
        kubectl_ok(&t, &["label", "deployment", "web", "-n", n, "tier=front"]);
        let d = kubectl_json(&t, &["get", "deployment", "web", "-n", n, "-o", "json"]);
        assert_eq!(d["metadata"]["generation"], gen1);
    }
}

#[test]
fn apply_server_side_owns_and_prunes_fields() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-ssa");
        let cm = |data: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "namespace": ns.name}, "data": data}).to_string()
        };
        let out = kubectl_stdin(
            &t,
            &["apply", "--server-side", "-f", "-"],
            Some(&cm(json!({"a": "1", "b": "2"}))),
        );
        assert!(
            out.status.success(),
            "[{}] {}",
            t.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("serverside-applied"));
        let out = kubectl_stdin(
            &t,
            &["apply", "--server-side", "-f", "-"],
            Some(&cm(json!({"a": "1"}))),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = kubectl_json(
            &t,
            &[
                "get",
                "configmap",
                "ssa",
                "-n",
                &ns.name,
                "-o",
                "json",
                "--show-managed-fields",
            ],
        );
        assert_eq!(
            got["data"],
            json!({"a": "1"}),
            "[{}] a field no longer applied is removed",
            t.name()
        );
        let managers: Vec<&str> = got["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert!(
            managers.contains(&"kubectl"),
            "[{}] managers: {managers:?}",
            t.name()
        );
        // Another manager's change, then a forced re-apply.
        kubectl_ok(
            &t,
            &[
                "patch",
                "configmap",
                "ssa",
                "-n",
                &ns.name,
                "--type=merge",
                "-p",
                r#"{"data":{"other":"x"}}"#,
            ],
        );
        let out = kubectl_stdin(
            &t,
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&cm(json!({"a": "2"}))),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = kubectl_json(
            &t,
            &["get", "configmap", "ssa", "-n", &ns.name, "-o", "json"],
        );
        assert_eq!(
            got["data"],
            json!({"a": "2", "other": "x"}),
            "[{}] fields of other managers stay",
            t.name()
        );
    }
}

#[test]
fn delete_waits_for_finalizers() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-fin");
        let n = ns.name.as_str();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "namespace": n, "finalizers": ["kubesim.joiner.dev/hold"]}}).to_string();
        kubectl_stdin(&t, &["create", "-f", "-"], Some(&cm));
        kubectl_ok(
            &t,
            &["delete", "configmap", "held", "-n", n, "--wait=false"],
        );
        let got = kubectl_json(&t, &["get", "configmap", "held", "-n", n, "-o", "json"]);
        assert!(
            got["metadata"]["deletionTimestamp"].is_string(),
            "[{}] deletionTimestamp set",
            t.name()
        );
        // Updates other than removing the finalizer are still allowed while terminating.
        kubectl_ok(
            &t,
            &[
                "patch",
                "configmap",
                "held",
                "-n",
                n,
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
        );
        wait_for("configmap gone", Duration::from_secs(20), || {
            let out = kubectl(&t, &["get", "configmap", "held", "-n", n, "-o", "json"]);
            (!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"))
                .then_some(())
        });
    }
}

/// Cordon and drain need nodes with pods on them, so this runs on kube-sim only: draining
/// a node of a real cluster from a test would disrupt it.
#[test]
fn cordon_and_drain_respect_a_pod_disruption_budget() {
    let t = TargetCluster::sim_with(Options::default()).unwrap();
    add_fake_node(
        &t,
        "node-a",
        "4",
        "8Gi",
        &[("kubernetes.io/hostname", "node-a")],
    );
    let ns = TestNamespace::create(&t, "ks-drain");
    let n = ns.name.as_str();
    kubectl_stdin(&t, &["apply", "-f", "-"], Some(&deployment(n, "web", 2)));
    let extra = format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web, namespace: {n}}}\nspec:\n  minAvailable: 2\n  selector: {{matchLabels: {{app: web}}}}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent, namespace: {n}}}\nspec:\n  selector: {{matchLabels: {{app: agent}}}}\n  template:\n    metadata: {{labels: {{app: agent}}}}\n    spec:\n      containers: [{{name: a, image: 'registry.k8s.io/pause:3.10'}}]\n"
    );
    let out = kubectl_stdin(&t, &["apply", "-f", "-"], Some(&extra));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(
        "web and agent pods running on node-a",
        Duration::from_secs(20),
        || {
            let pods = kubectl_json(
                &t,
                &[
                    "get",
                    "pods",
                    "-n",
                    n,
                    "--field-selector=spec.nodeName=node-a,status.phase=Running",
                    "-o",
                    "json",
                ],
            );
            (pods["items"].as_array().unwrap().len() == 3).then_some(())
        },
    );
    kubectl_ok(&t, &["cordon", "node-a"]);
    let node = kubectl_json(&t, &["get", "node", "node-a", "-o", "json"]);
    assert_eq!(node["spec"]["unschedulable"], true);

    let drain = Command::new("kubectl")
        .env("KUBECONFIG", t.kubeconfig_path())
        .args(["drain", "node-a", "--ignore-daemonsets", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // kubectl reports each 429 and retries every 5 s.
    std::thread::sleep(Duration::from_secs(3));
    let running = kubectl_json(
        &t,
        &[
            "get",
            "pods",
            "-n",
            n,
            "-l",
            "app=web",
            "--field-selector=spec.nodeName=node-a",
            "-o",
            "json",
        ],
    );
    assert_eq!(
        running["items"].as_array().unwrap().len(),
        2,
        "the PDB keeps both pods"
    );
    kubectl_ok(
        &t,
        &[
            "patch",
            "pdb",
            "web",
            "-n",
            n,
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    let out = drain.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "drain failed: {stderr}\n{stdout}");
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "drain saw the 429: {stderr}"
    );
    assert!(
        stderr.contains("ignoring DaemonSet-managed Pods"),
        "{stderr}"
    );
    assert!(stdout.contains("node/node-a drained"), "{stdout}");
    let left = kubectl_json(
        &t,
        &[
            "get",
            "pods",
            "-n",
            n,
            "--field-selector=spec.nodeName=node-a",
            "-o",
            "json",
        ],
    );
    let names: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("agent-")),
        "only the DaemonSet pod stays: {names:?}"
    );
    // The evicted pods were replaced, and cannot schedule on the cordoned node.
    let pending = kubectl_json(&t, &["get", "pods", "-n", n, "-l", "app=web", "-o", "json"]);
    for p in pending["items"].as_array().unwrap() {
        assert!(
            p["spec"]["nodeName"].is_null(),
            "replacement bound to a cordoned node: {p}"
        );
    }
    kubectl_ok(&t, &["uncordon", "node-a"]);
    wait_for(
        "replacements running after uncordon",
        Duration::from_secs(20),
        || {
            let pods = kubectl_json(
                &t,
                &[
                    "get",
                    "pods",
                    "-n",
                    n,
                    "-l",
                    "app=web",
                    "--field-selector=status.phase=Running",
                    "-o",
                    "json",
                ],
            );
            (pods["items"].as_array().unwrap().len() == 2).then_some(())
        },
    );
}

#[test]
fn anonymous_and_wrong_token_get_401() {
    let t = TargetCluster::sim_with(Options::default()).unwrap();
    let out = kubectl(&t, &["get", "pods", "--token=wrong"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Unauthorized") || err.contains("provide credentials"),
        "{err}"
    );
    let out = kubectl(
        &t,
        &["--context=kube-sim-viewer", "create", "configmap", "x"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
    kubectl_ok(&t, &["--context=kube-sim-viewer", "get", "configmaps"]);
}

/// kubectl's typed clients send protobuf bodies; kube-sim decodes the kinds scripts create
/// imperatively.
#[test]
fn imperative_create_commands_work() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-create");
        let n = ns.name.as_str();
        kubectl_ok(
            &t,
            &[
                "create",
                "deployment",
                "api",
                "-n",
                n,
                "--image=registry.k8s.io/pause:3.10",
                "--replicas=2",
                "--port=8080",
            ],
        );
        let d = kubectl_json(&t, &["get", "deployment", "api", "-n", n, "-o", "json"]);
        assert_eq!(d["spec"]["replicas"], 2, "[{}]", t.name());
        assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "api");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.k8s.io/pause:3.10");
        assert_eq!(c["ports"][0]["containerPort"], 8080);
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        kubectl_ok(
            &t,
            &[
                "create",
                "secret",
                "generic",
                "s",
                "-n",
                n,
                "--from-literal=k=v",
            ],
        );
        let s = kubectl_json(&t, &["get", "secret", "s", "-n", n, "-o", "json"]);
        assert_eq!(s["data"]["k"], "dg==", "[{}] base64 of v", t.name());
        assert_eq!(s["type"], "Opaque");
        kubectl_ok(
            &t,
            &["create", "configmap", "c", "-n", n, "--from-literal=a=1"],
        );
        kubectl_ok(&t, &["create", "serviceaccount", "bot", "-n", n]);
        wait_for("two pods", Duration::from_secs(30), || {
            (pod_names(&t, n, "app=api").len() == 2).then_some(())
        });
    }
}

/// kube-controller-manager's daemon controller (`NodeShouldRunDaemonPod`) keeps a
/// DaemonSet's pod on a node that a NoSchedule taint it does not tolerate now marks (it only
/// places no new one there), and takes it off for such a NoExecute taint. A drain relies on
/// the first: the pod stays until it is evicted, and is not put back.
#[test]
fn a_daemonset_pod_stays_for_a_no_schedule_taint_and_goes_for_a_no_execute_one() {
    for t in targets() {
        let ns = TestNamespace::create(&t, "ks-ds-taint");
        let n = ns.name.as_str();
        let node = format!("{n}-node");
        add_fake_node(&t, &node, "2", "4Gi", &[("kubernetes.io/hostname", &node)]);
        let ds = format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent, namespace: {n}}}\nspec:\n  selector: {{matchLabels: {{app: agent}}}}\n  template:\n    metadata: {{labels: {{app: agent}}}}\n    spec:\n      nodeSelector: {{kubernetes.io/hostname: {node}}}\n      containers: [{{name: a, image: 'registry.k8s.io/pause:3.10'}}]\n"
        );
        kubectl_stdin(&t, &["apply", "-f", "-"], Some(&ds));
        let pod_on_node = || {
            let pods = kubectl_json(
                &t,
                &["get", "pods", "-n", n, "-l", "app=agent", "-o", "json"],
            );
            pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["spec"]["nodeName"] == node.as_str())
                .cloned()
        };
        let first = wait_for(
            "the DaemonSet's pod on the node",
            Duration::from_secs(60),
            || pod_on_node().filter(|p| p["metadata"]["deletionTimestamp"].is_null()),
        );
        kubectl_ok(
            &t,
            &["taint", "node", &node, "example.com/leaving=yes:NoSchedule"],
        );
        // A deleted pod never comes back with its UID: the same UID, not deleting, after the
        // controller has had time to act, is a pod that was never taken off.
        std::thread::sleep(Duration::from_secs(5));
        let still = pod_on_node().expect("the pod is still there");
        assert_eq!(
            (
                &still["metadata"]["uid"],
                &still["metadata"]["deletionTimestamp"]
            ),
            (&first["metadata"]["uid"], &Value::Null),
            "[{}] the NoSchedule taint took the DaemonSet's pod off",
            t.name()
        );
        kubectl_ok(
            &t,
            &["taint", "node", &node, "example.com/gone=yes:NoExecute"],
        );
        wait_for(
            "the pod taken off for NoExecute",
            Duration::from_secs(60),
            || {
                pod_on_node()
                    .is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null())
                    .then_some(())
            },
        );
        kubectl_ok(&t, &["delete", "node", &node, "--wait=false"]);
    }
}
