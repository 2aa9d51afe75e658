//! The EC2 → Node bridge on every target: an emulator instance tagged for the cluster
//! becomes a Node (providerID, labels and taints from its tags, allocatable from its type)
//! on kube-sim and on the real control plane, where KWOK plays its kubelet and the real
//! kube-scheduler binds a pod to it; terminating the instance deletes the Node. Only an
//! instance whose role may join (an EC2_LINUX access entry, or aws-auth) becomes a Node.

use crate::common;

use std::time::Duration;

use aws_sdk_ec2::types::{
    IamInstanceProfileSpecification, InstanceType, ResourceType, Tag, TagSpecification,
};
use common::wait_for_async;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube_sim::aws::{BridgeOptions, JOINER_CLUSTER_TAG, NODE_LABELS_TAG, NODE_TAINTS_TAG};
use kube_sim::{Options, TargetCluster};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_becomes_a_schedulable_node_on_every_target() {
    let moto = joiner_test_support::MotoServer::start();
    let ec2 = kube_sim::aws::ec2_client(&moto.endpoint(), "us-east-1").await;
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
    for (i, t) in TargetCluster::all(Options::default())
        .unwrap()
        .into_iter()
        .enumerate()
    {
        let name = t.name();
        let cluster = format!("bridge-{i}");
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        t.bridge(
            BridgeOptions {
                endpoint: moto.endpoint(),
                cluster: cluster.clone(),
                region: "us-east-1".into(),
                boot_delay: Duration::from_millis(300),
                node_grace: Duration::from_millis(300),
                poll: Duration::from_millis(300),
            },
            stop_rx,
        )
        .await
        .unwrap();
        let conf = kube_sim::aws::sdk_config(&moto.endpoint(), "us-east-1").await;
        let role =
            kube_sim::node_auth::node_role(&conf, &cluster, &format!("{cluster}-nodes"), true)
                .await
                .expect("the node role and its access entry");
        let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
        let cluster_group = kube_sim::network::cluster_security_group(&conf, &cluster)
            .await
            .expect("the cluster security group");
        let run = ec2
            .run_instances()
            .image_id(&image_id)
            .instance_type(InstanceType::M5Large)
            .security_group_ids(cluster_group)
            .iam_instance_profile(
                IamInstanceProfileSpecification::builder()
                    .name(&role.instance_profile)
                    .build(),
            )
            .min_count(1)
            .max_count(1)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .tags(tag(JOINER_CLUSTER_TAG, &cluster))
                    .tags(tag(NODE_LABELS_TAG, "team=a"))
                    .tags(tag(NODE_TAINTS_TAG, "dedicated=batch:NoSchedule"))
                    .build(),
            )
            .send()
            .await
            .expect("EC2 RunInstances");
        let id = run.instances()[0].instance_id().unwrap().to_string();

        let client = t.client().await.unwrap();
        let nodes: Api<Node> = Api::all(client.clone());
        let find = |nodes: Api<Node>, id: String| async move {
            nodes
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .is_some_and(|p| p.starts_with("aws:///") && p.ends_with(&id))
                })
        };
        let node = wait_for_async(
            &format!("[{name}] the instance's Node"),
            Duration::from_secs(30),
            || find(nodes.clone(), id.clone()),
        )
        .await;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("a"),
            "[{name}]"
        );
        assert_eq!(
            labels
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str),
            Some("m5.large"),
            "[{name}]"
        );
        let taints = node
            .spec
            .as_ref()
            .unwrap()
            .taints
            .clone()
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "dedicated" && t.effect == "NoSchedule"),
            "[{name}] {taints:?}"
        );
        let alloc = node.status.as_ref().unwrap().allocatable.clone().unwrap();
        assert_eq!(
            alloc["cpu"].0, "1930m",
            "[{name}] EKS's kube-reserved for 2 vCPUs"
        );
        let node_name = node.metadata.name.clone().unwrap();

        // Ready (the bridge on kube-sim, KWOK on the real control plane), then a pod that
        // tolerates the taint and selects the label runs there.
        let ns = format!("bridge-{i}");
        let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await;
        if t.is_real() {
            // Admission needs the namespace's default ServiceAccount.
            let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), &ns);
            wait_for_async("default ServiceAccount", Duration::from_secs(30), || {
                let sas = sas.clone();
                async move { sas.get_opt("default").await.ok().flatten() }
            })
            .await;
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "nodeSelector": {"team": "a"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "500m"}}}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let want = node_name.clone();
        wait_for_async(
            &format!("[{name}] the pod running on the Node"),
            Duration::from_secs(60),
            || {
                let (pods, want) = (pods.clone(), want.clone());
                async move {
                    let p = pods.get("p").await.ok()?;
                    let on = p.spec.as_ref()?.node_name.as_deref() == Some(want.as_str());
                    let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
                    (on && running).then_some(())
                }
            },
        )
        .await;

        ec2.terminate_instances()
            .instance_ids(&id)
            .send()
            .await
            .expect("EC2 TerminateInstances");
        wait_for_async(
            &format!("[{name}] the Node deleted"),
            Duration::from_secs(30),
            || {
                let nodes = nodes.clone();
                let n = node_name.clone();
                async move {
                    nodes
                        .get_opt(&n)
                        .await
                        .ok()
                        .is_some_and(|o| o.is_none())
                        .then_some(())
                }
            },
        )
        .await;
        let _ = stop.send(true);
    }
}

