//! Pods that belong to Fargate get no EC2 capacity: a pending pod that a Fargate profile
//! selects but that was created before the profile (so EKS never admitted it to Fargate)
//! is held back with an Event saying why and what to do, while other pods are served.

use std::time::Duration;

use aws_sdk_eks::types::FargateProfileSelector;
use joiner_agent_world::{sdk_config, wait_for, Opts, World, CLUSTER};
use kube::ResourceExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_a_fargate_profile_selects_get_no_ec2_capacity() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("general", World::general_pool_spec("default"))
        .await;

    // The pods first, as EKS's own CoreDNS comes before any profile: the default scheduler,
    // Pending. 3 vCPU each, so they could never ride along on the small node `web` gets.
    w.deployment("dns", 2, "3", "1Gi").await;
    wait_for("two dns pods", Duration::from_secs(30), || async {
        (w.pods("dns").await.len() == 2).then_some(())
    })
    .await;

    // Then the EKS cluster's (the world made it) Fargate profile that selects them.
    let eks = aws_sdk_eks::Client::new(&sdk_config(&w.moto.endpoint()).await);
    eks.create_fargate_profile()
        .cluster_name(CLUSTER)
        .fargate_profile_name("system")
        .pod_execution_role_arn("arn:aws:iam::123456789012:role/fargate")
        .selectors(
            FargateProfileSelector::builder()
                .namespace("default")
                .labels("app", "dns")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateFargateProfile");

    let _agent = w.agent(&[]).await;
    let dns = w.pods("dns").await[0].name_any();
    let ev = wait_for(
        "the agent's FargateProfileSelectsPod Event on a dns pod",
        Duration::from_secs(60),
        || async {
            w.events_for("default", &dns)
                .await
                .into_iter()
                .find(|e| e.starts_with("FargateProfileSelectsPod: "))
        },
    )
    .await;
    assert!(ev.contains("\"system\""), "names the profile: {ev}");
    assert!(ev.contains("delete the pod"), "says what to do: {ev}");

    // The agent still provisions for everything else.
    w.deployment("web", 1, "100m", "128Mi").await;
    wait_for("the web pod Running", Duration::from_secs(90), || async {
        (w.running("web").await == 1).then_some(())
    })
    .await;
    let unbound = w
        .pods("dns")
        .await
        .into_iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty)
        })
        .count();
    assert_eq!(unbound, 2, "no capacity was launched for Fargate's pods");
    let nodes = w.nodes().await.len();
    assert_eq!(nodes, 1, "one node, for web alone");
}
