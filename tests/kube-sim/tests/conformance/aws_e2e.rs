//! End to end with the AWS emulator: capacity launched through EC2 CreateFleet, tagged for
//! the cluster, becomes a Node; pending pods bind and run on it; terminating the instance
//! takes the Node away and the pods go back to pending. The kubelet bridge in the store is a
//! kube-sim hook, so this test runs on kube-sim only (`bridge_targets` runs the bridge on
//! the real control plane).

use crate::common;

use std::time::Duration;

use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
    InstanceType, RequestLaunchTemplateData, ResourceType, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use base64::Engine;
use common::wait_for_async;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::{KubeSim, Options};
use serde_json::json;

const CLUSTER: &str = "e2e-cluster";

fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_instance_becomes_a_node_and_its_termination_sends_pods_back_to_pending() {
    let moto = joiner_test_support::MotoServer::start();
    let sim = KubeSim::start(Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        boot_delay: Duration::from_millis(800),
        node_grace: Duration::from_millis(800),
        aws_poll: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap();
    let client = sim.client().await.unwrap();
    let ec2 = kube_sim::aws::ec2_client(&moto.endpoint(), "us-east-1").await;

    // A Deployment that fits nowhere yet: its pods wait, marked Unschedulable.
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d = serde_json::from_value(json!({"metadata": {"name": "app"}, "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "app"}},
        "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
            "nodeSelector": {"joiner.dev/nodepool": "default"},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}}}))
    .unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let app = ListParams::default().labels("app=app");
    let all_pending = |pods: Api<Pod>, app: ListParams| async move {
        let list = pods.list(&app).await.ok()?;
        let ok = list.items.len() == 2
            && list.items.iter().all(|p| {
                p.spec.as_ref().unwrap().node_name.is_none()
                    && scheduled_condition(p)
                        .is_some_and(|(s, r, _)| s == "False" && r == "Unschedulable")
            });
        ok.then_some(list)
    };
    let pending = wait_for_async("2 unschedulable pods", Duration::from_secs(20), || {
        all_pending(pods.clone(), app.clone())
    })
    .await;
    let (_, _, msg) = scheduled_condition(&pending.items[0]).unwrap();
    assert_eq!(msg, "no nodes available to schedule pods");

    // Launch capacity the way the agent does: a launch template and an instant fleet,
    // with the node labels and taints in the user data and tags.
    let image = ec2
        .describe_images()
        .owners("amazon")
        .filters(
            Filter::builder()
                .name("name")
                .values("al2022-ami-*")
                .build(),
        )
        .send()
        .await
        .expect("EC2 DescribeImages");
    let image_id = image
        .images()
        .first()
        .and_then(|i| i.image_id())
        .expect("moto ships AMIs")
        .to_string();
    let user_data = "#!/bin/bash\n/etc/eks/bootstrap.sh e2e-cluster --kubelet-extra-args '--node-labels=joiner.dev/nodepool=default --register-with-taints=joiner.dev/startup=true:PreferNoSchedule'\n";
    // The node role may join (its EC2_LINUX access entry), as on a real cluster.
    let conf = kube_sim::aws::sdk_config(&moto.endpoint(), "us-east-1").await;
    let role = kube_sim::node_auth::node_role(&conf, CLUSTER, "e2e-nodes", true)
        .await
        .expect("the node role and its access entry");
    // In the cluster security group, as the agent's default NodeClass puts nodes: the only
    // group the API server's private endpoint admits.
    let cluster_group = kube_sim::network::cluster_security_group(&conf, CLUSTER)
        .await
        .expect("the cluster security group");
    let lt = ec2
        .create_launch_template()
        .launch_template_name("e2e-nodes")
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(&image_id)
                .security_group_ids(cluster_group)
                .iam_instance_profile(
                    aws_sdk_ec2::types::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                        .name(&role.instance_profile)
                        .build(),
                )
                .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
                .build(),
        )
        .send()
        .await
        .expect("EC2 CreateLaunchTemplate");
    let lt_id = lt
        .launch_template()
        .and_then(|l| l.launch_template_id())
        .unwrap()
        .to_string();
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
    let fleet = ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_id(&lt_id)
                        .version("$Latest")
                        .build(),
                )
                .overrides(
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(InstanceType::M5Large)
                        .build(),
                )
                .build(),
        )
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(DefaultTargetCapacityType::OnDemand)
                .build(),
        )
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(tag(&format!("kubernetes.io/cluster/{CLUSTER}"), "owned"))
                .tags(tag(
                    "joiner.dev/node-labels",
                    "karpenter.sh/capacity-type=on-demand",
                ))
                .build(),
        )
        .send()
        .await
        .expect("EC2 CreateFleet");
    let instance_id = fleet
        .instances()
        .first()
        .and_then(|i| i.instance_ids().first())
        .expect("fleet launched one instance")
        .clone();

    // Its Node registers after the boot delay and turns Ready.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = wait_for_async(
        "a Ready node for the instance",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move {
                let list = nodes.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
            }
        },
    )
    .await;
    let spec = node.spec.clone().unwrap();
    let provider_id = spec.provider_id.unwrap();
    assert!(
        provider_id.starts_with("aws:///us-east-1")
            && provider_id.ends_with(&format!("/{instance_id}")),
        "{provider_id}"
    );
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["topology.kubernetes.io/region"], "us-east-1");
    assert!(labels["topology.kubernetes.io/zone"].starts_with("us-east-1"));
    assert_eq!(
        labels["joiner.dev/nodepool"], "default",
        "label from user data"
    );
    assert_eq!(
        labels["karpenter.sh/capacity-type"], "on-demand",
        "label from tags"
    );
    let taints = spec.taints.unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "joiner.dev/startup" && t.effect == "PreferNoSchedule"),
        "{taints:?}"
    );
    let status = node.status.unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "2");
    assert_eq!(
        status.allocatable.as_ref().unwrap()["cpu"].0,
        "1930m",
        "EKS kube-reserved model"
    );
    let node_name = node.metadata.name.clone().unwrap();
    assert!(
        node_name.ends_with(".internal") || node_name.starts_with("ip-"),
        "named by private DNS: {node_name}"
    );

    // The pending pods bind to it and run.
    wait_for_async("pods running on the node", Duration::from_secs(20), || {
        let pods = pods.clone();
        let app = app.clone();
        let node_name = node_name.clone();
        async move {
            let list = pods.list(&app).await.ok()?;
            let ok = list.items.len() == 2
                && list.items.iter().all(|p| {
                    p.spec.as_ref().unwrap().node_name.as_deref() == Some(node_name.as_str())
                        && p.status.as_ref().unwrap().phase.as_deref() == Some("Running")
                });
            ok.then_some(())
        }
    })
    .await;

    // Terminating the instance: NotReady, then gone; the Deployment's replacements pend.
    ec2.terminate_instances()
        .instance_ids(&instance_id)
        .send()
        .await
        .expect("EC2 TerminateInstances");
    wait_for_async("node deleted", Duration::from_secs(30), || {
        let nodes = nodes.clone();
        let node_name = node_name.clone();
        async move {
            nodes
                .get_opt(&node_name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    let again = wait_for_async(
        "replacement pods unschedulable",
        Duration::from_secs(20),
        || all_pending(pods.clone(), app.clone()),
    )
    .await;
    let old: Vec<_> = pending
        .items
        .iter()
        .map(|p| p.metadata.name.clone())
        .collect();
    assert!(again
        .items
        .iter()
        .all(|p| !old.contains(&p.metadata.name) || p.spec.as_ref().unwrap().node_name.is_none()));
}

/// AL2023 user data as the agent writes it: a MIME archive whose NodeConfig part carries the
/// cluster (with or without `cidr`) and the kubelet's labels, taints and max pods.
fn node_config_user_data(cidr: Option<&str>) -> String {
    let cidr = cidr.map(|c| format!("    cidr: {c}\n")).unwrap_or_default();
    format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//b//\"\n\n\
         --//b//\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho custom\n\
         --//b//\nContent-Type: application/node.eks.aws\n\n\
         apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {CLUSTER}\n    \
         apiServerEndpoint: https://example.eks.amazonaws.com\n    certificateAuthority: Y2E=\n{cidr}  \
         kubelet:\n    config:\n      maxPods: 17\n      registerWithTaints:\n      - key: joiner.dev/config-taint\n        \
         effect: NoSchedule\n    flags:\n    - --node-labels=joiner.dev/nodepool=al2023\n    \
         - --register-with-taints=joiner.dev/startup=true:NoExecute\n--//b//--\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_config_nodeadm_refuses_never_becomes_a_node_and_an_accepted_one_configures_the_kubelet(
) {
    let moto = joiner_test_support::MotoServer::start();
    let sim = KubeSim::start(Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        boot_delay: Duration::from_millis(300),
        node_grace: Duration::from_millis(800),
        aws_poll: Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap();
    let client = sim.client().await.unwrap();
    let ec2 = kube_sim::aws::ec2_client(&moto.endpoint(), "us-east-1").await;
    let conf = kube_sim::aws::sdk_config(&moto.endpoint(), "us-east-1").await;
    let role = kube_sim::node_auth::node_role(&conf, CLUSTER, "nodeadm-nodes", true)
        .await
        .expect("the node role and its access entry");
    let cluster_group = kube_sim::network::cluster_security_group(&conf, CLUSTER)
        .await
        .expect("the cluster security group");
    let image_id = ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .expect("EC2 DescribeImages")
        .images()
        .first()
        .and_then(|i| i.image_id())
        .expect("moto ships AMIs")
        .to_string();
    let launch = |user_data: String| {
        let ec2 = ec2.clone();
        let image_id = image_id.clone();
        let group = cluster_group.clone();
        let profile = role.instance_profile.clone();
        async move {
            ec2.run_instances()
                .image_id(image_id)
                .instance_type(InstanceType::M5Large)
                .min_count(1)
                .max_count(1)
                .security_group_ids(group)
                .iam_instance_profile(
                    aws_sdk_ec2::types::IamInstanceProfileSpecification::builder()
                        .name(profile)
                        .build(),
                )
                .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
                .tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::Instance)
                        .tags(
                            Tag::builder()
                                .key(format!("kubernetes.io/cluster/{CLUSTER}"))
                                .value("owned")
                                .build(),
                        )
                        .build(),
                )
                .send()
                .await
                .expect("EC2 RunInstances")
                .instances()[0]
                .instance_id()
                .unwrap()
                .to_string()
        }
    };
    // Refused first: the bridge judges instances in launch order within a poll, so once the
    // accepted one's Node exists, the refused one has been judged too.
    let refused = launch(node_config_user_data(None)).await;
    let accepted = launch(node_config_user_data(Some("10.100.0.0/16"))).await;

    let nodes: Api<Node> = Api::all(client.clone());
    let node = wait_for_async(
        "the accepted instance's Node",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            let accepted = accepted.clone();
            async move {
                let list = nodes.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .is_some_and(|p| p.ends_with(&format!("/{accepted}")))
                })
            }
        },
    )
    .await;
    let all = nodes.list(&ListParams::default()).await.unwrap().items;
    assert!(
        !all.iter().any(|n| n
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|p| p.ends_with(&format!("/{refused}")))),
        "the instance whose NodeConfig has no cidr registered"
    );
    assert_eq!(all.len(), 1, "only the accepted instance is a Node");

    // nodeadm's merged config reached the kubelet: the flags' label and taint, the config's
    // taint and maxPods (m5.large's ENI figure would be 29).
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["joiner.dev/nodepool"], "al2023");
    let taints = node.spec.clone().unwrap().taints.unwrap_or_default();
    for (key, effect) in [
        ("joiner.dev/startup", "NoExecute"),
        ("joiner.dev/config-taint", "NoSchedule"),
    ] {
        assert!(
            taints.iter().any(|t| t.key == key && t.effect == effect),
            "{key}:{effect} in {taints:?}"
        );
    }
    let status = node.status.unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["pods"].0, "17");

    // What nodeadm said about the refused one.
    assert!(
        matches!(
            kube_sim::aws::nodeadm_check(&node_config_user_data(None)),
            kube_sim::aws::Nodeadm::Refused(why) if why.contains("CIDR is missing")
        ),
        "nodeadm refuses a NodeConfig without cidr"
    );
}
