//! `joiner_interruption_queue`: the SQS queue the agent reads EC2 interruption events from.
//!
//! What it is, as Karpenter runs it: a standard queue keeping messages for 5 minutes
//! (interruption notices are worthless after that), encrypted at rest with SSE-SQS unless a
//! KMS key is given, and a policy that lets EventBridge (and SQS itself) send to it while
//! refusing any access that does not use TLS. The policy is not configurable: it is
//! re-applied whenever someone changes it out of band.

use crate::aws::error::AwsError;
use crate::aws::retry::{classify, RetryPolicy, Transience};
use crate::aws::sqs::{self, Encryption, NewQueue, QueueUpdate};
use crate::protocol::prelude::*;
use crate::protocol::timeouts::Timeouts;
use crate::provider::ProviderContext;
use std::collections::BTreeMap;
use std::time::Duration;

pub struct InterruptionQueue;

const NAME_CHARS: &str = "letters, digits, hyphens (-) and underscores (_)";

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn encryption(v: &Value) -> Encryption {
    match v.get("kms_key_id").as_str() {
        Some(key) => Encryption::Kms(key.to_string()),
        None => Encryption::SqsManaged,
    }
}

fn retention(v: &Value) -> i64 {
    v.get("message_retention_seconds").as_i64().unwrap_or(300)
}

/// SQS reports "no tags" as an empty map; keep whichever of null or `{}` the configuration
/// used, so that an untagged queue does not show a diff forever.
fn tags_value(remote: &BTreeMap<String, String>, like: &Value) -> Value {
    if remote.is_empty() && !matches!(like, Value::Map(_)) {
        Value::Null
    } else {
        Value::string_map(remote.clone())
    }
}

/// SQS stores the policy re-serialized (key order, spacing vary between calls); keep the
/// string Terraform already has when it means the same, so only real changes show.
fn policy_value(remote: Option<String>, like: &Value) -> Value {
    match (remote, like.as_str()) {
        (Some(r), Some(l)) if sqs::same_policy(&r, l) => Value::string(l),
        (r, _) => Value::opt_string(r),
    }
}

/// Reads the queue at `url` into a state; `None` when it no longer exists.
async fn read_queue(
    ctx: &ProviderContext,
    url: &str,
    like: &Value,
) -> Result<Option<Value>, AwsError> {
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
    Ok(Some(Value::object([
        ("name", Value::string(name)),
        (
            "message_retention_seconds",
            Value::int(attrs.message_retention_seconds),
        ),
        ("kms_key_id", Value::opt_string(attrs.kms_key_id)),
        ("tags", tags_value(&tags, like.get("tags"))),
        ("arn", Value::string(attrs.arn)),
        ("url", Value::string(url)),
        ("policy", policy_value(attrs.policy, like.get("policy"))),
    ])))
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
                    .default(300)
                    .description("How long SQS keeps an unread message, 60 to 1209600 seconds (default 300).")
                    .validate(validators::int_between(60, 1_209_600)),
            )
            .attribute(
                Attribute::string("kms_key_id")
                    .optional()
                    .description("KMS key (id, alias or ARN) for SSE-KMS. Default: SQS-managed encryption (SSE-SQS).")
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
        if let Some(arn) = plan.prior.get("arn").as_str() {
            let want = sqs::interruption_policy(arn);
            let have = plan.prior.get("policy").as_str().unwrap_or_default();
            if !sqs::same_policy(have, &want) {
                plan.planned.set_attr("policy", Value::string(want));
            }
        }
        let _ = ctx;
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let p = &change.planned;
        let name = p.get("name").as_str().unwrap_or_default().to_string();
        let arn = ctx.arn("sqs", &name).await?;
        let tags = p.get("tags").as_string_map();
        let q = NewQueue {
            name: &name,
            message_retention_seconds: retention(p),
            encryption: encryption(p),
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
        match read_queue(ctx, &url, p).await? {
            Some(state) => Ok(Applied::new(state)),
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
        let Some(url) = req.state.get("url").as_str() else {
            return Ok(None);
        };
        Ok(read_queue(ctx, url, &req.state).await?.map(Applied::new))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let (prior, planned) = (&change.prior, &change.planned);
        let url = prior.get("url").as_str().unwrap_or_default().to_string();
        let client = ctx.aws.sqs();
        let mut u = QueueUpdate::default();
        if retention(prior) != retention(planned) {
            u.message_retention_seconds = Some(retention(planned));
        }
        if prior.get("kms_key_id") != planned.get("kms_key_id") {
            u.encryption = Some(encryption(planned));
        }
        // The policy goes with every attribute change: it is idempotent, and some SQS
        // implementations (the emulator) drop a policy not restated in the same call.
        let policy = planned
            .get("policy")
            .as_str()
            .map(str::to_string)
            .or_else(|| prior.get("arn").as_str().map(sqs::interruption_policy));
        if u != QueueUpdate::default() || prior.get("policy") != planned.get("policy") {
            u.policy = policy;
        }
        sqs::update_queue(&client, &url, &u).await?;
        if prior.get("tags") != planned.get("tags") {
            let have = sqs::tags(&client, &url).await?;
            sqs::set_tags(&client, &url, &have, &planned.get("tags").as_string_map()).await?;
        }
        match read_queue(ctx, &url, planned).await? {
            Some(state) => Ok(Applied::new(state)),
            None => Err(Diagnostic::error(
                "Queue deleted during update",
                format!("{url} disappeared while it was being updated; run terraform apply again to recreate it"),
            )
            .into()),
        }
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        if let Some(url) = change.prior.get("url").as_str() {
            sqs::delete_queue(&ctx.aws.sqs(), url).await?;
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
            Some(url) => Ok(Applied::new(Value::object([
                ("name", Value::string(name)),
                ("url", Value::string(url)),
            ]))),
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
        assert_eq!(tags_value(&none, &Value::Null), Value::Null);
        assert_eq!(
            tags_value(&none, &Value::Map(BTreeMap::new())),
            Value::Map(BTreeMap::new())
        );
        let some: BTreeMap<_, _> = [("a".to_string(), "b".to_string())].into();
        assert_eq!(
            tags_value(&some, &Value::Null),
            Value::string_map([("a", "b")])
        );
    }

    #[test]
    fn reformatted_policies_keep_the_known_string() {
        let ours = sqs::interruption_policy("arn:aws:sqs:us-east-1:1:q");
        let reformatted = serde_json::to_string_pretty(
            &serde_json::from_str::<serde_json::Value>(&ours).unwrap(),
        )
        .unwrap();
        assert_eq!(
            policy_value(Some(reformatted), &Value::string(&ours)),
            Value::string(&ours)
        );
        let other = sqs::interruption_policy("arn:aws:sqs:us-east-1:1:other");
        assert_eq!(
            policy_value(Some(other.clone()), &Value::string(&ours)),
            Value::string(other)
        );
        assert_eq!(policy_value(None, &Value::string(&ours)), Value::Null);
    }

    #[test]
    fn encryption_defaults_to_sse_sqs() {
        assert_eq!(
            encryption(&Value::object([("kms_key_id", Value::Null)])),
            Encryption::SqsManaged
        );
        assert_eq!(
            encryption(&Value::object([("kms_key_id", Value::string("alias/k"))])),
            Encryption::Kms("alias/k".into())
        );
    }
}
