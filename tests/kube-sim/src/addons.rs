//! EKS's cluster bootstrap and add-on manager, for CoreDNS: what makes "CoreDNS on
//! Fargate" testable.
//!
//! A new EKS cluster runs a self-managed CoreDNS Deployment whose pods carry
//! `eks.amazonaws.com/compute-type: ec2`, an annotation that keeps them off Fargate: on a
//! cluster with no nodes they stay Pending, and a node autoscaler may launch EC2 capacity
//! for them. Managing CoreDNS as an EKS add-on with `{"computeType":"Fargate"}` drops the
//! annotation, which rolls the Deployment; the new pods are admitted to Fargate if a
//! profile selects them when they are created. kube-sim plays both halves: once the
//! emulator knows the cluster it creates the self-managed Deployment, and it keeps the
//! Deployment in line with the `coredns` add-on it reads from the emulator (ListAddons,
//! DescribeAddon). An add-on that disappears leaves the Deployment as it is (what
//! `DeleteAddon` with `preserve` does; kube-sim cannot tell the two deletions apart).
//!
//! On when kube-sim is started with `eks_addons` (`--eks-addons`): tests that do not model
//! a whole EKS cluster keep a kube-system without CoreDNS.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fargate::{cluster_exists, eks_client, COMPUTE_TYPE_LABEL};
use crate::store::{Store, Write};

pub const COREDNS: &str = "coredns";
pub const NAMESPACE: &str = "kube-system";
/// Where the Deployment's current placement came from (kube-sim's bookkeeping).
const APPLIED_ANNOTATION: &str = "kube-sim.joiner.dev/coredns-compute";

/// Where CoreDNS should run, as the add-on's configuration says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// The self-managed default: the `ec2` annotation keeps the pods off Fargate.
    Ec2,
    Fargate,
}

impl Compute {
    fn as_str(self) -> &'static str {
        match self {
            Compute::Ec2 => "ec2",
            Compute::Fargate => "fargate",
        }
    }

    /// From the add-on's configuration values (JSON); anything but Fargate keeps EC2.
    pub fn from_configuration(values: Option<&str>) -> Compute {
        let fargate = values
            .and_then(|v| serde_json::from_str::<Value>(v).ok())
            .is_some_and(|v| v["computeType"] == "Fargate");
        if fargate {
            Compute::Fargate
        } else {
            Compute::Ec2
        }
    }
}

/// The self-managed CoreDNS Deployment EKS creates with a cluster, placed as `compute` says.
pub fn coredns_deployment(compute: Compute) -> Value {
    let mut annotations = json!({});
    if compute == Compute::Ec2 {
        annotations[COMPUTE_TYPE_LABEL] = json!("ec2");
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": COREDNS,
            "namespace": NAMESPACE,
            "labels": {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"},
            "annotations": {APPLIED_ANNOTATION: compute.as_str()},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"}},
            "template": {
                "metadata": {
                    "labels": {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"},
                    "annotations": annotations,
                },
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    "tolerations": [
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                    ],
                    "containers": [{
                        "name": "coredns",
                        "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/coredns:v1.11.4-eksbuild.2",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "70Mi"},
                            "limits": {"memory": "170Mi"},
                        },
                    }],
                },
            },
        },
    })
}

