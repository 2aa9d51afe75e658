//! Pricing end to end (capacity reservations, overlays, launch policies): the agent in-process against kube-sim and the
//! local world (moto plus `joiner_local.capacity_reservations`), IAM enforced with the
//! rendered agent policy.
//!
//! - Reserved capacity: reservations fill first and no further than their room; a
//!   reservation that turns out full refuses the launch (`ReservationCapacityExceeded`) and
//!   the pods go to the market; a capacity block is drained 40 minutes before its end,
//!   replacement first; an interruptible reservation's interruption is handled like a Spot
//!   interruption (the replacement does not go back into the reservation).
//! - NodeOverlays: a discount changes what is launched, extra capacity lets a pod that asks
//!   for a device be planned, an invalid overlay is reported on its status.
//! - The candidate price bound and the minValues policy on the NodeClaims the agent writes.
//! - Spot only where EC2 has a Spot market (a price in its history): never planned, never
//!   launched elsewhere.
//!
//! Transient states are read from the API server's records (Events, a NodeClaim watch),
//! never sampled; end states are polled.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::{
    CapacityReservationInstancePlatform, CapacityReservationPreference, CapacityReservationTarget,
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
    InstanceMatchCriteria, LaunchTemplateCapacityReservationSpecificationRequest,
    RequestLaunchTemplateData, ResourceType, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use futures::StreamExt;
use joiner_agent_world::{sdk_config, wait_for, Opts, World};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

use joiner_agent::api::{NodeClaim, NodeClass, NodeOverlay};
use joiner_agent::catalog::overlay::{self, Overlay};
use joiner_agent::cloud::Cloud;
use joiner_agent::labels;

const CLASS: &str = "reserved";

/// A NodeClass like the World's, selecting the reservations tagged `team=ml`.
async fn reserving_class(w: &World) {
    let api: Api<NodeClass> = Api::all(w.client.clone());
    let nc: NodeClass = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
        "metadata": {"name": CLASS},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": joiner_agent_world::CLUSTER}}],
            "securityGroupSelectorTerms": joiner_agent_world::security_group_terms(),
            "amiSelectorTerms": [{"id": w.image_id}],
            "role": joiner_agent_world::NODE_ROLE,
            "capacityReservationSelectorTerms": [{"tags": {"team": "ml"}}],
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &nc)
        .await
        .expect("NodeClass create");
}

/// A general pool over reservations, Spot and on-demand (or `capacity_types`).
fn pool_spec(capacity_types: &[&str]) -> serde_json::Value {
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": CLASS},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
            ],
        }},
    })
}

/// An on-demand capacity reservation made with CreateCapacityReservation, tagged `team=ml`.
async fn odcr(w: &World, itype: &str, zone: &str, count: i32) -> String {
    w.ec2
        .create_capacity_reservation()
        .instance_type(itype)
        .instance_platform(CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone(zone)
        .instance_count(count)
        .instance_match_criteria(InstanceMatchCriteria::Targeted)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::CapacityReservation)
                .tags(Tag::builder().key("team").value("ml").build())
                .build(),
        )
        .send()
        .await
        .expect("ec2:CreateCapacityReservation")
        .capacity_reservation()
        .and_then(|r| r.capacity_reservation_id())
        .expect("a reservation ID")
        .to_string()
}

/// A reservation AWS makes through another flow (a capacity block bought from an offering,
/// an interruptible reservation), from the local world's endpoint.
fn special_reservation(w: &World, body: serde_json::Value) -> String {
    let url = format!(
        "{}/moto-api/joiner-local/capacity-reservations",
        w.moto.endpoint()
    );
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
        ])
        .arg(body.to_string())
        .arg(&url)
        .output()
        .expect("curl");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)));
    v["CapacityReservationId"]
        .as_str()
        .unwrap_or_else(|| panic!("no reservation: {v}"))
        .to_string()
}

