//! The interruption controller: consumes the interruption queue ([`queue`], behind the
//! [`crate::cloud::sqs::Queue`] trait) and acts on what EC2 says is going.
//!
//! For an instance that is going (Spot warning, scheduled change, stopping/terminating,
//! capacity-reservation interruption), it only marks and asks:
//! 1. an interrupted Spot offering goes into the insufficient-capacity cache, so its
//!    replacement lands elsewhere;
//! 2. the NodeClaim is disrupted ([`disrupted::disrupt`]): the `Disrupted` condition with
//!    the event as reason, the notice's end as deadline, and its termination requested with
//!    reason `Interrupted` (budgets do not apply).
//!
//! The rest is the one path every disruption takes: provisioning plans the node's pods in
//! its next batch and creates the replacements, termination holds the drain until they are
//! Initialized (or the notice runs short) and then cordons and evicts through the Eviction
//! API, so PDBs still pace it. A rebalance recommendation on a NodePool that opted in is
//! handled the same way, rate-limited per NodePool, and never for a claim already going, so
//! a replacement's own recommendation cannot start a loop faster than the limit allows.
//! Events are recorded on the Node and the NodeClaim for every interruption handled.

pub mod queue;

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::catalog::CapacityType;
use crate::cloud::aws::AwsSettings;
use crate::cloud::sqs::SqsQueue;
use crate::controllers::claim_termination::TerminationReason;
use crate::controllers::context::{Context, InterruptionSent};
use crate::controllers::disrupted::{self, Mark};
use crate::controllers::do_not_disrupt::{has_do_not_disrupt, pod_has_do_not_disrupt};
use crate::controllers::events::{self, Type};
use crate::controllers::launch_failure;
use crate::interruption::actions::{self, Action, Notice, RebalanceLimiter, SeenEvents};
use crate::interruption::messages::{Detail, Event};
use crate::labels;
use queue::{Consumer, Handler, Outcome, PollSettings, Received};