/// The Node whose providerID ends with the instance id, if any.
async fn node_of(nodes: &Api<Node>, id: &str) -> Option<Node> {
    nodes
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p.ends_with(&format!("/{id}")))
        })
}

async fn launch(ec2: &aws_sdk_ec2::Client, image_id: &str, cluster: &str, profile: &str) -> String {
    // The cluster security group, by the tag EKS puts on it: a node outside it never registers.
    let cluster_group = ec2
        .describe_security_groups()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:aws:eks:cluster-name")
                .values(cluster)
                .build(),
        )
        .send()
        .await
        .expect("EC2 DescribeSecurityGroups")
        .security_groups()
        .first()
        .and_then(|g| g.group_id())
        .expect("the cluster security group")
        .to_string();
    let run = ec2
        .run_instances()
        .image_id(image_id)
        .instance_type(InstanceType::M5Large)
        .security_group_ids(cluster_group)
        .iam_instance_profile(
            IamInstanceProfileSpecification::builder()
                .name(profile)
                .build(),
        )
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(
                    Tag::builder()
                        .key(JOINER_CLUSTER_TAG)
                        .value(cluster)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("EC2 RunInstances");
    run.instances()[0].instance_id().unwrap().to_string()
}

/// EKS refuses the kubelet of a role with no access entry (and no aws-auth mapping): its
/// instance never becomes a Node, on kube-sim and on the real control plane alike. The
/// refused instance is launched before an authorized one; once the authorized one is a
/// Node, the bridge has judged both (it goes through the instances in launch order), so the
/// refused one's missing Node is a decision, not a delay. Granting the role its EC2_LINUX
/// entry lets a new instance of it join. An aws-auth mapping (read from the cluster the
/// Nodes go to) authorizes a third role in API_AND_CONFIG_MAP mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorized_role_never_becomes_a_node_on_every_target() {
    let moto = joiner_test_support::MotoServer::start();
    let conf = kube_sim::aws::sdk_config(&moto.endpoint(), "us-east-1").await;
    let ec2 = aws_sdk_ec2::Client::new(&conf);
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
    for (i, t) in TargetCluster::all(Options::default())
        .unwrap()
        .into_iter()
        .enumerate()
    {
        let name = t.name();
        let cluster = format!("auth-{i}");
        let allowed =
            kube_sim::node_auth::node_role(&conf, &cluster, &format!("{cluster}-ok"), true)
                .await
                .unwrap();
        let denied =
            kube_sim::node_auth::node_role(&conf, &cluster, &format!("{cluster}-denied"), false)
                .await
                .unwrap();
        let mapped =
            kube_sim::node_auth::node_role(&conf, &cluster, &format!("{cluster}-mapped"), false)
                .await
                .unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        t.bridge(
            BridgeOptions {
                endpoint: moto.endpoint(),
                cluster: cluster.clone(),
                region: "us-east-1".into(),
                boot_delay: Duration::from_millis(200),
                node_grace: Duration::from_millis(200),
                poll: Duration::from_millis(200),
            },
            stop_rx,
        )
        .await
        .unwrap();
        let client = t.client().await.unwrap();
        let nodes: Api<Node> = Api::all(client.clone());

        let refused = launch(&ec2, &image_id, &cluster, &denied.instance_profile).await;
        let ok = launch(&ec2, &image_id, &cluster, &allowed.instance_profile).await;
        wait_for_async(
            &format!("[{name}] the authorized instance's Node"),
            Duration::from_secs(30),
            || {
                let nodes = nodes.clone();
                let ok = ok.clone();
                async move { node_of(&nodes, &ok).await }
            },
        )
        .await;
        assert!(
            node_of(&nodes, &refused).await.is_none(),
            "[{name}] an instance of {} (no access entry) became a Node",
            denied.role_arn
        );

        // aws-auth in the cluster itself maps the third role.
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "kube-system");
        let aws_auth = serde_json::from_value(json!({
            "metadata": {"name": "aws-auth", "namespace": "kube-system"},
            "data": {"mapRoles": format!(
                "- rolearn: {}\n  username: system:node:{{{{EC2PrivateDNSName}}}}\n  groups:\n    - system:bootstrappers\n    - system:nodes\n",
                mapped.role_arn
            )}
        }))
        .unwrap();
        cms.create(&PostParams::default(), &aws_auth)
            .await
            .expect("create aws-auth");
        let via_map = launch(&ec2, &image_id, &cluster, &mapped.instance_profile).await;
        wait_for_async(
            &format!("[{name}] the aws-auth-mapped instance's Node"),
            Duration::from_secs(30),
            || {
                let nodes = nodes.clone();
                let id = via_map.clone();
                async move { node_of(&nodes, &id).await }
            },
        )
        .await;
        assert!(
            node_of(&nodes, &refused).await.is_none(),
            "[{name}] still refused"
        );

        // Granting the entry lets the role's instances join.
        aws_sdk_eks::Client::new(&conf)
            .create_access_entry()
            .cluster_name(&cluster)
            .principal_arn(&denied.role_arn)
            .r#type("EC2_LINUX")
            .send()
            .await
            .expect("EKS CreateAccessEntry");
        let later = launch(&ec2, &image_id, &cluster, &denied.instance_profile).await;
        wait_for_async(
            &format!("[{name}] a Node for the newly authorized role"),
            Duration::from_secs(30),
            || {
                let nodes = nodes.clone();
                let id = later.clone();
                async move { node_of(&nodes, &id).await }
            },
        )
        .await;
        let _ = stop.send(true);
    }
}