async fn available(w: &World, id: &str) -> i32 {
    w.ec2
        .describe_capacity_reservations()
        .capacity_reservation_ids(id)
        .send()
        .await
        .expect("ec2:DescribeCapacityReservations")
        .capacity_reservations()[0]
        .available_instance_count()
        .unwrap_or(-1)
}

fn label<'a>(c: &'a NodeClaim, k: &str) -> Option<&'a str> {
    c.labels().get(k).map(String::as_str)
}

async fn launched_claims(w: &World) -> Vec<NodeClaim> {
    w.claims()
        .await
        .into_iter()
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_ref())
                .is_some()
        })
        .collect()
}

/// The local world's price history has no `c6in` Spot price in us-east-1a
/// (`joiner_local.spot_prices`), so there is no Spot market there. A pod whose NodePool
/// allows only `c6in` Spot and which must run in us-east-1a gets no NodeClaim, and a
/// FailedScheduling Event that names what it asked for; the same pod in us-east-1b gets a
/// Spot `c6in` node there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_is_launched_only_where_a_spot_market_exists() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool(
        "spot-c6in",
        json!({
            "template": {"spec": {
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c6in"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                ],
            }},
        }),
    )
    .await;
    let agent = w.agent(&["--batch-idle", "1s"]).await;
    let in_zone = |z: &str| json!({"nodeSelector": {"topology.kubernetes.io/zone": z}});
    w.deployment_with(
        "market",
        1,
        "500m",
        "512Mi",
        json!({}),
        in_zone("us-east-1b"),
    )
    .await;
    w.deployment_with(
        "no-market",
        1,
        "500m",
        "512Mi",
        json!({}),
        in_zone("us-east-1a"),
    )
    .await;
    wait_for(
        "the pod with a market Running",
        Duration::from_secs(120),
        || async { (w.running("market").await == 1).then_some(()) },
    )
    .await;
    let pod = w.pods("no-market").await[0].name_any();
    let events = wait_for(
        "FailedScheduling for the pod without a market",
        Duration::from_secs(60),
        || async {
            let events = w.events_for("default", &pod).await;
            events
                .iter()
                .any(|e| e.starts_with("FailedScheduling:"))
                .then_some(events)
        },
    )
    .await;
    let why = events
        .iter()
        .find(|e| e.starts_with("FailedScheduling:"))
        .unwrap();
    assert!(
        why.contains("no instance type offers")
            && why.contains("spot")
            && why.contains("us-east-1a"),
        "{why}"
    );

    let claims = w.claims().await;
    assert_eq!(
        claims.len(),
        1,
        "one claim, for the pod with a market: {:#?}",
        claims.iter().map(|c| c.labels()).collect::<Vec<_>>()
    );
    let c = &claims[0];
    assert_eq!(label(c, labels::CAPACITY_TYPE), Some("spot"));
    assert_eq!(label(c, labels::ZONE), Some("us-east-1b"));
    assert!(
        label(c, labels::INSTANCE_TYPE).is_some_and(|t| t.starts_with("c6in.")),
        "{:?}",
        c.labels()
    );
    assert_eq!(w.running("no-market").await, 0);
    let in_a = w
        .ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("availability-zone")
                .values("us-east-1a")
                .build(),
        )
        .send()
        .await
        .expect("ec2:DescribeInstances");
    assert!(
        in_a.reservations().is_empty(),
        "nothing launched in us-east-1a: {in_a:?}"
    );
    assert!(w.iam_refused().is_empty(), "{:?}", w.iam_refused());
    agent.stop().await.expect("graceful stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_fill_first_then_the_market() {
    let w = World::start(Opts::default()).await;
    let cr = odcr(&w, "m5.xlarge", "us-east-1a", 2).await;
    reserving_class(&w).await;
    w.node_pool("general", pool_spec(&["reserved", "spot", "on-demand"]))
        .await;
    let agent = w.agent(&["--batch-idle", "1s"]).await;
    // Four pods that each need a node of 4 vCPU: two in the reservation, two bought.
    w.deployment("big", 4, "3500m", "4Gi").await;
    wait_for("4 pods Running", Duration::from_secs(120), || async {
        (w.running("big").await == 4).then_some(())
    })
    .await;
    let claims = launched_claims(&w).await;
    let reserved: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| label(c, labels::CAPACITY_TYPE) == Some("reserved"))
        .collect();
    assert_eq!(
        reserved.len(),
        2,
        "{:#?}",
        claims.iter().map(|c| c.labels()).collect::<Vec<_>>()
    );
    for c in &reserved {
        assert_eq!(label(c, labels::CAPACITY_RESERVATION_ID), Some(cr.as_str()));
        assert_eq!(label(c, labels::CAPACITY_RESERVATION_TYPE), Some("default"));
        assert_eq!(label(c, labels::INSTANCE_TYPE), Some("m5.xlarge"));
        assert_eq!(label(c, labels::ZONE), Some("us-east-1a"));
    }
    // The other two pods are bought on the market (sized as the scheduler sees fit).
    let market: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| label(c, labels::CAPACITY_TYPE) != Some("reserved"))
        .collect();
    assert!(!market.is_empty());
    for c in &market {
        assert!(
            matches!(label(c, labels::CAPACITY_TYPE), Some("spot" | "on-demand")),
            "{:?}",
            c.labels()
        );
        assert_eq!(label(c, labels::CAPACITY_RESERVATION_ID), None);
    }
    // The Nodes carry the reservation labels, as Karpenter's do.
    let nodes = w.nodes().await;
    let reserved_nodes = nodes
        .iter()
        .filter(|n| n.labels().get(labels::CAPACITY_RESERVATION_ID) == Some(&cr))
        .count();
    assert_eq!(reserved_nodes, 2);
    assert_eq!(available(&w, &cr).await, 0, "EC2 counts both places taken");
    // Every launch into the reservation was authorized by the rendered policy.
    assert!(w.iam_refused().is_empty(), "{:?}", w.iam_refused());

    // Scale to zero: the reservation gets its places back as its instances terminate.
    w.scale("big", 0).await;
    wait_for("both places back", Duration::from_secs(120), || async {
        (available(&w, &cr).await == 2).then_some(())
    })
    .await;
    agent.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_found_full_refuses_and_the_pods_go_to_the_market() {
    let w = World::start(Opts::default()).await;
    let cr = odcr(&w, "m5.xlarge", "us-east-1a", 1).await;
    reserving_class(&w).await;
    w.node_pool("general", pool_spec(&["reserved", "on-demand"]))
        .await;
    let agent = w.agent(&["--batch-idle", "1s"]).await;
    // The agent has read the reservation (one place) ...
    wait_for(
        "the agent to read the reservations",
        Duration::from_secs(60),
        || async {
            let d = w.iam_decisions();
            d["decisions"]
                .as_array()?
                .iter()
                .any(|x| x["action"] == "ec2:DescribeCapacityReservations")
                .then_some(())
        },
    )
    .await;
    // ... then someone else takes that place, as another cluster sharing it would.
    take_place(&w, &cr).await;
    assert_eq!(available(&w, &cr).await, 0);
    w.deployment("late", 1, "3500m", "4Gi").await;
    wait_for("the pod Running", Duration::from_secs(120), || async {
        (w.running("late").await == 1).then_some(())
    })
    .await;
    // EC2 refused the reserved launch; the claim was given up and the pod bought on-demand.
    let events = all_events(&w).await;
    let refusal = events
        .iter()
        .find(|e| e.contains("InsufficientCapacity") && e.contains("ReservationCapacityExceeded"));
    assert!(refusal.is_some(), "{events:#?}");
    let claims = launched_claims(&w).await;
    assert_eq!(claims.len(), 1);
    assert_eq!(label(&claims[0], labels::CAPACITY_TYPE), Some("on-demand"));
    assert!(w.iam_refused().is_empty(), "{:?}", w.iam_refused());
    agent.stop().await.unwrap();
}

