//! NodeClaim lifecycle and termination rules through kube-sim and moto: unplaceable pods,
//! an invalid NodePool and an invalid NodeClass reported (Events, status) while the valid
//! NodePool is served;
//! NodePool limits; a PodDisruptionBudget that blocks the drain until it allows it; a
//! do-not-disrupt pod that holds its node; a Node that never registers (registration TTL).

use std::time::Duration;

use joiner_agent::api::{NodeClaim, NodeClass, NodePool};
use joiner_agent_world::{wait_for, Opts, World};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unplaceable_pods_and_an_invalid_nodepool_are_reported_while_the_valid_pool_serves() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("good", World::general_pool_spec("default"))
        .await;
    let mut bad = World::general_pool_spec("default");
    bad["template"]["spec"]["requirements"][0]["operator"] = json!("Maybe");
    w.node_pool("bad", bad).await;
    // A NodeClass the CRD's rules would refuse, stored as if before an upgrade (kube-sim
    // does not evaluate the rules), and a pool on it.
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    let broken: NodeClass = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
        "metadata": {"name": "broken"},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "x"}}],
            "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": "x"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "r",
            "metadataOptions": {"httpTokens": "sometimes"},
        }
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &broken)
        .await
        .unwrap();
    w.node_pool("on-broken", World::general_pool_spec("broken"))
        .await;
    let _agent = w.agent(&[]).await;

    w.deployment("huge", 1, "500", "1Gi").await;
    w.deployment("small", 1, "250m", "256Mi").await;
    wait_for("the small pod Running", Duration::from_secs(90), || async {
        (w.running("small").await == 1).then_some(())
    })
    .await;
    let huge = w.pods("huge").await.remove(0).name_any();
    let ev = wait_for(
        "a FailedScheduling Event on the huge pod",
        Duration::from_secs(30),
        || async {
            w.events_for("default", &huge)
                .await
                .into_iter()
                .find(|e| e.starts_with("FailedScheduling: "))
        },
    )
    .await;
    assert!(ev.contains("nodepool \"good\""), "{ev}");

    let pools: Api<NodePool> = Api::all(w.client.clone());
    let cond = wait_for(
        "the bad NodePool's ValidationSucceeded=False",
        Duration::from_secs(20),
        || async {
            let p = pools.get("bad").await.ok()?;
            p.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "ValidationSucceeded" && c.status == "False")
        },
    )
    .await;
    assert!(cond.message.contains("operator"), "{}", cond.message);
    let events = w.events_for("default", "bad").await;
    assert!(
        events.iter().any(|e| e.starts_with("ValidationFailed: ")),
        "{events:?}"
    );
    // The invalid class says so itself, and is never resolved against EC2.
    let ready = wait_for(
        "the broken NodeClass's Ready=False (ValidationFailed)",
        Duration::from_secs(20),
        || async {
            let c = classes.get("broken").await.ok()?;
            c.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.status == "False")
        },
    )
    .await;
    assert_eq!(ready.reason, "ValidationFailed");
    assert!(ready.message.contains("httpTokens"), "{}", ready.message);
    let events = w.events_for("default", "broken").await;
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("ValidationFailed: ") && e.contains("httpTokens")),
        "{events:?}"
    );
    wait_for(
        "the pool on the broken NodeClass reported not served",
        Duration::from_secs(20),
        || async {
            let p = pools.get("on-broken").await.ok()?;
            p.status?.conditions.into_iter().find(|c| {
                c.type_ == "Ready"
                    && c.status == "False"
                    && c.message.contains("NodeClass \"broken\" is invalid")
            })
        },
    )
    .await;
    // No claim was ever made from the bad pools.
    assert!(w
        .claims()
        .await
        .iter()
        .all(|c| c.labels()["joiner.dev/nodepool"] == "good"));

    // A NodePool with fields of the wrong shape is reported too, and does not stop the agent.
    let dynamic: Api<kube::api::DynamicObject> = Api::all_with(
        w.client.clone(),
        &kube::api::ApiResource::erase::<NodePool>(&()),
    );
    let malformed: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodePool",
        "metadata": {"name": "malformed"}, "spec": {"template": "not an object"}
    }))
    .unwrap();
    dynamic
        .create(&PostParams::default(), &malformed)
        .await
        .unwrap();
    w.scale("small", 2).await;
    wait_for(
        "2 small pods Running after the malformed NodePool",
        Duration::from_secs(90),
        || async { (w.running("small").await == 2).then_some(()) },
    )
    .await;
    wait_for(
        "the malformed NodePool reported",
        Duration::from_secs(20),
        || async {
            let o = dynamic.get("malformed").await.ok()?;
            let msg = o.data["status"]["conditions"][0]["message"]
                .as_str()?
                .to_string();
            msg.contains("cannot be read").then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodepool_limits_cap_what_is_launched() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    let mut spec = World::general_pool_spec("default");
    spec["limits"] = json!({"cpu": "4"});
    w.node_pool("limited", spec).await;
    let _agent = w.agent(&[]).await;
    w.deployment("many", 12, "1", "1Gi").await;
    wait_for("some pods Running", Duration::from_secs(90), || async {
        (w.running("many").await >= 1).then_some(())
    })
    .await;
    // Let a few more rounds pass: nothing beyond the limit may appear.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let claims = w.claims().await;
    let cpus: i64 = claims
        .iter()
        .map(|c| {
            c.labels()["karpenter.k8s.aws/instance-cpu"]
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert!(
        cpus <= 4,
        "claims hold {cpus} vCPU over the limit of 4: {:?}",
        claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    assert!(
        w.running("many").await < 12,
        "the limit leaves pods pending"
    );
    let pending = w
        .pods("many")
        .await
        .into_iter()
        .find(|p| p.spec.as_ref().unwrap().node_name.is_none())
        .unwrap();
    let ev = wait_for(
        "a FailedScheduling Event naming the limit",
        Duration::from_secs(20),
        || async {
            w.events_for("default", &pending.name_any())
                .await
                .into_iter()
                .find(|e| e.starts_with("FailedScheduling"))
        },
    )
    .await;
    assert!(ev.contains("limit"), "{ev}");
}

async fn claim_of_pod(w: &World, app: &str) -> String {
    let pod = w.pods(app).await.remove(0);
    let node = pod.spec.unwrap().node_name.unwrap();
    let n = w
        .nodes()
        .await
        .into_iter()
        .find(|n| n.name_any() == node)
        .unwrap();
    n.labels()["joiner.dev/nodeclaim"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_blocks_the_drain_until_it_allows_it_and_do_not_disrupt_holds_the_node() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let _agent = w.agent(&[]).await;

    // PDB: both replicas must stay available.
    w.deployment("web", 2, "250m", "256Mi").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    wait_for("2 web pods Running", Duration::from_secs(90), || async {
        (w.running("web").await == 2).then_some(())
    })
    .await;
    let claim = claim_of_pod(&w, "web").await;
    let web_before: Vec<String> = w.pods("web").await.iter().map(|p| p.name_any()).collect();
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    claims
        .delete(&claim, &DeleteParams::default())
        .await
        .unwrap();
    let blocked = wait_for(
        "an EvictionBlocked Event",
        Duration::from_secs(30),
        || async {
            for p in w.pods("web").await {
                if let Some(e) = w
                    .events_for("default", &p.name_any())
                    .await
                    .into_iter()
                    .find(|e| e.starts_with("EvictionBlocked"))
                {
                    return Some(e);
                }
            }
            None
        },
    )
    .await;
    assert!(
        blocked.contains("disruption budget") || blocked.contains("healthy"),
        "{blocked}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = claims
        .get(&claim)
        .await
        .expect("the claim is held by its finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());
    // The same two pods, neither terminating: an eviction cannot be undone, so none
    // happened since they were listed (a count could be restored by a replacement pod).
    let after: Vec<(String, bool)> = w
        .pods("web")
        .await
        .iter()
        .map(|p| (p.name_any(), p.metadata.deletion_timestamp.is_some()))
        .collect();
    assert_eq!(
        after,
        web_before
            .iter()
            .map(|n| (n.clone(), false))
            .collect::<Vec<_>>(),
        "no pod was evicted against the PDB"
    );
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .unwrap();
    wait_for(
        "the claim terminated once the PDB allows",
        Duration::from_secs(60),
        || async { claims.get_opt(&claim).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let live = w.live_instances().await;
    assert!(
        live.iter()
            .all(|(_, _, t)| t.get("joiner.dev/nodeclaim") != Some(&claim)),
        "instance terminated"
    );

    // A do-not-disrupt pod holds a voluntary termination until the annotation goes.
    w.deployment_with(
        "keep",
        1,
        "250m",
        "256Mi",
        json!({"annotations": {"karpenter.sh/do-not-disrupt": "true"}}),
        json!({}),
    )
    .await;
    wait_for("the keep pod Running", Duration::from_secs(90), || async {
        (w.running("keep").await == 1).then_some(())
    })
    .await;
    let claim = claim_of_pod(&w, "keep").await;
    claims
        .delete(&claim, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        claims.get_opt(&claim).await.unwrap().is_some(),
        "do-not-disrupt holds the claim"
    );
    assert_eq!(w.running("keep").await, 1);
    let events = w.events_for("default", &claim).await;
    assert!(
        events.iter().any(|e| e.starts_with("DisruptionBlocked")),
        "{events:?}"
    );
    let pod = w.pods("keep").await.remove(0);
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    pods.patch(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": null}}})),
    )
    .await
    .unwrap();
    wait_for(
        "the claim terminated once the annotation is gone",
        Duration::from_secs(60),
        || async { claims.get_opt(&claim).await.ok()?.is_none().then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_registers_is_deleted_after_the_ttl_and_its_instance_terminated() {
    // kube-sim registers instances only after an hour: the Node never comes.
    let w = World::start(Opts {
        boot_delay: Duration::from_secs(3600),
        ..Default::default()
    })
    .await;
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let _agent = w.agent(&["--registration-ttl", "3s"]).await;
    w.deployment("lonely", 1, "250m", "256Mi").await;
    let (first, instance) = wait_for("a launched claim", Duration::from_secs(60), || async {
        let c = w
            .claims()
            .await
            .into_iter()
            .find(|c| c.status.as_ref().is_some_and(|s| s.provider_id.is_some()))?;
        let pid = c.status.as_ref()?.provider_id.clone()?;
        Some((c.name_any(), pid.rsplit('/').next()?.to_string()))
    })
    .await;
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    wait_for(
        "the claim deleted after the TTL",
        Duration::from_secs(60),
        || async { claims.get_opt(&first).await.ok()?.is_none().then_some(()) },
    )
    .await;
    assert!(
        !w.live_instances()
            .await
            .iter()
            .any(|(id, _, _)| *id == instance),
        "its instance is terminated"
    );
    let events = w.events_for("default", &first).await;
    assert!(
        events.iter().any(|e| e.starts_with("RegistrationTimedOut")),
        "{events:?}"
    );
}

/// A NodePool whose NodeClass role may not join the cluster (no access entry, no aws-auth):
/// its instance never becomes a Node (the bridge refuses it as EKS would), the claim is
/// deleted at the registration TTL with an Event naming the instance, the role and the
/// likely cause, the pool's `NodeRegistrationHealthy` turns False, and the replacement
/// claim waits out the back-off instead of relaunching at once (`LaunchDeferred`, and still
/// one instance bought). Once the role gets its EC2_LINUX entry, the deferred claim
/// launches, registers, and the condition turns True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorized_node_role_times_out_backs_off_and_recovers() {
    // The world's node role, with its access entry taken away: the agent's policy may pass
    // only that role to EC2 (iam:PassRole), so an unauthorized node is this role unmapped.
    const ROLE: &str = joiner_agent_world::NODE_ROLE;
    let w = World::start(Opts::default()).await;
    let conf = joiner_agent_world::sdk_config(&w.moto.endpoint()).await;
    let role = kube_sim::node_auth::node_role(&conf, joiner_agent_world::CLUSTER, ROLE, true)
        .await
        .expect("the node role");
    aws_sdk_eks::Client::new(&conf)
        .delete_access_entry()
        .cluster_name(joiner_agent_world::CLUSTER)
        .principal_arn(&role.role_arn)
        .send()
        .await
        .expect("EKS DeleteAccessEntry");
    // The world's node role: the agent's policy may pass only that role to EC2.
    w.node_class("denied").await;
    w.node_pool("denied", World::general_pool_spec("denied"))
        .await;
    let _agent = w
        .agent(&["--registration-ttl", "3s", "--registration-backoff", "20s"])
        .await;
    w.deployment("needs-a-node", 1, "250m", "256Mi").await;

    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let (first, instance, timed_out) = first_claim_timed_out(&w).await;
    for part in [
        instance.as_str(),
        ROLE,
        "EC2_LINUX",
        joiner_agent_world::CLUSTER,
    ] {
        assert!(timed_out.contains(part), "{part:?} not in {timed_out}");
    }
    let pools: Api<NodePool> = Api::all(w.client.clone());
    let condition = |healthy: &'static str| {
        let pools = pools.clone();
        move || {
            let pools = pools.clone();
            async move {
                let p = pools.get("denied").await.ok()?;
                p.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "NodeRegistrationHealthy" && c.status == healthy)
            }
        }
    };
    let unhealthy = wait_for(
        "NodeRegistrationHealthy=False on the pool",
        Duration::from_secs(30),
        condition("False"),
    )
    .await;
    assert_eq!(unhealthy.reason, "RegistrationTimedOut");

    // The pod is still pending: a new claim is made, and its launch is deferred.
    let second = wait_for(
        "the replacement claim deferred",
        Duration::from_secs(60),
        || async {
            for c in w.claims().await {
                let name = c.name_any();
                if name != first
                    && w.events_for("default", &name)
                        .await
                        .iter()
                        .any(|e| e.starts_with("LaunchDeferred"))
                {
                    return Some(name);
                }
            }
            None
        },
    )
    .await;
    let bought: Vec<String> = w
        .ec2
        .describe_instances()
        .send()
        .await
        .unwrap()
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    assert_eq!(
        bought,
        std::slice::from_ref(&instance),
        "no relaunch during the back-off"
    );

    // The role may join now: the deferred claim launches after the back-off and registers.
    aws_sdk_eks::Client::new(&conf)
        .create_access_entry()
        .cluster_name(joiner_agent_world::CLUSTER)
        .principal_arn(&role.role_arn)
        .r#type("EC2_LINUX")
        .send()
        .await
        .expect("EKS CreateAccessEntry");
    wait_for(
        "the deferred claim registered",
        Duration::from_secs(90),
        || async {
            let c = claims.get_opt(&second).await.ok()??;
            c.status?.node_name
        },
    )
    .await;
    let healthy = wait_for(
        "NodeRegistrationHealthy=True again",
        Duration::from_secs(30),
        condition("True"),
    )
    .await;
    assert_eq!(healthy.reason, "NodeRegistered");
}

/// The first claim that launches, its instance, and its `RegistrationTimedOut` Event once
/// the registration TTL has deleted it: a node that never joined.
async fn first_claim_timed_out(w: &World) -> (String, String, String) {
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let (first, instance) = wait_for("a launched claim", Duration::from_secs(60), || async {
        let c = w
            .claims()
            .await
            .into_iter()
            .find(|c| c.status.as_ref().is_some_and(|s| s.provider_id.is_some()))?;
        let pid = c.status.as_ref()?.provider_id.clone()?;
        Some((c.name_any(), pid.rsplit('/').next()?.to_string()))
    })
    .await;
    wait_for(
        "the claim deleted at the TTL",
        Duration::from_secs(60),
        || async { claims.get_opt(&first).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let events = w.events_for("default", &first).await;
    let timed_out = events
        .iter()
        .find(|e| e.starts_with("RegistrationTimedOut"))
        .unwrap_or_else(|| panic!("no RegistrationTimedOut event: {events:?}"))
        .clone();
    (first, instance, timed_out)
}

/// A node outside the cluster security group: the API server's private endpoint admits only
/// that group, so its kubelet never registers. The agent says so at the registration TTL,
/// naming the groups it used and the one they lack, and a NodeClass that selects the
/// cluster security group joins at the next launch, with cluster DNS reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_outside_the_cluster_security_group_never_registers_and_is_explained() {
    let w = World::start(Opts::default()).await;
    // Only the group tagged for discovery (the VPC's default group), not the cluster's.
    w.node_class_with(
        "walled",
        json!([{"tags": {"joiner.dev/discovery": joiner_agent_world::CLUSTER}}]),
    )
    .await;
    let classes: Api<joiner_agent::api::NodeClass> = Api::all(w.client.clone());
    w.node_pool("walled", World::general_pool_spec("walled"))
        .await;
    let _agent = w
        .agent(&["--registration-ttl", "4s", "--registration-backoff", "2s"])
        .await;
    w.deployment("needs-a-node", 1, "250m", "256Mi").await;

    let (_, instance, timed_out) = first_claim_timed_out(&w).await;
    assert!(
        w.nodes().await.is_empty(),
        "a node outside the cluster group registered"
    );
    let default_group = w
        .ec2
        .describe_security_groups()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("group-name")
                .values("default")
                .build(),
        )
        .send()
        .await
        .expect("EC2 DescribeSecurityGroups")
        .security_groups()[0]
        .group_id()
        .unwrap()
        .to_string();
    let cluster_tag = format!("aws:eks:cluster-name={}", joiner_agent_world::CLUSTER);
    for part in [
        instance.as_str(),
        default_group.as_str(),
        &cluster_tag,
        "TCP 443",
    ] {
        assert!(timed_out.contains(part), "{part:?} not in {timed_out}");
    }

    // Selecting the cluster security group as well: the next launch registers, and its pods
    // reach CoreDNS.
    classes
        .patch(
            "walled",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "securityGroupSelectorTerms": joiner_agent_world::security_group_terms()
            }})),
        )
        .await
        .expect("NodeClass patch");
    wait_for("a pod Running", Duration::from_secs(120), || async {
        (w.running("needs-a-node").await == 1).then_some(())
    })
    .await;
    let node = w.nodes().await.remove(0);
    assert_eq!(
        node.annotations()
            .get(kube_sim::aws::CLUSTER_DNS_ANNOTATION)
            .map(String::as_str),
        Some("reachable"),
        "{:?}",
        node.annotations()
    );
}

/// A disruption cut short: the leader recorded the intent and set `Disrupted`, then died
/// before deleting the claim (the kill loop once left such a claim, empty, never
/// terminated: every loop skips a disrupted claim). The agent finishes it: the claim is
/// deleted with the reason recorded, its pod moves to a replacement, and its instance goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_cut_short_before_the_delete_is_finished() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    let mut spec = World::general_pool_spec("default");
    // No consolidation of its own: only the cut-short disruption may take the node.
    spec["disruption"] = json!({"consolidateAfter": "Never"});
    w.node_pool("default", spec).await;
    let _agent = w.agent(&[]).await;
    w.deployment("web", 1, "250m", "256Mi").await;
    wait_for("the pod Running", Duration::from_secs(90), || async {
        (w.running("web").await == 1).then_some(())
    })
    .await;
    let claim = claim_of_pod(&w, "web").await;
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let c = claims.get(&claim).await.unwrap();
    let instance = c
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .and_then(|p| p.rsplit('/').next().map(str::to_string))
        .expect("a launched claim has a providerID");
    // What a leader killed between its condition write and its delete leaves behind: the
    // annotations, then the condition (set a minute ago), and no deletion.
    let a_minute_ago = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60))
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    claims
        .patch(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "joiner.dev/termination-reason": "Drifted",
                "joiner.dev/disruption-deadline": (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300)).to_string(),
            }}})),
        )
        .await
        .unwrap();
    let mut conds = c.status.clone().unwrap_or_default().conditions;
    conds.push(joiner_agent::api::Condition {
        type_: "Disrupted".into(),
        status: "True".into(),
        reason: "Drifted".into(),
        message: "cut short by the test".into(),
        last_transition_time: Some(a_minute_ago),
        observed_generation: None,
    });
    claims
        .patch_status(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conds}})),
        )
        .await
        .unwrap();
    wait_for(
        "the cut-short claim terminated",
        Duration::from_secs(90),
        || async { claims.get_opt(&claim).await.ok()?.is_none().then_some(()) },
    )
    .await;
    wait_for(
        "the pod Running on another claim's node",
        Duration::from_secs(90),
        || async {
            let pod =
                w.pods("web").await.into_iter().find(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })?;
            let node = pod.spec?.node_name?;
            let n = w.nodes().await.into_iter().find(|n| n.name_any() == node)?;
            (n.labels().get("joiner.dev/nodeclaim")? != &claim).then_some(())
        },
    )
    .await;
    assert!(
        !w.live_instances()
            .await
            .iter()
            .any(|(id, _, _)| *id == instance),
        "the disrupted claim's instance is terminated"
    );
}
