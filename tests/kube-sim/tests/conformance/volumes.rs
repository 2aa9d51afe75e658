//! Persistent volumes in kube-sim: the StatefulSet controller's claims, the PV controller
//! and provisioner, and kube-scheduler's VolumeBinding and VolumeZone filters with their
//! messages. Sim only: the real control plane has no EBS provisioner (fake nodes).

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use kube_sim::{Options, TargetCluster};
use serde_json::{json, Value};

use crate::common::{self, wait_for_async};

const ZONE: &str = "topology.kubernetes.io/zone";

async fn create(
    client: &Client,
    group: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
    body: Value,
) {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(body).unwrap();
    api.create(&PostParams::default(), &obj).await.expect(kind);
}

fn class(name: &str, mode: &str, provisioner: &str, zones: Option<&[&str]>) -> Value {
    let mut sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode});
    if let Some(z) = zones {
        sc["allowedTopologies"] = json!([{"matchLabelExpressions": [{"key": ZONE, "values": z}]}]);
    }
    sc
}

fn pod_with_claim(name: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}})
}

fn claim(name: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Gi"}}}})
}

fn pv_zones(pv: &PersistentVolume) -> Vec<String> {
    let v = serde_json::to_value(pv).unwrap();
    v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|z| z.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The Unschedulable message of a pod, once it has one.
async fn verdict(pods: &Api<Pod>, name: &str, expect: &str) -> String {
    // The scheduler rewrites its verdict on every attempt, and an earlier one may be true of
    // an earlier state (a pre-bound claim not bound yet reads as an unbound Immediate
    // claim, as it would to kube-scheduler): wait for the verdict the test is about.
    wait_for_async(
        &format!("a verdict on {name} saying {expect:?}"),
        Duration::from_secs(30),
        || async {
            let p = pods.get(name).await.ok()?;
            let c = p
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")?;
            let msg = c.message?;
            (c.status == "False" && msg.contains(expect)).then_some(msg)
        },
    )
    .await
}

/// A kube-sim with one node in zone `a` and one in zone `b`.
fn two_zones() -> TargetCluster {
    let t = TargetCluster::sim_with(Options::default()).unwrap();
    for (name, zone) in [("in-a", "a"), ("in-b", "b")] {
        common::add_fake_node(
            &t,
            name,
            "4",
            "8Gi",
            &[(ZONE, zone), ("kubernetes.io/hostname", name)],
        );
    }
    t
}

/// A StatefulSet whose class waits for the first consumer and allows one zone: its pods
/// land in that zone, one claim per pod is provisioned there (named
/// `<template>-<set>-<ordinal>`) and bound, with the node the scheduler chose on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_gets_claims_provisioned_in_the_zone_its_class_allows() {
    let t = two_zones();
    let client = t.client().await.unwrap();
    create(
        &client,
        "storage.k8s.io",
        "StorageClass",
        "storageclasses",
        None,
        class(
            "only-b",
            "WaitForFirstConsumer",
            "ebs.csi.aws.com",
            Some(&["b"]),
        ),
    )
    .await;
    create(&client, "apps", "StatefulSet", "statefulsets", Some("default"), json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": "only-b", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "4Gi"}}}}]}})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for i in 0..2 {
        let name = format!("db-{i}");
        let pod = wait_for_async(
            &format!("{name} Running"),
            Duration::from_secs(20),
            || async {
                let p = pods.get(&name).await.ok()?;
                (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
            },
        )
        .await;
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("in-b")
        );
        let claim_name = format!("data-db-{i}");
        let c = wait_for_async(
            &format!("{claim_name} Bound"),
            Duration::from_secs(20),
            || async {
                let c = claims.get(&claim_name).await.ok()?;
                (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
            },
        )
        .await;
        assert_eq!(c.labels().get("app").map(String::as_str), Some("db"));
        let ann = c.annotations();
        assert_eq!(
            ann.get("volume.kubernetes.io/selected-node")
                .map(String::as_str),
            Some("in-b")
        );
        assert_eq!(
            ann.get("pv.kubernetes.io/bind-completed")
                .map(String::as_str),
            Some("yes")
        );
        let pv = volumes
            .get(c.spec.as_ref().unwrap().volume_name.as_deref().unwrap())
            .await
            .unwrap();
        assert_eq!(pv_zones(&pv), ["b"]);
        assert_eq!(pv.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
    }
}

/// kube-scheduler's VolumeBinding refusals, each with its message: a bound volume in a zone
/// no node is in; a claim whose class allows no zone of a node; an Immediate claim nothing
/// provisions. An Immediate claim with a provisioner is bound before any pod uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_binding_refuses_what_kube_scheduler_refuses() {
    let t = two_zones();
    let client = t.client().await.unwrap();
    let ns = Some("default");
    for sc in [
        class(
            "only-c",
            "WaitForFirstConsumer",
            "ebs.csi.aws.com",
            Some(&["c"]),
        ),
        class("manual", "Immediate", "kubernetes.io/no-provisioner", None),
        class("eager", "Immediate", "ebs.csi.aws.com", Some(&["b"])),
    ] {
        create(
            &client,
            "storage.k8s.io",
            "StorageClass",
            "storageclasses",
            None,
            sc,
        )
        .await;
    }
    // A volume in zone c, pre-bound to its claim by name.
    create(
        &client,
        "",
        "PersistentVolume",
        "persistentvolumes",
        None,
        json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "in-c"},
        "spec": {"capacity": {"storage": "4Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-c"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE, "operator": "In", "values": ["c"]}]}]}}}}),
    )
    .await;
    let mut static_claim = claim("static", "");
    static_claim["spec"]["volumeName"] = json!("in-c");
    for c in [
        static_claim,
        claim("later", "only-c"),
        claim("manual", "manual"),
        claim("eager", "eager"),
    ] {
        create(
            &client,
            "",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            ns,
            c,
        )
        .await;
    }
    for (pod, c) in [
        ("uses-c", "static"),
        ("wants-c", "later"),
        ("waits", "manual"),
        ("ready", "eager"),
    ] {
        create(&client, "", "Pod", "pods", ns, pod_with_claim(pod, c)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    verdict(
        &pods,
        "uses-c",
        "2 node(s) didn't match PersistentVolume's node affinity",
    )
    .await;
    verdict(
        &pods,
        "wants-c",
        "2 node(s) didn't find available persistent volumes to bind",
    )
    .await;
    let msg = verdict(&pods, "waits", "unbound immediate").await;
    assert_eq!(
        msg,
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
    );
    let placed = wait_for_async(
        "the eager claim's pod bound",
        Duration::from_secs(20),
        || async { pods.get("ready").await.ok()?.spec?.node_name },
    )
    .await;
    assert_eq!(
        placed, "in-b",
        "provisioned in the class's zone, the pod follows it"
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let bound = claims.get("static").await.unwrap();
    assert_eq!(
        bound.status.unwrap().phase.as_deref(),
        Some("Bound"),
        "a claim naming its volume is bound to it"
    );
    let manual = claims.get("manual").await.unwrap();
    assert_eq!(manual.status.unwrap().phase.as_deref(), Some("Pending"));
}
