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

pub mod kinds;
pub mod naming;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::aws::eventbridge::{self, RuleSpec};
use crate::protocol::prelude::*;
use crate::provider::ProviderContext;

use self::kinds::RuleKind;
use self::naming::rule_name;
use super::fargate_role::validate_cluster_name;
use super::iam_role::{arn_of, validate_tags};

pub struct InterruptionRules;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

fn deadline(timeout: Option<Duration>) -> Instant {
    Instant::now() + timeout.unwrap_or(DEFAULT_TIMEOUT)
}

/// EventBridge tags: up to 50, keys 1-128 and values 0-256 characters (as IAM's).
fn validate_rule_tags(v: &Value) -> Result<(), String> {
    validate_tags(v)
}

fn enabled_kinds(v: &Value) -> Vec<RuleKind> {
    RuleKind::ALL
        .into_iter()
        .filter(|k| v.get(k.attribute()).as_bool().unwrap_or(true))
        .collect()
}

fn spec(state: &Value, kind: RuleKind) -> RuleSpec {
    let cluster = state.get("cluster_name").as_str().unwrap_or_default();
    RuleSpec {
        name: rule_name(cluster, kind),
        description: kind.description().to_string(),
        event_pattern: kind.pattern().to_string(),
        target_arn: state
            .get("queue_arn")
            .as_str()
            .unwrap_or_default()
            .to_string(),
        tags: state.get("tags").as_string_map(),
    }
}

impl InterruptionRules {
    /// Puts every enabled rule and deletes the disabled ones; fills `rule_arns`.
    async fn converge(
        ctx: &ProviderContext,
        state: &mut Value,
        prior: Option<&Value>,
        deadline: Instant,
    ) -> Result<(), Diagnostics> {
        let eb = ctx.aws.eventbridge();
        let cluster = state
            .get("cluster_name")
            .as_str()
            .unwrap_or_default()
            .to_string();
        let enabled = enabled_kinds(state);
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
        state.set_attr("id", Value::string(&cluster));
        state.set_attr("rule_names", Value::string_map(names));
        state.set_attr("rule_arns", Value::string_map(arns));
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
                    .validate(validate_cluster_name)
                    .description("The EKS cluster; rule names are joiner-<cluster>-<kind>, shortened with a hash to 64 characters. Changing it replaces the rules."),
            )
            .attribute(
                Attribute::string("queue_arn")
                    .required()
                    .validate(arn_of("sqs", ""))
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
        let all_off = RuleKind::ALL
            .iter()
            .all(|k| config.get(k.attribute()).as_bool() == Some(false));
        if all_off {
            d.error_at(
                "spot_interruption",
                "No interruption rule enabled",
                "at least one kind must be enabled; remove the resource instead of disabling every kind",
            );
        }
        d
    }

    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        if plan.planned.is_null() {
            return Ok(());
        }
        let Some(cluster) = plan
            .planned
            .get("cluster_name")
            .as_str()
            .map(str::to_string)
        else {
            return Ok(());
        };
        plan.planned.set_attr("id", Value::string(&cluster));
        // Every kind attribute is known at plan time (literal booleans in practice); when
        // one is not, the outputs wait for apply.
        let kinds_known = RuleKind::ALL
            .iter()
            .all(|k| plan.planned.get(k.attribute()).is_known());
        if !kinds_known {
            plan.set_unknown("rule_names");
            plan.set_unknown("rule_arns");
            return Ok(());
        }
        let enabled = enabled_kinds(&plan.planned);
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
        let mut state = change.planned.clone();
        if let Err(e) = Self::converge(ctx, &mut state, None, deadline).await {
            // Leave nothing behind: remove whichever rules were created before the failure.
            let cluster = state
                .get("cluster_name")
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Err(cleanup) = Self::delete_all(ctx, &cluster, deadline).await {
                tracing::error!(%cluster, error = %cleanup, "could not remove partially created rules");
                let mut partial = state.clone();
                partial.set_attr("id", Value::string(&cluster));
                return Err(e.with_partial_state(partial));
            }
            return Err(e);
        }
        Ok(Applied::new(state))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = deadline(None);
        let eb = ctx.aws.eventbridge();
        let mut state = req.state.clone();
        let cluster = state
            .get("cluster_name")
            .as_str()
            .or(state.get("id").as_str())
            .unwrap_or_default()
            .to_string();
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
            state.set_attr(kind.attribute(), Value::Bool(healthy));
            if let Some(r) = remote {
                if healthy {
                    names.insert(kind.attribute().to_string(), r.name.clone());
                    arns.insert(kind.attribute().to_string(), r.arn.clone());
                }
                if queue.is_none() || r.target_arn.as_deref() != state.get("queue_arn").as_str() {
                    queue = Some(r.target_arn.clone().unwrap_or_default());
                }
                tags.get_or_insert(r.tags);
            }
        }
        if names.is_empty() {
            return Ok(None);
        }
        state.set_attr("id", Value::string(&cluster));
        state.set_attr("cluster_name", Value::string(&cluster));
        state.set_attr("queue_arn", Value::opt_string(queue));
        let tags = tags.unwrap_or_default();
        state.set_attr(
            "tags",
            if tags.is_empty() && state.get("tags").is_null() {
                Value::Null
            } else {
                Value::string_map(tags)
            },
        );
        state.set_attr("rule_names", Value::string_map(names));
        state.set_attr("rule_arns", Value::string_map(arns));
        Ok(Some(Applied::new(state)))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = change.planned.clone();
        Self::converge(ctx, &mut state, Some(&change.prior), deadline).await?;
        Ok(Applied::new(state))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let cluster = change
            .prior
            .get("cluster_name")
            .as_str()
            .unwrap_or_default()
            .to_string();
        Self::delete_all(ctx, &cluster, deadline(change.timeout)).await
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        if let Err(e) = validate_cluster_name(&Value::string(id)) {
            return Err(Diagnostic::error(
                "Invalid import ID",
                format!("joiner_interruption_rules is imported by cluster name, which {e}"),
            )
            .into());
        }
        Ok(Applied::new(Value::object([
            ("id", Value::string(id)),
            ("cluster_name", Value::string(id)),
        ])))
    }
}
