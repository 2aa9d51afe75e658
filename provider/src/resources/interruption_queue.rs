//! `joiner_interruption_queue`: the SQS queue the agent reads EC2 interruption events from.
//!
//! What it is, as Karpenter runs it: a standard queue keeping messages for 5 minutes
//! (interruption notices are worthless after that), encrypted at rest with SSE-SQS unless a
//! KMS key is given, and a policy that lets EventBridge (and SQS itself) send to it while
//! refusing any access that does not use TLS. The policy is not configurable: it is
//! re-applied whenever someone changes it out of band.

use crate::aws::error::AwsError;
use crate::aws::retry::{classify, RetryPolicy, Transience};
use crate::aws::sqs::{self, NewQueue, QueueUpdate};
use crate::context::ProviderContext;
use crate::model::interruption_queue::{InterruptionQueueModel, DEFAULT_RETENTION_SECONDS};
use crate::model::Model;
use crate::protocol::prelude::*;
use crate::protocol::timeouts::Timeouts;
use std::collections::BTreeMap;
use std::time::Duration;

pub struct InterruptionQueue;

const NAME_CHARS: &str = "letters, digits, hyphens (-) and underscores (_)";

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// SQS reports "no tags" as an empty map; keep whichever of null or `{}` the configuration
/// used, so that an untagged queue does not show a diff forever.
fn tags_like(
    remote: BTreeMap<String, String>,
    like: &Option<BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    if remote.is_empty() && like.is_none() {
        None
    } else {
        Some(remote)
    }
}

/// SQS stores the policy re-serialized (key order, spacing vary between calls); keep the
/// string Terraform already has when it means the same, so only real changes show.
fn policy_like(remote: Option<String>, like: Option<&str>) -> Option<String> {
    match (remote, like) {
        (Some(r), Some(l)) if sqs::same_policy(&r, l) => Some(l.to_string()),
        (r, _) => r,
    }
}

/// Reads the queue at `url` into a state shaped like `like` (see `tags_like` and
/// `policy_like`); `None` when it no longer exists.
async fn read_queue(
    ctx: &ProviderContext,
    url: &str,
    like: &InterruptionQueueModel,
) -> Result<Option<InterruptionQueueModel>, AwsError> {
    let client = ctx.aws.sqs();
    let Some(attrs) = sqs::queue_attributes(&client, url).await? else {
        return Ok(None);
    };
    let tags = sqs::tags(&client, url).await?;
    let name = attrs
        .arn
        .rsplit(':')
        .next()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .or_else(|| sqs::parse_queue_url(url).map(|(_, n)| n.to_string()))
        .unwrap_or_default();
    Ok(Some(InterruptionQueueModel {
        name: Some(name),
        message_retention_seconds: Some(attrs.message_retention_seconds),
        kms_key_id: attrs.kms_key_id,
        tags: tags_like(tags, &like.tags),
        arn: Some(attrs.arn),
        url: Some(url.to_string()),
        policy: policy_like(attrs.policy, like.policy.as_deref()),
        timeouts: Value::Null,
    }))
}

/// SQS refuses a queue name for 60 s after a queue of that name was deleted (a replaced or
/// drifted queue hits this); that is worth waiting for, within the create timeout.
fn create_retry_class(e: &AwsError) -> Transience {
    if sqs::is_deleted_recently(e) {
        Transience::Transient
    } else {
        classify(e)
    }
}

