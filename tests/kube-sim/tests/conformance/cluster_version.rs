//! kube-sim's `/version` is the EKS cluster's own, as EKS's API server reports the version
//! the cluster runs: before the emulator knows the cluster, the version EKS would create it
//! with; then the cluster's; after an upgrade, the new one. The agent picks the node images
//! of the version it reads here.

use std::time::Duration;

use aws_sdk_eks::types::VpcConfigRequest;
use kube_sim::{Options, TargetCluster};

use crate::common::wait_for_async;

const CLUSTER: &str = "versioned";

/// `major.minor` as kube-rs reads `/version`.
async fn served(client: &kube::Client) -> String {
    let info = client.apiserver_version().await.expect("GET /version");
    format!("{}.{}", info.major, info.minor)
}

/// Waits until `/version` reports `want`: the version, once changed, stays.
async fn wait_served(client: &kube::Client, want: &str) {
    wait_for_async(
        &format!("/version to report {want}"),
        Duration::from_secs(30),
        || async { (served(client).await == want).then_some(()) },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_is_the_eks_clusters_own_and_follows_its_upgrade() {
    let moto = joiner_test_support::MotoServer::start();
    let eks = kube_sim::fargate::eks_client(&moto.endpoint(), "us-east-1").await;
    let default = eks
        .describe_cluster_versions()
        .default_only(true)
        .send()
        .await
        .expect("eks:DescribeClusterVersions")
        .cluster_versions()[0]
        .cluster_version()
        .expect("the default version")
        .to_string();
    let target = TargetCluster::sim_with(Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        fargate_poll: Duration::from_millis(200),
        ..Options::default()
    })
    .expect("kube-sim");
    let client = target.client().await.expect("client");
    assert_eq!(
        served(&client).await,
        default,
        "no cluster yet: the version EKS creates clusters with"
    );

    eks.create_cluster()
        .name(CLUSTER)
        .version("1.34")
        .role_arn("arn:aws:iam::123456789012:role/cluster")
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .subnet_ids("subnet-12345678")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateCluster");
    wait_served(&client, "1.34").await;

    eks.update_cluster_version()
        .name(CLUSTER)
        .version("1.35")
        .send()
        .await
        .expect("eks:UpdateClusterVersion");
    wait_served(&client, "1.35").await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, "v1.35.0-kube-sim");
}