/// Takes a reservation's last place as the admin: CreateFleet with a template targeting it.
async fn take_place(w: &World, cr: &str) {
    let lt = w
        .ec2
        .create_launch_template()
        .launch_template_name(format!("other-cluster-{cr}"))
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(&w.image_id)
                .capacity_reservation_specification(
                    LaunchTemplateCapacityReservationSpecificationRequest::builder()
                        .capacity_reservation_preference(
                            CapacityReservationPreference::CapacityReservationsOnly,
                        )
                        .capacity_reservation_target(
                            CapacityReservationTarget::builder()
                                .capacity_reservation_id(cr)
                                .build(),
                        )
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("ec2:CreateLaunchTemplate")
        .launch_template()
        .and_then(|t| t.launch_template_id())
        .unwrap()
        .to_string();
    let out = w
        .ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(DefaultTargetCapacityType::OnDemand)
                .build(),
        )
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_id(&lt)
                        .version("$Latest")
                        .build(),
                )
                .overrides(
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type("m5.xlarge".into())
                        .availability_zone("us-east-1a")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("ec2:CreateFleet as another cluster");
    assert_eq!(out.instances().len(), 1, "{:?}", out.errors());
}

async fn all_events(w: &World) -> Vec<String> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(w.client.clone());
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}

/// A claim's condition that turned true: claim, type, reason, when the watch saw it.
type Seen = (String, String, String, std::time::SystemTime);