/// Creates the self-managed Deployment unless it exists, then places it as `compute`
/// says: a change rewrites the pod template's annotations, which rolls the pods.
pub fn reconcile(store: &Store, compute: Compute) {
    let Some(deployments) = store.find_type("apps", "v1", "deployments") else {
        return;
    };
    if store.get(&deployments, Some(NAMESPACE), COREDNS).is_err() {
        ensure_namespace(store);
        if let Err(e) = store.create(&deployments, Some(NAMESPACE), coredns_deployment(compute)) {
            if e.code != 409 {
                tracing::warn!("coredns: create Deployment: {}", e.message);
            }
        }
        return;
    }
    let _ = store.modify(
        &deployments,
        Some(NAMESPACE),
        COREDNS,
        Write::Internal,
        |cur| {
            let mut d = cur.clone();
            if cur["metadata"]["annotations"][APPLIED_ANNOTATION] == compute.as_str() {
                return Ok(d);
            }
            d["metadata"]["annotations"][APPLIED_ANNOTATION] = json!(compute.as_str());
            let annotations = &mut d["spec"]["template"]["metadata"]["annotations"];
            if !annotations.is_object() {
                *annotations = json!({});
            }
            match compute {
                Compute::Ec2 => annotations[COMPUTE_TYPE_LABEL] = json!("ec2"),
                Compute::Fargate => {
                    annotations
                        .as_object_mut()
                        .expect("an object")
                        .remove(COMPUTE_TYPE_LABEL);
                }
            }
            let generation = cur["metadata"]["generation"].as_i64().unwrap_or(1);
            d["metadata"]["generation"] = json!(generation + 1);
            tracing::info!(
                compute = compute.as_str(),
                "coredns: the add-on moved CoreDNS"
            );
            Ok(d)
        },
    );
}

fn ensure_namespace(store: &Store) {
    if let Some(ns) = store.find_type("", "v1", "namespaces") {
        let _ = store.create(
            &ns,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        );
    }
}

/// The `coredns` add-on's placement, `None` when the cluster does not exist yet (the
/// sandbox starts kube-sim before Terraform creates it) or the add-on is not installed.
async fn read(client: &aws_sdk_eks::Client, cluster: &str) -> anyhow::Result<Option<Compute>> {
    use aws_sdk_eks::error::ProvideErrorMetadata;
    if !cluster_exists(client, cluster).await? {
        anyhow::bail!("no cluster yet");
    }
    match client
        .describe_addon()
        .cluster_name(cluster)
        .addon_name(COREDNS)
        .send()
        .await
    {
        Ok(out) => Ok(Some(Compute::from_configuration(
            out.addon().and_then(|a| a.configuration_values()),
        ))),
        Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => anyhow::bail!(
            "eks:DescribeAddon {cluster}/{COREDNS}: {}: {}",
            e.code().unwrap_or("error"),
            e.message().unwrap_or(&format!("{e}"))
        ),
    }
}

/// Polls the emulator every `poll` and keeps CoreDNS in line until shutdown.
pub fn spawn(
    store: Arc<Store>,
    endpoint: String,
    cluster: String,
    region: String,
    poll: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let client = eks_client(&endpoint, &region).await;
        let mut interval = tokio::time::interval(poll);
        // What an add-on that was seen and then deleted leaves: the last placement.
        let mut last = Compute::Ec2;
        let mut last_error = String::new();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = interval.tick() => {}
            }
            match read(&client, &cluster).await {
                Ok(addon) => {
                    last_error.clear();
                    if let Some(c) = addon {
                        last = c;
                    }
                    reconcile(&store, last);
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    if msg != last_error && msg != "no cluster yet" {
                        tracing::warn!("coredns add-on: {msg}");
                    }
                    last_error = msg;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_decides_the_placement() {
        assert_eq!(
            Compute::from_configuration(Some(r#"{"computeType":"Fargate"}"#)),
            Compute::Fargate
        );
        assert_eq!(Compute::from_configuration(Some("{}")), Compute::Ec2);
        assert_eq!(Compute::from_configuration(Some("not json")), Compute::Ec2);
        assert_eq!(Compute::from_configuration(None), Compute::Ec2);
        let ec2 = coredns_deployment(Compute::Ec2);
        assert_eq!(
            ec2["spec"]["template"]["metadata"]["annotations"][COMPUTE_TYPE_LABEL],
            "ec2"
        );
        let fargate = coredns_deployment(Compute::Fargate);
        assert!(
            fargate["spec"]["template"]["metadata"]["annotations"][COMPUTE_TYPE_LABEL].is_null()
        );
    }
}
