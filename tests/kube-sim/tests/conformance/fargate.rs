//! Fargate simulation against the AWS emulator: kube-sim reads the cluster's Fargate
//! profiles from moto's EKS API; a pod created in a profile's namespace is given
//! `fargate-scheduler` at admission and a Fargate node of its own (removed with the pod),
//! while other pods stay with the default scheduler. The Fargate pod here runs as a process
//! with IRSA, so it also sees the emulator endpoint. It runs on kube-sim only (Fargate is
//! simulated there), whatever cluster is configured.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_eks::types::{FargateProfileSelector, VpcConfigRequest};
use common::{kubectl_json, kubectl_ok, kubectl_stdin, wait_for};
use kube_sim::{ImageSource, Options, TargetCluster};
use serde_json::{json, Value};

const CLUSTER: &str = "fargate-sim";

fn apply(target: &TargetCluster, obj: &Value) {
    let out = kubectl_stdin(target, &["apply", "-f", "-"], Some(&obj.to_string()));
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pod_in(target: &TargetCluster, ns: &str, selector: &str) -> Option<Value> {
    kubectl_json(
        target,
        &["get", "pods", "-n", ns, "-l", selector, "-o", "json"],
    )["items"]
        .as_array()
        .and_then(|a| a.first().cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_matching_a_fargate_profile_get_a_fargate_node_of_their_own() {
    let moto = joiner_test_support::MotoServer::start();
    let eks = kube_sim::fargate::eks_client(&moto.endpoint(), "us-east-1").await;
    eks.create_cluster()
        .name(CLUSTER)
        .role_arn("arn:aws:iam::123456789012:role/cluster")
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .subnet_ids("subnet-12345678")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateCluster");
    eks.create_fargate_profile()
        .cluster_name(CLUSTER)
        .fargate_profile_name("agent")
        .pod_execution_role_arn("arn:aws:iam::123456789012:role/fargate")
        .subnets("subnet-12345678")
        .selectors(
            FargateProfileSelector::builder()
                .namespace("joiner")
                .build(),
        )
        .selectors(
            FargateProfileSelector::builder()
                .namespace("kube-system")
                .labels("k8s-app", "kube-dns")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateFargateProfile");

    let target = TargetCluster::sim_with(Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        fargate_poll: Duration::from_millis(300),
        images: vec![(
            "example.com/sim-pod".into(),
            ImageSource::Binary(PathBuf::from(env!("CARGO_BIN_EXE_sim-pod"))),
        )],
        ..Default::default()
    })
    .unwrap();
    let sim = target.sim().unwrap();
    let profiles = sim
        .fargate_profiles()
        .expect("fargate simulation on")
        .clone();
    wait_for(
        "profiles read from the emulator",
        Duration::from_secs(20),
        || (profiles.names() == vec!["agent".to_string()]).then_some(()),
    );

    kubectl_ok(&target, &["create", "namespace", "joiner"]);
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "joiner-agent", "namespace": "joiner",
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/agent"}}}),
    );
    apply(
        &target,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "agent", "namespace": "joiner"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "agent"}},
              "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"serviceAccountName": "joiner-agent",
                "containers": [{"name": "agent", "image": "example.com/sim-pod:0.1.0",
                  "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                  "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}}}),
    );
    // Not matched: kube-system without the label, and the default namespace.
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "kube-system", "labels": {"k8s-app": "metrics"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}),
    );
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
            "spec": {"containers": [{"name": "c", "image": "coredns:1.11"}]}}),
    );

    let agent = wait_for(
        "agent pod running on Fargate",
        Duration::from_secs(60),
        || {
            pod_in(&target, "joiner", "app=agent").filter(|p| {
                p["status"]["phase"] == "Running"
                    && p["status"]["containerStatuses"][0]["ready"] == true
            })
        },
    );
    assert_eq!(agent["spec"]["schedulerName"], "fargate-scheduler");
    assert_eq!(
        agent["metadata"]["annotations"]["eks.amazonaws.com/fargate-profile"],
        "agent"
    );
    let node_name = agent["spec"]["nodeName"].as_str().unwrap().to_string();
    assert!(node_name.starts_with("fargate-ip-"), "{node_name}");
    let node = kubectl_json(&target, &["get", "node", &node_name, "-o", "json"]);
    assert_eq!(
        node["metadata"]["labels"]["eks.amazonaws.com/compute-type"],
        "fargate"
    );
    assert_eq!(
        node["spec"]["taints"],
        json!([{"key": "eks.amazonaws.com/compute-type", "value": "fargate", "effect": "NoSchedule"}])
    );

    // IRSA with the emulator: the process sees the role, a token file, region and endpoint.
    let log = kubectl_ok(
        &target,
        &[
            "logs",
            "-n",
            "joiner",
            agent["metadata"]["name"].as_str().unwrap(),
        ],
    );
    assert!(
        log.contains(&format!("env AWS_ENDPOINT_URL={}\n", moto.endpoint())),
        "{log}"
    );
    assert!(log.contains("env AWS_REGION=us-east-1\n"), "{log}");
    assert!(log.contains("env AWS_ROLE_ARN=arn:aws:iam::123456789012:role/agent\n"));
    assert!(log.contains("env AWS_WEB_IDENTITY_TOKEN_FILE="));

    // CoreDNS (label match) lands on Fargate too, on a node of its own.
    let dns = wait_for("dns bound", Duration::from_secs(30), || {
        let p = kubectl_json(
            &target,
            &["get", "pod", "dns", "-n", "kube-system", "-o", "json"],
        );
        p["spec"]["nodeName"].as_str().map(|_| p.clone())
    });
    assert_eq!(dns["spec"]["schedulerName"], "fargate-scheduler");
    assert_ne!(dns["spec"]["nodeName"], node_name.as_str());

    // The unmatched pod keeps the default scheduler; with no EC2 node it stays pending.
    let other = kubectl_json(
        &target,
        &["get", "pod", "other", "-n", "kube-system", "-o", "json"],
    );
    assert_eq!(other["spec"]["schedulerName"], "default-scheduler");
    assert!(other["spec"]["nodeName"].is_null());
    let nodes = kubectl_json(&target, &["get", "nodes", "-o", "json"]);
    assert_eq!(
        nodes["items"].as_array().unwrap().len(),
        2,
        "one node per Fargate pod"
    );

    // The node goes with its pod; the Deployment's replacement gets a new one.
    let first = agent["metadata"]["name"].as_str().unwrap().to_string();
    kubectl_ok(&target, &["delete", "pod", "-n", "joiner", &first]);
    wait_for("old Fargate node removed", Duration::from_secs(30), || {
        let out = common::kubectl(&target, &["get", "node", &node_name]);
        (!out.status.success()).then_some(())
    });
    let replacement = wait_for(
        "replacement on a new Fargate node",
        Duration::from_secs(60),
        || {
            pod_in(&target, "joiner", "app=agent").filter(|p| {
                p["metadata"]["name"] != first.as_str()
                    && p["spec"]["nodeName"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("fargate-ip-") && n != node_name)
            })
        },
    );
    assert_eq!(replacement["spec"]["schedulerName"], "fargate-scheduler");
}

