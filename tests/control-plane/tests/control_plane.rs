//! The control plane itself: it starts, serves kubectl with the admin token, the scheduler
//! binds a pod to a KWOK-managed Node, KWOK runs it, and everything stops on drop.

use std::time::{Duration, Instant};

use joiner_control_plane::{ControlPlane, Options};

fn wait(what: &str, limit: Duration, mut f: impl FnMut() -> Option<String>) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    fn scheduler_binds_a_pod_to_a_kwok_node_and_kwok_runs_it() {
        let cp = ControlPlane::start(Options::default()).expect("start the control plane");
        let version = cp.kubectl(&["version", "-o", "json"]).unwrap();
        assert!(version.contains("\"gitVersion\": \"v1.37"), "{version}");

        let node = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"kwok-node-1",
            "annotations":{"kwok.x-k8s.io/node":"fake"},"labels":{"kubernetes.io/hostname":"kwok-node-1"}},
            "status":{"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"},
                      "capacity":{"cpu":"4","memory":"8Gi","pods":"110"}}}"#;
        let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},
            "spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.10",
            "resources":{"requests":{"cpu":"1"}}}]}}"#;
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in [("node.json", node), ("pod.json", pod)] {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            cp.kubectl(&["create", "-f", p.to_str().unwrap()]).unwrap();
        }
        let ready = wait(
            "KWOK to mark the node Ready",
            Duration::from_secs(60),
            || {
                let s = cp
                    .kubectl(&[
                        "get",
                        "node",
                        "kwok-node-1",
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                    ])
                    .ok()?;
                (s == "True").then_some(s)
            },
        );
        assert_eq!(ready, "True");
        let bound = wait(
            "kube-scheduler to bind the pod and KWOK to run it",
            Duration::from_secs(90),
            || {
                let s = cp
                    .kubectl(&[
                        "get",
                        "pod",
                        "p",
                        "-o",
                        "jsonpath={.spec.nodeName}/{.status.phase}",
                    ])
                    .ok()?;
                (s == "kwok-node-1/Running").then_some(s)
            },
        );
        assert_eq!(
            bound,
            "kwok-node-1/Running",
            "scheduler log:\n{}",
            cp.log("kube-scheduler")
        );

        let kubeconfig = cp.kubeconfig_path().to_path_buf();
        drop(cp);
        // Stopped: the API server no longer answers, and its directory is gone.
        assert!(!kubeconfig.exists(), "temporary directory removed on drop");
    }
}
