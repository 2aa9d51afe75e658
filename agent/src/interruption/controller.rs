//! The interruption controller: acts on the events [`super::queue`] receives.
//!
//! For an instance that is going (Spot warning, scheduled change, stopping/terminating,
//! capacity-reservation interruption), in this order:
//! 1. the NodeClaim gets the `Disrupted` condition (reason = the event);
//! 2. an interrupted Spot offering goes into the insufficient-capacity cache;
//! 3. replacement capacity is launched **first**: the node's pods are planned as pending by
//!    the scheduler, with the node gone and the doomed offering excluded, and the planned
//!    NodeClaims are created (the lifecycle loop launches them at once);
//! 4. the node is cordoned (the message→cordon latency is measured here) and the claim's
//!    termination is requested with reason `Interrupted` (budgets do not apply; the
//!    termination path drains through the Eviction API, so PDBs still pace the drain).
//!
//! Planning is serialised, and what one plan placed is remembered for a few minutes
//! ([`Ledger`]), so twenty warnings in one burst do not all count the same free capacity.
//! Events are recorded on the Node and the NodeClaim for every interruption handled.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use super::actions::{self, Action, RebalanceLimiter, SeenEvents};
use super::messages::{Detail, Event};
use super::metrics::InterruptionMetrics;
use super::queue::{Consumer, Handler, Outcome, PollSettings, Received};
use crate::api::NodeClaim;
use crate::catalog::CapacityType;
use crate::cloud::aws::{load_config, AwsSettings};
use crate::controllers::events::{self, Type};
use crate::controllers::provisioning::{input, nodeclaims};
use crate::controllers::termination::drain::cordon;
use crate::controllers::termination::{has_do_not_disrupt, pod_has_do_not_disrupt};
use crate::controllers::{conditions, lifecycle, request_termination, Context, TerminationReason};
use crate::labels;
use crate::scheduler::{self, BoundPod, Target};

/// How long a replacement plan's placements are remembered.
const LEDGER_TTL: Duration = Duration::from_secs(180);

/// Capacity already promised to pods of interrupted nodes, not yet visible in the cluster.
#[derive(Default)]
pub struct Ledger {
    entries: Vec<(Instant, Target, BoundPod)>,
}

impl Ledger {
    fn fold_into(&mut self, input: &mut scheduler::Input) {
        self.entries.retain(|(t, _, _)| t.elapsed() < LEDGER_TTL);
        for (_, target, pod) in &self.entries {
            match target {
                Target::Node(n) => {
                    if let Some(node) = input.nodes.iter_mut().find(|x| &x.name == n) {
                        node.pods.push(pod.clone());
                    }
                }
                Target::InFlight(c) => {
                    if let Some(claim) = input.in_flight.iter_mut().find(|x| &x.name == c) {
                        claim.pods.push(pod.clone());
                    }
                }
            }
        }
    }
}

/// Pods that move when the node goes (not DaemonSet, mirror or finished pods).
pub fn reschedulable(p: &Pod) -> bool {
    let ds = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = p.annotations().contains_key("kubernetes.io/config.mirror");
    let done = matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    );
    !(ds || mirror || done || p.metadata.deletion_timestamp.is_some())
}

pub struct Interruptions {
    ctx: Arc<Context>,
    metrics: Arc<InterruptionMetrics>,
    seen: Mutex<SeenEvents>,
    rebalance: Mutex<RebalanceLimiter>,
    planning: tokio::sync::Mutex<Ledger>,
}

