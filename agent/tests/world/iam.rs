//! The agent under enforced IAM, with only the policy `joiner_agent_role` renders: a full
//! provisioning round trip (launch, register, consolidate, terminate, delete the NodeClass's
//! launch templates) is refused nothing; and with one statement removed, the refused action
//! is reported (log, Event, metric) while the agent's other loops keep working.

use std::collections::BTreeSet;
use std::time::Duration;

use joiner_agent::api::{NodeClaim, NodeClass};
use joiner_agent_world::{wait_for, Opts, World};
use kube::api::{Api, DeleteParams};
use kube::ResourceExt;

/// The actions the agent used, from the local world's decisions.
fn actions_used(w: &World) -> BTreeSet<String> {
    w.iam_decisions()["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["action"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_policy_allows_every_call_of_a_provisioning_round_trip() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("general", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("app", 2, "500m", "512Mi").await;
    wait_for("2 pods Running", Duration::from_secs(90), || async {
        // A refused launch never ends in a timeout: it names what was refused.
        let refused = w.iam_refused();
        assert!(
            refused.is_empty(),
            "refused while provisioning: {refused:?}"
        );
        (w.running("app").await == 2).then_some(())
    })
    .await;
    // Scale to zero: consolidation removes the empty nodes (TerminateInstances).
    w.scale("app", 0).await;
    wait_for("no NodeClaim left", Duration::from_secs(120), || async {
        w.claims().await.is_empty().then_some(())
    })
    .await;
    // Deleting the NodeClass deletes its launch templates (DeleteLaunchTemplate).
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    classes
        .delete("default", &DeleteParams::default())
        .await
        .expect("delete NodeClass");
    wait_for("the NodeClass gone", Duration::from_secs(60), || async {
        classes
            .get_opt("default")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    agent.stop().await.expect("agent stops cleanly");

    let d = w.iam_decisions();
    assert_eq!(w.iam_refused(), Vec::<String>::new(), "{d:#}");
    assert_eq!(d["unmodelled"], serde_json::json!([]), "{d:#}");
    let used = actions_used(&w);
    println!(
        "agent calls under enforced IAM: {} decisions, 0 refused; actions: {used:?}",
        d["calls"]
    );
    for needed in [
        "ec2:CreateFleet",
        // Each launch of an instant fleet is authorized as RunInstances too.
        "ec2:RunInstances",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
        "ec2:DeleteLaunchTemplate",
        "iam:PassRole",
    ] {
        assert!(used.contains(needed), "{needed} never used: {used:?}");
    }
    // Every call the agent made is held in the fidelity ledger.
    let missing = joiner_test_support::calls_missing_from_ledger(used.iter().map(String::as_str));
    assert!(
        missing.is_empty(),
        "agent calls docs/aws-fidelity.md does not name: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_permission_is_reported_and_the_other_loops_keep_working() {
    let w = World::start(Opts::default()).await;
    // The agent may no longer terminate instances nor delete launch templates.
    w.remove_agent_statement("DeleteOwn").await;
    w.node_class("default").await;
    w.node_pool("general", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("first", 1, "500m", "512Mi").await;
    wait_for("the first pod Running", Duration::from_secs(90), || async {
        (w.running("first").await == 1).then_some(())
    })
    .await;
    let claim = w.claims().await.remove(0);
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    claims
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .expect("delete the NodeClaim");

    // An Event on the claim names the action, the code and the instance's ARN.
    let event = wait_for(
        "a TerminationFailed Event on the claim",
        Duration::from_secs(60),
        || async {
            w.events_for("default", &claim.name_any())
                .await
                .into_iter()
                .find(|e| e.starts_with("TerminationFailed: "))
        },
    )
    .await;
    assert!(
        event.contains("ec2:TerminateInstances failed: UnauthorizedOperation"),
        "{event}"
    );
    assert!(
        event.contains("is not authorized to perform: ec2:TerminateInstances on resource: arn:aws:ec2:us-east-1:123456789012:instance/i-"),
        "{event}"
    );
    // The metric counts it by operation and code.
    let metrics = w.metrics(agent.metrics).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("joiner_cloud_errors_total{")
                && l.contains("operation=\"ec2:TerminateInstances\"")
                && l.contains("code=\"UnauthorizedOperation\"")),
        "{metrics}"
    );

    // Provisioning still works: a second deployment gets a node.
    w.deployment("second", 1, "500m", "512Mi").await;
    wait_for(
        "the second pod Running",
        Duration::from_secs(90),
        || async { (w.running("second").await == 1).then_some(()) },
    )
    .await;
    // Only the removed statement's action was refused.
    let refused: BTreeSet<String> = w
        .iam_refused()
        .into_iter()
        .map(|r| r.split(" on ").next().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        refused,
        BTreeSet::from(["ec2:TerminateInstances".to_string()])
    );
    agent.stop().await.expect("agent stops cleanly");
}
