//! The agent under the Kubernetes roles `joiner_agent` renders: kube-sim enforces RBAC as
//! kube-apiserver does, and a world's agent holds only a token of its ServiceAccount. With
//! one verb taken out of its ClusterRole, the work that needs it is refused (403, counted
//! by the agent) and nothing comes of it; with the role as rendered, the same world
//! provisions.

use std::time::Duration;

use joiner_agent_world::{wait_for, Opts, World};

/// The agent's count of refused `operation` calls, from its metrics.
async fn refused(w: &World, metrics: std::net::SocketAddr, operation: &str) -> u64 {
    w.metrics(metrics)
        .await
        .lines()
        .filter(|l| {
            l.starts_with("joiner_kubernetes_errors_total{")
                && l.contains(&format!("operation=\"{operation}\""))
                && l.contains("code=\"403\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nodeclaims_create_nothing_is_launched_and_the_rendered_role_provisions() {
    let w = World::start(Opts::default()).await;
    w.remove_agent_rule_verb("nodeclaims", "create").await;
    w.node_class("default").await;
    w.node_pool("general", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("app", 1, "500m", "512Mi").await;

    // The round that would launch is refused by the API server, and the agent counts it.
    let refusal = wait_for(
        "kube-sim refusing the agent's NodeClaim create",
        Duration::from_secs(60),
        || async { w.agent_refusals().into_iter().next() },
    )
    .await;
    assert_eq!(
        refusal,
        "nodeclaims.joiner.dev is forbidden: User \"system:serviceaccount:joiner:joiner-agent\" cannot create resource \"nodeclaims\" in API group \"joiner.dev\" at the cluster scope"
    );
    wait_for(
        "the refused NodeClaim create counted",
        Duration::from_secs(30),
        || async { (refused(&w, agent.metrics, "nodeclaims create").await > 0).then_some(()) },
    )
    .await;
    assert!(w.claims().await.is_empty(), "no NodeClaim without create");
    assert!(
        w.live_instances().await.is_empty(),
        "no instance launched without a NodeClaim"
    );
    assert_eq!(w.running("app").await, 0);
    println!(
        "{:?}: the create refused, nothing launched",
        w.began.elapsed()
    );

    // The role as rendered: the agent's next round provisions.
    w.restore_agent_rules().await;
    wait_for("the pod Running", Duration::from_secs(90), || async {
        (w.running("app").await == 1).then_some(())
    })
    .await;
    assert_eq!(w.claims().await.len(), 1);
    println!(
        "{:?}: provisioned under the rendered role",
        w.began.elapsed()
    );
    let refused = w.agent_refusals();
    assert!(
        refused.iter().all(|m| m.starts_with("nodeclaims.joiner.dev is forbidden: User \"system:serviceaccount:joiner:joiner-agent\" cannot create resource \"nodeclaims\"")),
        "refused more than the removed verb: {refused:#?}"
    );
    agent.stop().await.expect("agent stops cleanly");
}