/// The sandbox's order: kube-sim starts before the cluster exists, then Terraform creates
/// the cluster, a Fargate profile and, right after, the Deployment that runs there. A pod
/// created after the profile but before kube-sim's next read of the profiles must still land
/// on Fargate (EKS's webhook would have known the ACTIVE profile); one created before the
/// profile keeps the default scheduler, as on EKS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_between_a_profile_and_kube_sims_next_read_still_lands_on_fargate() {
    let moto = joiner_test_support::MotoServer::start();
    // A poll far longer than the gap between the profile and the pod.
    let target = TargetCluster::sim_with(Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        // Long enough that the steps below (four kubectl runs and two EKS calls, seconds on a
        // loaded 2-core CI machine) surely fall between two reads.
        fargate_poll: Duration::from_secs(15),
        ..Default::default()
    })
    .unwrap();
    let profiles = target.sim().unwrap().fargate_profiles().unwrap().clone();
    // kube-sim has read "no cluster, no profiles" once.
    wait_for("first read", Duration::from_secs(20), || {
        profiles.loaded().then_some(())
    });
    kubectl_ok(&target, &["create", "namespace", "joiner"]);
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "joiner"},
            "spec": {"containers": [{"name": "c", "image": "example.com/agent:1"}]}})
    };
    // No pause before the profile: the pod and the profile usually share a second, and
    // kube-sim must still tell which came first (creation timestamps have whole seconds).
    apply(&target, &pod("before"));

    let eks = kube_sim::fargate::eks_client(&moto.endpoint(), "us-east-1").await;
    eks.create_cluster()
        .name(CLUSTER)
        .role_arn("arn:aws:iam::123456789012:role/cluster")
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .subnet_ids("subnet-12345678")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateCluster");
    eks.create_fargate_profile()
        .cluster_name(CLUSTER)
        .fargate_profile_name("agent")
        .pod_execution_role_arn("arn:aws:iam::123456789012:role/fargate")
        .subnets("subnet-12345678")
        .selectors(
            FargateProfileSelector::builder()
                .namespace("joiner")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateFargateProfile");
    apply(&target, &pod("after"));
    let admitted_now = kubectl_json(
        &target,
        &["get", "pod", "after", "-n", "joiner", "-o", "json"],
    );
    assert!(
        profiles.names().is_empty(),
        "the test needs kube-sim not to have read the profile yet"
    );
    assert_eq!(admitted_now["spec"]["schedulerName"], "default-scheduler");

    let after = wait_for("late pod on Fargate", Duration::from_secs(45), || {
        let p = kubectl_json(
            &target,
            &["get", "pod", "after", "-n", "joiner", "-o", "json"],
        );
        p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.starts_with("fargate-ip-"))
            .then_some(p)
    });
    assert_eq!(after["spec"]["schedulerName"], "fargate-scheduler");
    assert_eq!(
        after["metadata"]["annotations"]["eks.amazonaws.com/fargate-profile"],
        "agent"
    );
    let before = kubectl_json(
        &target,
        &["get", "pod", "before", "-n", "joiner", "-o", "json"],
    );
    assert_eq!(before["spec"]["schedulerName"], "default-scheduler");
    assert!(before["spec"]["nodeName"].is_null(), "{before}");
}