/// Every NodeClaim condition as it appeared, with the time the watch saw it.
#[derive(Clone, Default)]
struct ConditionLog(Arc<Mutex<Vec<Seen>>>);

impl ConditionLog {
    async fn start(client: kube::Client) -> ConditionLog {
        let log = ConditionLog::default();
        let l = log.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let api: Api<NodeClaim> = Api::all(client);
            let mut ev = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut ready = Some(tx);
            while let Some(e) = ev.next().await {
                let objs = match e {
                    Ok(watcher::Event::Apply(c)) | Ok(watcher::Event::InitApply(c)) => vec![c],
                    Ok(watcher::Event::InitDone) => {
                        if let Some(t) = ready.take() {
                            let _ = t.send(());
                        }
                        vec![]
                    }
                    _ => vec![],
                };
                for c in objs {
                    for cond in c.status.iter().flat_map(|s| s.conditions.iter()) {
                        if cond.status != "True" {
                            continue;
                        }
                        let key = (c.name_any(), cond.type_.clone(), cond.reason.clone());
                        let mut v = l.0.lock().unwrap();
                        if !v
                            .iter()
                            .any(|(a, b, r, _)| (a, b, r) == (&key.0, &key.1, &key.2))
                        {
                            v.push((key.0, key.1, key.2, std::time::SystemTime::now()));
                        }
                    }
                }
            }
        });
        let _ = rx.await;
        log
    }

    fn first(&self, type_: &str, reason: &str) -> Option<(String, std::time::SystemTime)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(_, t, r, _)| t == type_ && r == reason)
            .map(|(c, _, _, at)| (c.clone(), *at))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_block_is_drained_forty_minutes_before_its_end() {
    let w = World::start(Opts::default()).await;
    // A block that ends 40 minutes and 150 seconds from now: usable for 150 s (the first
    // round waits for the catalogue, slow on a loaded machine), then drained.
    let end = std::time::SystemTime::now() + Duration::from_secs(40 * 60 + 150);
    let end_s = end
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let block = special_reservation(
        &w,
        json!({"instanceType": "m5.xlarge", "availabilityZone": "us-east-1a", "instanceCount": 1,
               "endDate": end_s, "reservationType": "capacity-block", "tags": {"team": "ml"}}),
    );
    reserving_class(&w).await;
    w.node_pool("general", pool_spec(&["reserved", "on-demand"]))
        .await;
    let log = ConditionLog::start(w.client.clone()).await;
    let agent = w
        .agent(&["--batch-idle", "1s", "--reservation-check-interval", "1s"])
        .await;
    w.deployment("train", 1, "3500m", "4Gi").await;
    let in_block = wait_for(
        "a claim launched into the block",
        Duration::from_secs(150),
        || async {
            launched_claims(&w)
                .await
                .into_iter()
                .find(|c| label(c, labels::CAPACITY_RESERVATION_ID) == Some(block.as_str()))
        },
    )
    .await;
    assert_eq!(
        label(&in_block, labels::CAPACITY_RESERVATION_TYPE),
        Some("capacity-block")
    );
    assert_eq!(label(&in_block, labels::CAPACITY_TYPE), Some("reserved"));
    let block_instance = in_block
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .and_then(|p| p.rsplit('/').next().map(str::to_string))
        .unwrap();
    // The drain: the claim is disrupted when 40 minutes are left, not before.
    let (name, at) = wait_for(
        "the block's claim disrupted",
        Duration::from_secs(240),
        || async { log.first("Disrupted", "CapacityBlockExpiring") },
    )
    .await;
    assert_eq!(name, in_block.name_any());
    let drain_at = end - Duration::from_secs(40 * 60);
    assert!(
        at + Duration::from_secs(1) >= drain_at,
        "disrupted {:?} before the drain time",
        drain_at.duration_since(at).unwrap_or_default()
    );
    assert!(
        at < end - Duration::from_secs(30 * 60),
        "after EC2 started reclaiming"
    );
    // Replacement first (on-demand: the block takes no more launches), then the pod moves.
    wait_for(
        "the pod Running on the replacement",
        Duration::from_secs(150),
        || async {
            let claims = launched_claims(&w).await;
            let replacement = claims.iter().any(|c| {
                c.name_any() != name && label(c, labels::CAPACITY_TYPE) == Some("on-demand")
            });
            let old_gone = !w
                .live_instances()
                .await
                .iter()
                .any(|(id, _, _)| *id == block_instance);
            (replacement && old_gone && w.running("train").await == 1).then_some(())
        },
    )
    .await;
    assert!(w.iam_refused().is_empty(), "{:?}", w.iam_refused());
    agent.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruptible_reservation_interruption_is_handled_like_spot() {
    let w = World::start(Opts::default()).await;
    let cr = special_reservation(
        &w,
        json!({"instanceType": "m5.xlarge", "availabilityZone": "us-east-1a", "instanceCount": 2,
               "interruptible": true, "tags": {"team": "ml"}}),
    );
    let queue = interruption_queue(&w).await;
    reserving_class(&w).await;
    w.node_pool("general", pool_spec(&["reserved", "on-demand"]))
        .await;
    let log = ConditionLog::start(w.client.clone()).await;
    let agent = w
        .agent(&["--batch-idle", "1s", "--queue-url", &queue.0])
        .await;
    w.deployment("svc", 1, "3500m", "4Gi").await;
    let claim = wait_for(
        "a claim in the reservation",
        Duration::from_secs(60),
        || async {
            launched_claims(&w)
                .await
                .into_iter()
                .find(|c| label(c, labels::CAPACITY_RESERVATION_ID) == Some(cr.as_str()))
        },
    )
    .await;
    assert_eq!(
        label(&claim, labels::CAPACITY_RESERVATION_INTERRUPTIBLE),
        Some("true")
    );
    wait_for("the pod Running", Duration::from_secs(60), || async {
        (w.running("svc").await == 1).then_some(())
    })
    .await;
    let instance = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .and_then(|p| p.rsplit('/').next().map(str::to_string))
        .unwrap();
    // The owner reclaims the capacity: EC2's 2-minute warning through EventBridge.
    queue
        .put(json!({"instance-id": instance, "instance-action": "terminate"}))
        .await;
    let (name, _) = wait_for("the claim disrupted", Duration::from_secs(60), || async {
        log.first("Disrupted", "CapacityReservationInterrupted")
    })
    .await;
    assert_eq!(name, claim.name_any());
    // Like a Spot reclaim, the offering is short: the replacement is bought, not put back
    // into the reservation, although it still has a place.
    wait_for(
        "the pod Running on the replacement",
        Duration::from_secs(120),
        || async {
            let claims = launched_claims(&w).await;
            let moved = claims.iter().any(|c| c.name_any() != name)
                && !claims.iter().any(|c| c.name_any() == name);
            (moved && w.running("svc").await == 1).then_some(())
        },
    )
    .await;
    let claims = launched_claims(&w).await;
    assert_eq!(claims.len(), 1);
    assert_eq!(label(&claims[0], labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(
        available(&w, &cr).await,
        2,
        "the reclaimed place is not taken again"
    );
    agent.stop().await.unwrap();
}

/// The interruption queue with the rule for capacity reservation interruptions, as
/// `joiner_interruption_rules` makes it; returns its URL and an EventBridge client.
async fn interruption_queue(w: &World) -> (String, aws_sdk_eventbridge::Client) {
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let cfg = sdk_config(&w.moto.endpoint()).await;
    let sqs = aws_sdk_sqs::Client::new(&cfg);
    let events = aws_sdk_eventbridge::Client::new(&cfg);
    let url = sqs
        .create_queue()
        .queue_name(joiner_agent_world::QUEUE)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let kind = joiner_agent::interruption::messages::Kind::CapacityReservationInterruption;
    events
        .put_rule()
        .name("agent-test-capacity-interruption")
        .event_pattern(kind.event_pattern().to_string())
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule("agent-test-capacity-interruption")
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("q")
                .arn(&arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    (url, events)
}

trait PutWarning {
    async fn put(&self, detail: serde_json::Value);
}

impl PutWarning for (String, aws_sdk_eventbridge::Client) {
    async fn put(&self, detail: serde_json::Value) {
        let out = self
            .1
            .put_events()
            .entries(
                aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                    .source("aws.ec2")
                    .detail_type("EC2 Capacity Reservation Instance Interruption Warning")
                    .detail(detail.to_string())
                    .build(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(out.failed_entry_count(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlays_reprice_launches_add_capacity_and_report_their_validation() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    // On-demand only, candidates at most 1.5x the cheapest, and a BestEffort minimum of
    // three categories where only two exist (there is no `x` type).
    w.node_pool(
        "general",
        json!({
            "template": {"spec": {
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "x"], "minValues": 3},
                ],
            }},
            "candidatePriceRatio": "1.5",
            "minValuesPolicy": "BestEffort",
        }),
    )
    .await;
    let overlays: Api<NodeOverlay> = Api::all(w.client.clone());
    let savings: NodeOverlay = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeOverlay",
        "metadata": {"name": "savings-plan"},
        "spec": {"weight": 10, "priceAdjustment": "-60%",
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}
    }))
    .unwrap();
    overlays
        .create(&PostParams::default(), &savings)
        .await
        .unwrap();
    let fuse: NodeOverlay = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeOverlay",
        "metadata": {"name": "fuse"},
        "spec": {"capacity": {"example.com/fuse": "1"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]}
    }))
    .unwrap();
    overlays
        .create(&PostParams::default(), &fuse)
        .await
        .unwrap();
    // An overlay the API server accepts but that does not validate (a 150 % discount).
    let bad: NodeOverlay = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeOverlay",
        "metadata": {"name": "too-generous"},
        "spec": {"priceAdjustment": "-150%"}
    }))
    .unwrap();
    overlays.create(&PostParams::default(), &bad).await.unwrap();
    let agent = w.agent(&["--batch-idle", "1s"]).await;

    // The invalid overlay says why on its status and changes nothing.
    let status = wait_for(
        "the invalid overlay's status",
        Duration::from_secs(30),
        || async {
            let o = overlays.get("too-generous").await.ok()?;
            let c = o
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "ValidationSucceeded")?;
            (c.status == "False").then_some(c.message)
        },
    )
    .await;
    assert!(status.contains("spec.priceAdjustment"), "{status}");

    // The discount makes m5 the cheapest general type: the claim lists it first and
    // CreateFleet launches it.
    w.deployment("web", 1, "1500m", "2Gi").await;
    let claim = wait_for(
        "the web claim launched",
        Duration::from_secs(60),
        || async { launched_claims(&w).await.into_iter().next() },
    )
    .await;
    let launched = label(&claim, labels::INSTANCE_TYPE).unwrap().to_string();
    assert!(launched.starts_with("m5."), "{launched}");
    // Its candidates: priced (with the overlays) at most 1.5x the first, in the agent's own
    // catalogue.
    let cloud = w.cloud().await;
    let class = w_class(&w, "default").await;
    let catalog = cloud.catalog(&class).await.unwrap();
    let ov = vec![Overlay::from_spec("savings-plan", &savings.spec)];
    let priced = overlay::apply(&catalog, &ov);
    let view = claim.view().unwrap();
    let types = view.instance_types.clone().unwrap();
    let od = |t: &str| priced.get(t).and_then(|it| it.on_demand_price()).unwrap();
    let first = od(&types[0]);
    assert!(types.len() > 1);
    // Past the bound, only a type kept for minValues: the one of a category no type within
    // the bound has.
    let category = |t: &str| priced.get(t).unwrap().labels[labels::INSTANCE_CATEGORY].clone();
    let (within, beyond): (Vec<&String>, Vec<&String>) = types
        .iter()
        .partition(|t| od(t) <= first * 1.5 * (1.0 + 1e-9));
    let within_categories: std::collections::BTreeSet<String> =
        within.iter().map(|t| category(t)).collect();
    let mut beyond_categories = std::collections::BTreeSet::new();
    for t in &beyond {
        let c = category(t);
        assert!(
            !within_categories.contains(&c) && beyond_categories.insert(c),
            "{t} at {} is past 1.5 x {first} and not kept for minValues: {types:?}",
            od(t)
        );
    }
    // BestEffort: three categories asked, two exist; the claim launched and says so.
    assert_eq!(
        claim
            .annotations()
            .get("karpenter.sh/nodeclaim-min-values-relaxed")
            .map(String::as_str),
        Some("true")
    );

    // A pod asking for the device the fuse overlay declares: planned onto m5.large. The
    // test plays the device plugin, advertising the device on the Node when it registers.
    w.deployment_with(
        "fuse",
        1,
        "100m",
        "128Mi",
        json!({}),
        json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi", "example.com/fuse": "1"},
                          "limits": {"example.com/fuse": "1"}}}]}),
    )
    .await;
    let fuse_claim = wait_for(
        "a claim for the fuse pod",
        Duration::from_secs(60),
        || async {
            w.claims()
                .await
                .into_iter()
                .find(|c| c.spec.resources.requests.contains_key("example.com/fuse"))
        },
    )
    .await;
    let types = fuse_claim.view().unwrap().instance_types.unwrap();
    assert_eq!(
        types,
        ["m5.large"],
        "only the type the overlay gave the device"
    );
    let node_name = wait_for("the fuse claim's Node", Duration::from_secs(90), || async {
        w.nodes().await.into_iter().find_map(|n| {
            (n.labels().get(labels::JOINER_NODECLAIM) == Some(&fuse_claim.name_any()))
                .then(|| n.name_any())
        })
    })
    .await;
    let nodes: Api<Node> = Api::all(w.client.clone());
    nodes
        .patch_status(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"example.com/fuse": "1"},
                "allocatable": {"example.com/fuse": "1"}}})),
        )
        .await
        .expect("the device plugin's advertisement");
    wait_for("the fuse pod Running", Duration::from_secs(90), || async {
        (w.running("fuse").await == 1).then_some(())
    })
    .await;
    assert!(w.iam_refused().is_empty(), "{:?}", w.iam_refused());
    agent.stop().await.unwrap();
}

async fn w_class(w: &World, name: &str) -> NodeClass {
    let api: Api<NodeClass> = Api::all(w.client.clone());
    api.get(name).await.unwrap()
}