#[async_trait]
impl Resource<ProviderContext> for InterruptionQueue {
    fn type_name(&self) -> &'static str {
        "joiner_interruption_queue"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description(
                "The SQS queue EventBridge delivers EC2 Spot interruption, rebalance, \
                 scheduled-change and state-change events to, and the joiner agent reads. \
                 Encrypted at rest and TLS-only.",
            )
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .description("Queue name: 1 to 80 letters, digits, `-` or `_`. Changing it replaces the queue.")
                    .validate(validators::string_length(1, 80))
                    .validate(validators::string_chars(NAME_CHARS, name_char)),
            )
            .attribute(
                Attribute::number("message_retention_seconds")
                    .default(DEFAULT_RETENTION_SECONDS)
                    .description("How long SQS keeps an unread message, 60 to 1209600 seconds (default 300).")
                    .validate(validators::int_between(60, 1_209_600)),
            )
            .attribute(
                Attribute::string("kms_key_id")
                    .optional()
                    .description("KMS key (id, alias or ARN) for SSE-KMS. Default: SQS-managed encryption (SSE-SQS). With a customer managed key, give its ARN to joiner_agent_role.queue_kms_key_arn, and let the key policy allow events.amazonaws.com kms:GenerateDataKey and kms:Decrypt, or EventBridge cannot deliver to the queue.")
                    .validate(validators::string_length(1, 2048)),
            )
            .attribute(Attribute::string_map("tags").optional().description("Tags on the queue."))
            .attribute(Attribute::string("arn").computed().description("Queue ARN (for EventBridge targets)."))
            .attribute(Attribute::string("url").computed().description("Queue URL (for the agent)."))
            .attribute(
                Attribute::string("policy")
                    .computed()
                    .description("The queue policy joiner maintains (JSON)."),
            )
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(Duration::from_secs(120)),
            ..Timeouts::default()
        })
    }

    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        // Put the policy back if it was changed out of band (an in-place update).
        if plan.is_create() || plan.is_replace() {
            return Ok(());
        }
        let prior = InterruptionQueueModel::from_value(&plan.prior);
        if let Some(arn) = &prior.arn {
            let want = sqs::interruption_policy(arn);
            let have = prior.policy.as_deref().unwrap_or_default();
            if !sqs::same_policy(have, &want) {
                // Edited in place: a model round trip would drop unknown planned inputs.
                plan.planned.set_attr("policy", Value::string(want));
            }
        }
        let _ = ctx;
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let p = InterruptionQueueModel::from_value(&change.planned);
        let name = p.name.clone().unwrap_or_default();
        let arn = ctx.arn("sqs", &name).await?;
        let tags = p.tag_map();
        let q = NewQueue {
            name: &name,
            message_retention_seconds: p.retention(),
            encryption: p.encryption(),
            policy: sqs::interruption_policy(&arn),
            tags: &tags,
        };
        let client = ctx.aws.sqs();
        let deadline =
            tokio::time::Instant::now() + change.timeout.unwrap_or(Duration::from_secs(120));
        let policy = RetryPolicy {
            classify: create_retry_class,
            ..RetryPolicy::default()
        };
        let url = policy
            .run(deadline, || sqs::create_queue(&client, &q))
            .await?;
        match read_queue(ctx, &url, &p).await? {
            Some(state) => Ok(Applied::new(state.to_value())),
            None => Err(Diagnostic::error(
                "Queue vanished after creation",
                format!(
                    "sqs:CreateQueue returned {url}, but sqs:GetQueueAttributes cannot find it"
                ),
            )
            .into()),
        }
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let state = InterruptionQueueModel::from_value(&req.state);
        let Some(url) = &state.url else {
            return Ok(None);
        };
        Ok(read_queue(ctx, url, &state)
            .await?
            .map(|q| Applied::new(q.to_value())))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let prior = InterruptionQueueModel::from_value(&change.prior);
        let planned = InterruptionQueueModel::from_value(&change.planned);
        let url = prior.url.clone().unwrap_or_default();
        let client = ctx.aws.sqs();
        let mut u = QueueUpdate::default();
        if prior.retention() != planned.retention() {
            u.message_retention_seconds = Some(planned.retention());
        }
        if prior.kms_key_id != planned.kms_key_id {
            u.encryption = Some(planned.encryption());
        }
        // The policy goes with every attribute change: it is idempotent, and some SQS
        // implementations (the emulator) drop a policy not restated in the same call.
        let policy = planned
            .policy
            .clone()
            .or_else(|| prior.arn.as_deref().map(sqs::interruption_policy));
        if u != QueueUpdate::default() || prior.policy != planned.policy {
            u.policy = policy;
        }
        sqs::update_queue(&client, &url, &u).await?;
        if prior.tags != planned.tags {
            let have = sqs::tags(&client, &url).await?;
            sqs::set_tags(&client, &url, &have, &planned.tag_map()).await?;
        }
        match read_queue(ctx, &url, &planned).await? {
            Some(state) => Ok(Applied::new(state.to_value())),
            None => Err(Diagnostic::error(
                "Queue deleted during update",
                format!("{url} disappeared while it was being updated; run terraform apply again to recreate it"),
            )
            .into()),
        }
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        if let Some(url) = InterruptionQueueModel::from_value(&change.prior).url {
            sqs::delete_queue(&ctx.aws.sqs(), &url).await?;
        }
        Ok(())
    }

    /// Imports by queue name (in the provider's account and region) or by queue URL.
    async fn import(&self, ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        let client = ctx.aws.sqs();
        let (name, owner) = match sqs::parse_queue_url(id) {
            Some((account, name)) => (name, Some(account)),
            None if !id.is_empty() && id.chars().all(name_char) => (id, None),
            None => {
                return Err(Diagnostic::error(
                    "Invalid import id",
                    format!("{id:?} is neither a queue name ({NAME_CHARS}) nor a queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)"),
                )
                .into())
            }
        };
        match sqs::queue_url(&client, name, owner).await? {
            Some(url) => Ok(Applied::new(
                InterruptionQueueModel {
                    name: Some(name.to_string()),
                    url: Some(url),
                    ..Default::default()
                }
                .to_value(),
            )),
            None => Err(Diagnostic::error(
                "Queue not found",
                format!(
                    "no SQS queue named {name:?} in {} (account {})",
                    ctx.region,
                    owner
                        .map(str::to_string)
                        .unwrap_or_else(|| "of the provider's credentials".into())
                ),
            )
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::sqs::Encryption;
    use crate::protocol::schema::run_validators;

    fn errors_for(config: Value) -> Vec<String> {
        let mut d = Diagnostics::new();
        run_validators(
            &InterruptionQueue.schema().block,
            &config,
            &AttributePath::root(),
            &mut d,
        );
        d.iter()
            .map(|d| format!("{}: {}", d.path.as_ref().unwrap(), d.detail))
            .collect()
    }

    #[test]
    fn bad_names_and_retention_are_refused_with_their_path() {
        let e = errors_for(Value::object([("name", Value::string(""))]));
        assert_eq!(
            e,
            vec!["name: must be 1 to 80 characters long, got 0 characters"]
        );
        let e = errors_for(Value::object([("name", Value::string("has spaces"))]));
        assert!(e[0].starts_with("name: may contain only letters"), "{e:?}");
        let e = errors_for(Value::object([("name", Value::string("x".repeat(81)))]));
        assert!(e[0].contains("80"), "{e:?}");
        for bad in [59, 1_209_601] {
            let e = errors_for(Value::object([
                ("name", Value::string("ok")),
                ("message_retention_seconds", Value::int(bad)),
            ]));
            assert!(
                e[0].starts_with("message_retention_seconds: must be between 60 and 1209600"),
                "{e:?}"
            );
        }
        assert!(errors_for(Value::object([("name", Value::string("ok_Name-1"))])).is_empty());
        // Unknown values are checked later, once known.
        assert!(errors_for(Value::object([("name", Value::Unknown)])).is_empty());
    }

    #[test]
    fn untagged_queues_keep_null_tags() {
        let none = BTreeMap::new();
        assert_eq!(tags_like(none.clone(), &None), None);
        assert_eq!(tags_like(none.clone(), &Some(none.clone())), Some(none));
        let some: BTreeMap<_, _> = [("a".to_string(), "b".to_string())].into();
        assert_eq!(tags_like(some.clone(), &None), Some(some));
    }

    /// Every attribute the model writes is in the schema and every schema attribute is
    /// mapped; null and `{}` tags survive the round trip as they are.
    #[test]
    fn model_matches_schema() {
        let r = InterruptionQueue;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        let full = InterruptionQueueModel {
            name: Some("q".into()),
            message_retention_seconds: Some(600),
            kms_key_id: Some("alias/k".into()),
            tags: Some([("a".to_string(), "b".to_string())].into()),
            arn: Some("arn:aws:sqs:us-east-1:1:q".into()),
            url: Some("https://sqs.us-east-1.amazonaws.com/1/q".into()),
            policy: Some("{}".into()),
            timeouts: Value::object([("create", Value::string("2m"))]),
        };
        crate::model::conforms(&full.to_value(), &schema.implied_type()).unwrap();
        assert_eq!(InterruptionQueueModel::from_value(&full.to_value()), full);
        for tags in [None, Some(BTreeMap::new())] {
            let m = InterruptionQueueModel {
                tags,
                ..Default::default()
            };
            assert_eq!(InterruptionQueueModel::from_value(&m.to_value()), m);
        }
    }

    #[test]
    fn reformatted_policies_keep_the_known_string() {
        let ours = sqs::interruption_policy("arn:aws:sqs:us-east-1:1:q");
        let reformatted = serde_json::to_string_pretty(
            &serde_json::from_str::<serde_json::Value>(&ours).unwrap(),
        )
        .unwrap();
        assert_eq!(
            policy_like(Some(reformatted), Some(&ours)),
            Some(ours.clone())
        );
        let other = sqs::interruption_policy("arn:aws:sqs:us-east-1:1:other");
        assert_eq!(policy_like(Some(other.clone()), Some(&ours)), Some(other));
        assert_eq!(policy_like(None, Some(&ours)), None);
    }

    #[test]
    fn encryption_defaults_to_sse_sqs() {
        let from =
            |v: Value| InterruptionQueueModel::from_value(&Value::object([("kms_key_id", v)]));
        assert_eq!(from(Value::Null).encryption(), Encryption::SqsManaged);
        assert_eq!(
            from(Value::string("alias/k")).encryption(),
            Encryption::Kms("alias/k".into())
        );
        assert_eq!(from(Value::Null).retention(), 300);
    }
}
