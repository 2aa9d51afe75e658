//! Insufficient capacity, injected by the fault proxy in front of moto (moto always has
//! capacity): Spot ICE on the cheapest type → the cache excludes it and the claim lands on
//! the next type; Spot ICE everywhere → on-demand when the NodePool allows it; and a clear
//! Event when it does not.

use std::time::Duration;

use joiner_agent_world::{wait_for, Opts, World};
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde_json::json;

fn pool(types: &[&str], capacity: &[&str]) -> serde_json::Value {
    json!({"template": {"spec": {
        "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity},
        ],
    }}})
}

fn on_pool(name: &str) -> serde_json::Value {
    json!({"nodeSelector": {"karpenter.sh/nodepool": name}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_ice_moves_to_the_next_type_then_to_on_demand_and_fails_clearly_without_it() {
    let w = World::start(Opts {
        proxy: true,
        ..Default::default()
    })
    .await;
    let proxy = w.proxy.as_ref().unwrap();
    w.node_class("default").await;
    w.node_pool("two-types", pool(&["m5.large", "m5.xlarge"], &["spot"]))
        .await;
    w.node_pool("fallback", pool(&["c5.large"], &["spot", "on-demand"]))
        .await;
    w.node_pool("spot-only", pool(&["r5.large"], &["spot"]))
        .await;
    proxy.insufficient_capacity("m5.large", "spot");
    proxy.insufficient_capacity("c5.large", "spot");
    proxy.insufficient_capacity("r5.large", "spot");
    let _agent = w.agent(&[]).await;

    w.deployment_with("a", 1, "250m", "256Mi", json!({}), on_pool("two-types"))
        .await;
    w.deployment_with("b", 1, "250m", "256Mi", json!({}), on_pool("fallback"))
        .await;
    w.deployment_with("c", 1, "250m", "256Mi", json!({}), on_pool("spot-only"))
        .await;
    wait_for("a and b Running", Duration::from_secs(90), || async {
        (w.running("a").await == 1 && w.running("b").await == 1).then_some(())
    })
    .await;
    let claims = w.claims().await;
    let of = |pool: &str| {
        claims
            .iter()
            .find(|c| c.labels()["joiner.dev/nodepool"] == pool)
            .cloned()
    };
    let a = of("two-types").expect("a claim for two-types");
    assert_eq!(a.labels()["node.kubernetes.io/instance-type"], "m5.xlarge");
    assert_eq!(a.labels()["karpenter.sh/capacity-type"], "spot");
    let b = of("fallback").expect("a claim for fallback");
    assert_eq!(b.labels()["node.kubernetes.io/instance-type"], "c5.large");
    assert_eq!(b.labels()["karpenter.sh/capacity-type"], "on-demand");

    // spot-only: every attempt fails; the claim is given up with an Event, and no
    // instance is left behind.
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(w.client.clone(), "default");
    let ev = wait_for(
        "an InsufficientCapacity Event",
        Duration::from_secs(60),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("InsufficientCapacity"))
        },
    )
    .await;
    let msg = ev.message.unwrap_or_default();
    assert!(
        msg.contains("spot-only-") && msg.contains("no capacity"),
        "{msg}"
    );
    assert_eq!(w.running("c").await, 0);
    assert!(w
        .live_instances()
        .await
        .iter()
        .all(|(_, t, _)| t != "r5.large"));
    assert!(proxy.count("CreateFleet") >= 3);
}