enum Acted {
    NotOurs,
    AlreadyGoing,
    Done(&'static str),
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Interruptions {
    pub fn new(ctx: Arc<Context>, metrics: Arc<InterruptionMetrics>) -> Interruptions {
        Interruptions {
            ctx,
            metrics,
            // SQS retention is 300 s: a duplicate cannot arrive later than that.
            seen: Mutex::new(SeenEvents::new(600)),
            rebalance: Mutex::new(RebalanceLimiter::default()),
            planning: tokio::sync::Mutex::new(Ledger::default()),
        }
    }

    /// The claim (and node) for an instance, if the instance is one of ours.
    fn find(&self, instance_id: &str) -> Option<(Arc<NodeClaim>, Option<Arc<Node>>)> {
        let suffix = format!("/{instance_id}");
        let state = &self.ctx.state;
        let claim = state
            .node_claims
            .list()
            .into_iter()
            .find(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|p| p.ends_with(&suffix))
            })
            .or_else(|| {
                let node = state.nodes.find(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .is_some_and(|p| p.ends_with(&suffix))
                })?;
                state.claim_for_node(&node)
            })?;
        let node = state.node_for_claim(&claim);
        Some((claim, node))
    }

    async fn act(
        &self,
        event: &Event,
        instance_id: &str,
        action: &Action,
        sent_at: SystemTime,
    ) -> Result<Acted, String> {
        let Some((claim, node)) = self.find(instance_id) else {
            return Ok(Acted::NotOurs);
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(Acted::AlreadyGoing);
        }
        let ctx = &self.ctx;
        let claim_name = claim.name_any();
        let claim_labels = claim.labels().clone();
        let node_labels = node
            .as_ref()
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        let label = |k: &str| {
            claim_labels
                .get(k)
                .or_else(|| node_labels.get(k))
                .cloned()
                .unwrap_or_default()
        };
        let pool_name = label(labels::JOINER_NODEPOOL);
        let (reason, mark, action_label) = match action {
            Action::Replace {
                reason,
                mark_offering_unavailable,
            } => (*reason, *mark_offering_unavailable, "replace"),
            Action::Rebalance => {
                let pool = ctx.state.node_pools.get(&pool_name);
                let policy = pool
                    .as_ref()
                    .and_then(|p| actions::rebalance_policy(p.annotations()));
                let blocked = node
                    .as_ref()
                    .is_some_and(|n| has_do_not_disrupt(&n.metadata))
                    || node.as_ref().is_some_and(|n| {
                        ctx.state
                            .pods_on(&n.name_any())
                            .iter()
                            .any(|p| pod_has_do_not_disrupt(p))
                    });
                let message = match policy {
                    None => Some(format!(
                        "EC2 recommends rebalancing instance {instance_id}; no action (NodePool {pool_name} does not set {}: replace)",
                        actions::REBALANCE_ANNOTATION
                    )),
                    Some(_) if blocked => Some(format!(
                        "EC2 recommends rebalancing instance {instance_id}; not replaced: do-not-disrupt is set"
                    )),
                    Some(limit) => {
                        let ok = self
                            .rebalance
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .try_take(&pool_name, limit, unix_now());
                        (!ok).then(|| format!(
                            "EC2 recommends rebalancing instance {instance_id}; not replaced now: NodePool {pool_name} reached its rebalance limit of {} per {}s",
                            limit.0, limit.1
                        ))
                    }
                };
                if let Some(m) = message {
                    self.record(
                        &claim,
                        node.as_deref(),
                        Type::Normal,
                        "RebalanceRecommendation",
                        &m,
                    )
                    .await;
                    return Ok(Acted::Done("event_only"));
                }
                // Never onto the offering that just got the recommendation.
                ("RebalanceRecommendation", true, "rebalance_replace")
            }
            Action::Ignore(r) => return Err(format!("ignored event reached act(): {r}")),
        };

        // 1. Disrupted condition.
        let mut conds = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let detail = describe(event, instance_id);
        conditions::set(
            &mut conds,
            actions::DISRUPTED_CONDITION,
            true,
            reason,
            &detail,
        );
        if let Err(e) =
            lifecycle::patch_status(ctx, &claim_name, serde_json::json!({"conditions": conds}))
                .await
        {
            return Err(format!(
                "marking NodeClaim {claim_name} disrupted (nodeclaims/status patch): {e}"
            ));
        }

        // 2. The offering is short: keep launches away from it for the cache's TTL.
        let capacity_type = CapacityType::parse(&label(labels::CAPACITY_TYPE));
        let (itype, zone) = (label(labels::INSTANCE_TYPE), label(labels::ZONE));
        if mark && !itype.is_empty() && !zone.is_empty() {
            if let Some(ct) = capacity_type
                .filter(|ct| *ct == CapacityType::Spot || action_label == "rebalance_replace")
            {
                ctx.cloud.mark_unavailable(ct, &itype, &zone);
            }
        }

        // 3. Replacement first.
        let replacements = match &node {
            Some(n) => self.launch_replacements(n).await?,
            None => vec![],
        };

        // 4. Cordon, then the termination path drains and terminates.
        if let Some(n) = &node {
            if let Err(e) = cordon(ctx, n).await {
                ctx.metrics.kube_error("nodes patch (cordon)", &e);
                return Err(format!(
                    "cordoning node {} (nodes patch): {e}",
                    n.name_any()
                ));
            }
            let latency = SystemTime::now()
                .duration_since(sent_at)
                .unwrap_or_default()
                .as_secs_f64();
            self.metrics.message_to_cordon.observe(latency);
        }
        if let Err(e) = request_termination(ctx, &claim_name, TerminationReason::Interrupted).await
        {
            ctx.metrics.kube_error("nodeclaims delete", &e);
            return Err(format!(
                "requesting termination of NodeClaim {claim_name}: {e}"
            ));
        }
        let message = if replacements.is_empty() {
            format!("{detail}: no replacement needed for its pods; cordoned and draining")
        } else {
            format!(
                "{detail}: replacement NodeClaim(s) {} launched first; cordoned and draining",
                replacements.join(", ")
            )
        };
        self.record(&claim, node.as_deref(), Type::Warning, reason, &message)
            .await;
        tracing::info!(nodeclaim = %claim_name, instance = instance_id, reason, replacements = ?replacements, "interruption handled");
        Ok(Acted::Done(action_label))
    }

    /// Plans the node's pods with the node gone and creates the NodeClaims the plan needs.
    async fn launch_replacements(&self, node: &Node) -> Result<Vec<String>, String> {
        let ctx = &self.ctx;
        let node_name = node.name_any();
        let pods: Vec<Arc<Pod>> = ctx
            .state
            .pods_on(&node_name)
            .into_iter()
            .filter(|p| reschedulable(p))
            .collect();
        let mut ledger = self.planning.lock().await;
        let round = input::build(ctx).await;
        let mut sched = round.input;
        sched.pods = pods
            .iter()
            .filter_map(|p| scheduler::convert::pod(p).ok())
            .collect();
        if sched.pods.is_empty() {
            return Ok(vec![]);
        }
        sched.nodes.retain(|n| n.name != node_name);
        ledger.fold_into(&mut sched);
        let plan = scheduler::schedule(&round.catalog, &sched);
        let mut created = Vec::new();
        for nc in &plan.new_claims {
            let Some(pool) = round.pools.get(&nc.nodepool) else {
                continue;
            };
            let mut obj = nodeclaims::build(nc, pool);
            if let Some(class) = ctx
                .state
                .node_classes
                .get(&pool.spec.template.spec.node_class_ref.name)
            {
                let ann = obj
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                ann.extend(crate::disruption::drift::stamp(&pool.spec, &class.spec));
            }
            match nodeclaims::create(ctx, &obj).await {
                Ok(c) => {
                    let name = c.name_any();
                    for &i in &nc.pods {
                        ledger.entries.push((
                            Instant::now(),
                            Target::InFlight(name.clone()),
                            BoundPod::from_pod(&sched.pods[i]),
                        ));
                    }
                    ctx.claims.add(&name);
                    self.metrics.replacements.inc();
                    created.push(name);
                }
                Err(e) => {
                    ctx.metrics.kube_error("nodeclaims create", &e);
                    return Err(format!(
                        "creating a replacement NodeClaim for node {node_name}: {e}"
                    ));
                }
            }
        }
        for p in &plan.placements {
            ledger.entries.push((
                Instant::now(),
                p.target.clone(),
                BoundPod::from_pod(&sched.pods[p.pod]),
            ));
        }
        if !plan.unschedulable.is_empty() {
            tracing::warn!(node = %node_name, pods = plan.unschedulable.len(), "some pods of an interrupted node fit no NodePool; they will wait as pending");
        }
        Ok(created)
    }

    async fn record(
        &self,
        claim: &NodeClaim,
        node: Option<&Node>,
        ty: Type,
        reason: &str,
        message: &str,
    ) {
        let ev = &self.ctx.events;
        ev.publish(&events::reference(claim), ty, reason, message)
            .await;
        if let Some(n) = node {
            ev.publish(&events::reference(n), ty, reason, message).await;
        }
    }
}