pub struct Interruptions {
    ctx: Arc<Context>,
    seen: Mutex<SeenEvents>,
    rebalance: Mutex<RebalanceLimiter>,
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
    pub fn new(ctx: Arc<Context>) -> Interruptions {
        Interruptions {
            ctx,
            // SQS retention is 300 s: a duplicate cannot arrive later than that.
            seen: Mutex::new(SeenEvents::new(600)),
            rebalance: Mutex::new(RebalanceLimiter::default()),
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
        let ctx = &self.ctx;
        if claim.metadata.deletion_timestamp.is_some() {
            // Already going (consolidation, drift, an earlier event): a notice shorter than
            // the deadline it has brings its drain forward.
            if matches!(action, Action::Replace { .. }) {
                let deadline = self.deadline(event);
                if disrupted::deadline(&claim).is_some_and(|d| deadline < d) {
                    disrupted::tighten(ctx, &claim, deadline).await?;
                }
            }
            return Ok(Acted::AlreadyGoing);
        }
        let (reason, mark, action_label) = match action {
            Action::Replace {
                reason,
                mark_offering_unavailable,
            } => (*reason, *mark_offering_unavailable, "replace"),
            Action::Rebalance => {
                let pool_name = label_of(&claim, node.as_deref(), labels::JOINER_NODEPOOL);
                if let Some(m) = self.rebalance_refusal(instance_id, &pool_name, node.as_deref()) {
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

        // 1. The offering is short: keep launches (the replacement's first) away from it
        // for the cache's TTL.
        if mark {
            self.mark_offering_unavailable(&claim, node.as_deref(), action_label);
        }

        // 2. Disrupt: provisioning replaces, termination drains once the replacement is up.
        let mut detail = describe(event, instance_id);
        let mut ended_as = TerminationReason::Interrupted;
        // An instance that ends at launch, before its Node registered, is a failed launch:
        // say why, and end the claim as one.
        if matches!(&event.detail, Detail::StateChange(d) if matches!(d.state.as_str(), "shutting-down" | "terminated"))
            && launch_failure::never_registered(&claim)
        {
            if let Some(m) = launch_failure::report(ctx, &claim, instance_id).await {
                detail = m;
                ended_as = TerminationReason::LaunchFailed;
            }
        }
        let deadline = self.deadline(event);
        self.disrupt(&claim, reason, ended_as, &detail, deadline, sent_at)
            .await?;
        let message = format!(
            "{detail}: replacement first, then drain (by {deadline}, less the pods' termination grace)"
        );
        self.record(&claim, node.as_deref(), Type::Warning, reason, &message)
            .await;
        tracing::info!(nodeclaim = %claim.name_any(), instance = instance_id, reason, %deadline, "interruption handled");
        Ok(Acted::Done(action_label))
    }

    /// Why a rebalance recommendation does not replace the instance (for the event it
    /// leaves instead), or None when it does: the NodePool must opt in, no do-not-disrupt
    /// may be set on the node or its pods, and the pool's rate limit must allow it.
    fn rebalance_refusal(
        &self,
        instance_id: &str,
        pool_name: &str,
        node: Option<&Node>,
    ) -> Option<String> {
        let ctx = &self.ctx;
        let pool = ctx.state.node_pools.get(pool_name);
        let policy = pool
            .as_ref()
            .and_then(|p| actions::rebalance_policy(p.annotations()));
        let blocked = node.is_some_and(|n| has_do_not_disrupt(&n.metadata))
            || node.is_some_and(|n| {
                ctx.state
                    .pods_on(&n.name_any())
                    .iter()
                    .any(|p| pod_has_do_not_disrupt(p))
            });
        match policy {
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
                    .try_take(pool_name, limit, unix_now());
                (!ok).then(|| format!(
                    "EC2 recommends rebalancing instance {instance_id}; not replaced now: NodePool {pool_name} reached its rebalance limit of {} per {}s",
                    limit.0, limit.1
                ))
            }
        }
    }

    /// Puts the instance's offering in the insufficient-capacity cache: a Spot or reserved
    /// one always, an on-demand one only when a rebalance replaces it.
    fn mark_offering_unavailable(
        &self,
        claim: &NodeClaim,
        node: Option<&Node>,
        action_label: &str,
    ) {
        let capacity_type = CapacityType::parse(&label_of(claim, node, labels::CAPACITY_TYPE));
        let itype = label_of(claim, node, labels::INSTANCE_TYPE);
        let zone = label_of(claim, node, labels::ZONE);
        if itype.is_empty() || zone.is_empty() {
            return;
        }
        if let Some(ct) = capacity_type.filter(|ct| {
            matches!(ct, CapacityType::Spot | CapacityType::Reserved)
                || action_label == "rebalance_replace"
        }) {
            self.ctx.cloud.mark_unavailable(ct, &itype, &zone);
        }
    }

    /// Marks the claim disrupted (termination reason `Interrupted`), remembering when the
    /// notice was sent so the replacement's arrival can be timed against it.
    async fn disrupt(
        &self,
        claim: &NodeClaim,
        reason: &'static str,
        ended_as: TerminationReason,
        detail: &str,
        deadline: jiff::Timestamp,
        sent_at: SystemTime,
    ) -> Result<(), String> {
        let ctx = &self.ctx;
        let claim_name = claim.name_any();
        ctx.interruption_sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                claim_name.clone(),
                InterruptionSent {
                    at: sent_at,
                    replacement_seen: false,
                },
            );
        let mark = Mark {
            reason: ended_as,
            condition_reason: reason,
            message: detail,
            deadline,
            replaced_by: None,
        };
        if let Err(e) = disrupted::disrupt(ctx, claim, mark).await {
            ctx.interruption_sent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&claim_name);
            return Err(e);
        }
        Ok(())
    }

    /// By when the instance's pods must be elsewhere, from the notice the event gives.
    fn deadline(&self, event: &Event) -> jiff::Timestamp {
        let now = jiff::Timestamp::now();
        let event_time: jiff::Timestamp = event.time.parse().unwrap_or(now);
        match actions::notice(event) {
            Notice::AfterEvent(s) => event_time
                .checked_add(jiff::SignedDuration::from_secs(s as i64))
                .unwrap_or(now),
            Notice::At(t) => t.parse().unwrap_or(now),
            Notice::Now => now,
            Notice::Unbounded => disrupted::voluntary_deadline(&self.ctx, now),
        }
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

/// A label of the claim, else of its node; empty when neither has it.
fn label_of(claim: &NodeClaim, node: Option<&Node>, key: &str) -> String {
    claim
        .labels()
        .get(key)
        .or_else(|| node.and_then(|n| n.labels().get(key)))
        .cloned()
        .unwrap_or_default()
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
    let settings = AwsSettings {
        region: Some(ctx.config.region.clone()),
        endpoint_url: ctx.config.aws_endpoint.clone(),
        max_attempts: None,
        credentials: ctx.config.aws_credentials.clone(),
    };
    let queue = Arc::new(SqsQueue::from_settings(&settings, &url).await);
    let metrics = ctx.metrics.interruption.clone();
    let consumer = Arc::new(Consumer::new(queue, PollSettings::default(), metrics));
    let handler = Arc::new(Interruptions::new(ctx.clone()));
    consumer.run(handler).await;
}
