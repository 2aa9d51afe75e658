//! `joiner_interruption_rules`: the five EventBridge rules that send EC2 interruption
//! events to the interruption queue (design.md §5), managed as one resource because they
//! only make sense together and share one target.
//!
//! - Names are derived from the cluster name (see [`naming`]), always ≤ 64 characters.
//! - Each kind has a boolean; turning one off deletes that rule in place.
//! - Drift: a deleted rule reads back as its kind turned off (so the plan turns it back
//!   on in place); all rules deleted reads as gone (the plan re-creates the resource); a
//!   target pointing elsewhere reads back as that queue ARN (the plan re-points it).
//! - Import by cluster name: `terraform import joiner_interruption_rules.x <cluster_name>`.

pub mod naming;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::aws::eventbridge::{self, RuleSpec};
use crate::context::ProviderContext;
use crate::model::interruption_rules::InterruptionRulesModel;
use crate::model::Model;
use crate::protocol::prelude::*;
use crate::validators;

use self::naming::rule_name;
use crate::policy::events::RuleKind;

pub struct InterruptionRules;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

fn deadline(timeout: Option<Duration>) -> Instant {
    Instant::now() + timeout.unwrap_or(DEFAULT_TIMEOUT)
}

/// EventBridge tags: up to 50, keys 1-128 and values 0-256 characters (as IAM's).
fn validate_rule_tags(v: &Value) -> Result<(), String> {
    validators::aws_tags(v)
}

fn spec(state: &InterruptionRulesModel, kind: RuleKind) -> RuleSpec {
    RuleSpec {
        name: rule_name(&state.cluster(), kind),
        description: kind.description().to_string(),
        event_pattern: kind.pattern().to_string(),
        target_arn: state.queue_arn.clone().unwrap_or_default(),
        tags: state.tags.clone().unwrap_or_default(),
    }
}

impl InterruptionRules {
    /// Puts every enabled rule and deletes the disabled ones (when there were rules
    /// before: `prior`); fills `rule_arns`.
    async fn converge(
        ctx: &ProviderContext,
        state: &mut InterruptionRulesModel,
        prior: Option<&InterruptionRulesModel>,
        deadline: Instant,
    ) -> Result<(), Diagnostics> {
        let eb = ctx.aws.eventbridge();
        let cluster = state.cluster();
        let enabled = state.enabled_kinds();
        let mut names = BTreeMap::new();
        let mut arns = BTreeMap::new();
        for kind in RuleKind::ALL {
            if enabled.contains(&kind) {
                let s = spec(state, kind);
                let arn = eventbridge::put_rule(&eb, &s, deadline).await?;
                names.insert(kind.attribute().to_string(), s.name);
                arns.insert(kind.attribute().to_string(), arn);
            } else if prior.is_some() {
                eventbridge::delete_rule(&eb, &rule_name(&cluster, kind), deadline).await?;
            }
        }
        state.id = Some(cluster);
        state.rule_names = Some(names);
        state.rule_arns = Some(arns);
        Ok(())
    }