/// A one-line description of the event for conditions and Events.
fn describe(event: &Event, instance_id: &str) -> String {
    match &event.detail {
        Detail::SpotInterruption(d) => format!(
            "EC2 Spot interruption warning for instance {instance_id} (action {})",
            d.instance_action
        ),
        Detail::Rebalance(_) => format!("EC2 rebalance recommendation for instance {instance_id}"),
        Detail::StateChange(d) => format!("EC2 instance {instance_id} is {}", d.state),
        Detail::ScheduledChange(d) => format!(
            "AWS Health scheduled change {} for instance {instance_id}",
            d.event_type_code
        ),
        Detail::CapacityReservationInterruption(_) => {
            format!("EC2 capacity reservation interruption for instance {instance_id}")
        }
    }
}

#[async_trait::async_trait]
impl Handler for Interruptions {
    async fn handle(&self, received: Received) -> Result<Outcome, String> {
        let event = &received.event;
        let action = actions::action_for(event);
        if let Action::Ignore(reason) = action {
            return Ok(Outcome::Dropped(reason));
        }
        if !self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first(&event.id, unix_now())
        {
            return Ok(Outcome::Dropped("duplicate"));
        }
        let mut done: Option<&'static str> = None;
        let mut going = false;
        for instance in event.instance_ids() {
            match self.act(event, instance, &action, received.sent_at).await {
                Ok(Acted::Done(a)) => done = Some(a),
                Ok(Acted::AlreadyGoing) => going = true,
                Ok(Acted::NotOurs) => {}
                Err(e) => {
                    self.seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .forget(&event.id);
                    return Err(e);
                }
            }
        }
        Ok(match (done, going) {
            (Some(a), _) => Outcome::Acted(a),
            (None, true) => Outcome::Dropped("duplicate"),
            (None, false) => Outcome::Dropped("not_ours"),
        })
    }
}

/// The controller loop (leader only): consumes the queue when `--queue-url` is set.
pub async fn run(ctx: Arc<Context>) {
    let Some(url) = ctx.config.queue_url.clone().filter(|u| !u.is_empty()) else {
        tracing::info!("no --queue-url: interruption handling is off");
        std::future::pending::<()>().await;
        return;
    };
    let sdk = load_config(&AwsSettings {
        region: Some(ctx.config.region.clone()),
        endpoint_url: ctx.config.aws_endpoint.clone(),
        max_attempts: None,
        credentials: ctx.config.aws_credentials.clone(),
    })
    .await;
    let metrics = ctx.metrics.interruption.clone();
    let consumer = Arc::new(Consumer::new(
        aws_sdk_sqs::Client::new(&sdk),
        &url,
        PollSettings::default(),
        metrics.clone(),
    ));
    let handler = Arc::new(Interruptions::new(ctx.clone(), metrics));
    consumer.run(handler).await;
}