    async fn delete_all(
        ctx: &ProviderContext,
        cluster: &str,
        deadline: Instant,
    ) -> Result<(), Diagnostics> {
        let eb = ctx.aws.eventbridge();
        for kind in RuleKind::ALL {
            eventbridge::delete_rule(&eb, &rule_name(cluster, kind), deadline).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Resource<ProviderContext> for InterruptionRules {
    fn type_name(&self) -> &'static str {
        "joiner_interruption_rules"
    }

    fn schema(&self) -> Schema {
        let mut s = Schema::new(0)
            .description("EventBridge rules on the default bus that send EC2 Spot interruption warnings, rebalance recommendations, instance state changes, AWS Health scheduled changes and capacity reservation interruptions to the interruption queue.")
            .attribute(Attribute::string("id").computed().description("The cluster name."))
            .attribute(
                Attribute::string("cluster_name")
                    .required()
                    .force_new()
                    .validate(validators::cluster_name)
                    .description("The EKS cluster; rule names are joiner-<cluster>-<kind>, shortened with a hash to 64 characters. Changing it replaces the rules."),
            )
            .attribute(
                Attribute::string("queue_arn")
                    .required()
                    .validate(validators::arn_of("sqs", ""))
                    .description("ARN of the interruption queue (joiner_interruption_queue.arn); updated in place."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(validate_rule_tags)
                    .description("Tags on every rule."),
            )
            .attribute(
                Attribute::string_map("rule_names")
                    .computed()
                    .description("Rule name per enabled kind (keys are the kind attributes)."),
            )
            .attribute(
                Attribute::string_map("rule_arns")
                    .computed()
                    .description("Rule ARN per enabled kind."),
            );
        for kind in RuleKind::ALL {
            s = s.attribute(
                Attribute::bool(kind.attribute())
                    .default(true)
                    .description(format!(
                        "Whether to send {} (default true); updated in place.",
                        &kind.description()["joiner: ".len()..]
                    )),
            );
        }
        s
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(DEFAULT_TIMEOUT),
            read: None,
            update: Some(DEFAULT_TIMEOUT),
            delete: Some(DEFAULT_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        let switches = InterruptionRulesModel::from_value(config).switches;
        let all_off = RuleKind::ALL
            .iter()
            .all(|k| switches.get(k).is_some_and(|on| on.is_known() && !**on));
        if all_off {
            d.error_at(
                "spot_interruption",
                "No interruption rule enabled",
                "at least one kind must be enabled; remove the resource instead of disabling every kind",
            );
        }
        d
    }

    /// Edits `plan.planned` in place: a model round trip would turn planned unknowns into
    /// nulls.
    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        if plan.planned.is_null() {
            return Ok(());
        }
        let planned = InterruptionRulesModel::from_value(&plan.planned);
        let Some(cluster) = planned.cluster_name.clone() else {
            return Ok(());
        };
        plan.planned.set_attr("id", Value::string(&cluster));
        // Every kind attribute is known at plan time (literal booleans in practice); when
        // one is not, the outputs wait for apply.
        if !planned.switches.values().all(|on| on.is_known()) {
            plan.set_unknown("rule_names");
            plan.set_unknown("rule_arns");
            return Ok(());
        }
        let enabled = planned.enabled_kinds();
        let names: BTreeMap<String, String> = enabled
            .iter()
            .map(|k| (k.attribute().to_string(), rule_name(&cluster, *k)))
            .collect();
        let mut arns = BTreeMap::new();
        for (attr, name) in &names {
            arns.insert(
                attr.clone(),
                ctx.arn("events", &format!("rule/{name}")).await?,
            );
        }
        plan.planned
            .set_attr("rule_names", Value::string_map(names));
        plan.planned.set_attr("rule_arns", Value::string_map(arns));
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = InterruptionRulesModel::from_value(&change.planned);
        if let Err(e) = Self::converge(ctx, &mut state, None, deadline).await {
            // Leave nothing behind: remove whichever rules were created before the failure.
            let cluster = state.cluster();
            if let Err(cleanup) = Self::delete_all(ctx, &cluster, deadline).await {
                tracing::error!(%cluster, error = %cleanup, "could not remove partially created rules");
                let mut partial = state.clone();
                partial.id = Some(cluster);
                return Err(e.with_partial_state(partial.to_value()));
            }
            return Err(e);
        }
        Ok(Applied::new(state.to_value()))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = deadline(None);
        let eb = ctx.aws.eventbridge();
        let mut state = InterruptionRulesModel::from_value(&req.state);
        let cluster = state
            .cluster_name
            .clone()
            .or_else(|| state.id.clone())
            .unwrap_or_default();
        let mut names = BTreeMap::new();
        let mut arns = BTreeMap::new();
        let mut queue: Option<String> = None;
        let mut tags: Option<BTreeMap<String, String>> = None;
        for kind in RuleKind::ALL {
            let name = rule_name(&cluster, kind);
            let remote = eventbridge::read_rule(&eb, &name, deadline).await?;
            // A rule that is missing, disabled, or matching something else is not doing its
            // job: report the kind as off so the plan turns it back on.
            let healthy = remote.as_ref().is_some_and(|r| {
                r.enabled
                    && crate::aws::iam::same_policy(&r.event_pattern, &kind.pattern().to_string())
            });
            state.switches.insert(kind, healthy.into());
            if let Some(r) = remote {
                if healthy {
                    names.insert(kind.attribute().to_string(), r.name.clone());
                    arns.insert(kind.attribute().to_string(), r.arn.clone());
                }
                if queue.is_none() || r.target_arn != state.queue_arn {
                    queue = Some(r.target_arn.clone().unwrap_or_default());
                }
                tags.get_or_insert(r.tags);
            }
        }
        if names.is_empty() {
            return Ok(None);
        }
        state.id = Some(cluster.clone());
        state.cluster_name = Some(cluster);
        state.queue_arn = queue;
        let tags = tags.unwrap_or_default();
        state.tags = if tags.is_empty() && state.tags.is_none() {
            None
        } else {
            Some(tags)
        };
        state.rule_names = Some(names);
        state.rule_arns = Some(arns);
        Ok(Some(Applied::new(state.to_value())))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = InterruptionRulesModel::from_value(&change.planned);
        let prior = InterruptionRulesModel::from_value(&change.prior);
        Self::converge(ctx, &mut state, Some(&prior), deadline).await?;
        Ok(Applied::new(state.to_value()))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let cluster = InterruptionRulesModel::from_value(&change.prior).cluster();
        Self::delete_all(ctx, &cluster, deadline(change.timeout)).await
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        if let Err(e) = validators::cluster_name(&Value::string(id)) {
            return Err(Diagnostic::error(
                "Invalid import ID",
                format!("joiner_interruption_rules is imported by cluster name, which {e}"),
            )
            .into());
        }
        Ok(Applied::new(
            InterruptionRulesModel {
                id: Some(id.to_string()),
                cluster_name: Some(id.to_string()),
                ..Default::default()
            }
            .to_value(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conforms;

    fn full() -> InterruptionRulesModel {
        let map = |v: &str| -> Option<BTreeMap<String, String>> {
            Some([("spot_interruption".to_string(), v.to_string())].into())
        };
        InterruptionRulesModel {
            id: Some("prod".into()),
            cluster_name: Some("prod".into()),
            queue_arn: Some("arn:aws:sqs:us-east-1:123456789012:q".into()),
            tags: Some([("team".to_string(), "platform".to_string())].into()),
            rule_names: map("joiner-prod-spot-interruption"),
            rule_arns: map(
                "arn:aws:events:us-east-1:123456789012:rule/joiner-prod-spot-interruption",
            ),
            switches: RuleKind::ALL
                .into_iter()
                .map(|k| (k, (k != RuleKind::Rebalance).into()))
                .collect(),
            timeouts: Value::object([
                ("create", Value::string("40m")),
                ("update", Value::string("1h")),
                ("delete", Value::string("20m")),
            ]),
        }
    }

    /// Every attribute the model writes is in the schema (the five switches included),
    /// every schema attribute is mapped, and what it writes reads back unchanged.
    #[test]
    fn model_matches_schema() {
        let r = InterruptionRules;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(
            InterruptionRulesModel::from_value(&full().to_value()),
            full()
        );
        let untagged = InterruptionRulesModel {
            tags: Some(BTreeMap::new()),
            ..Default::default()
        };
        for m in [InterruptionRulesModel::default(), untagged] {
            conforms(&m.to_value(), &schema.implied_type()).unwrap();
            assert_eq!(InterruptionRulesModel::from_value(&m.to_value()), m);
        }
    }

    /// A null switch is on (the default); turning every switch off is refused at the
    /// first one's path.
    #[test]
    fn switches() {
        assert_eq!(full().enabled_kinds().len(), 4);
        assert_eq!(InterruptionRulesModel::default().enabled_kinds().len(), 5);
        let all_off = Value::object(RuleKind::ALL.map(|k| (k.attribute(), Value::Bool(false))));
        let d = InterruptionRules.validate(&all_off);
        assert_eq!(d.items.len(), 1);
        assert_eq!(
            d.items[0].path,
            Some(AttributePath::new("spot_interruption"))
        );
        assert!(InterruptionRules
            .validate(&InterruptionRulesModel::default().to_value())
            .is_empty());
    }
}
