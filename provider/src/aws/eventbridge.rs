//! EventBridge rules on the default bus, each with one SQS target.
//!
//! EventBridge's API is per rule, and a rule with targets cannot be deleted, so "a rule
//! that sends matching events to the queue" is three calls to create and two to delete;
//! these helpers keep that sequencing (and retries) out of the resource.

use std::collections::BTreeMap;

use aws_sdk_eventbridge::types::{RuleState, Tag, Target};
use aws_sdk_eventbridge::Client;
use tokio::time::Instant;

use super::error::{AwsError, AwsResultExt};
use super::retry::retry;

/// The target ID joiner uses on its rules; other targets a user adds are left alone.
pub const TARGET_ID: &str = "joiner-interruption-queue";

/// A rule as EventBridge has it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoteRule {
    pub name: String,
    pub arn: String,
    pub event_pattern: String,
    pub enabled: bool,
    pub description: Option<String>,
    /// The ARN of joiner's target, when present.
    pub target_arn: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// The rule we want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub name: String,
    pub description: String,
    pub event_pattern: String,
    pub target_arn: String,
    pub tags: BTreeMap<String, String>,
}

fn tags(t: &BTreeMap<String, String>) -> Vec<Tag> {
    t.iter()
        .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
        .collect()
}

/// Creates or updates the rule (pattern, description, enabled), points joiner's target
/// at the queue and brings the tags in line. Idempotent, so create and update share it.
pub async fn put_rule(eb: &Client, spec: &RuleSpec, deadline: Instant) -> Result<String, AwsError> {
    let out = retry(deadline, || async {
        eb.put_rule()
            .name(&spec.name)
            .description(&spec.description)
            .event_pattern(&spec.event_pattern)
            .state(RuleState::Enabled)
            .set_tags(Some(tags(&spec.tags)).filter(|t| !t.is_empty()))
            .send()
            .await
            .aws("events:PutRule")
    })
    .await?;
    let arn = out.rule_arn().unwrap_or_default().to_string();
    let target = Target::builder()
        .id(TARGET_ID)
        .arn(&spec.target_arn)
        .build()
        .map_err(|e| AwsError::service("events:PutTargets", "InvalidTarget", &e.to_string()))?;
    let put = retry(deadline, || async {
        eb.put_targets()
            .rule(&spec.name)
            .targets(target.clone())
            .send()
            .await
            .aws("events:PutTargets")
    })
    .await?;
    // PutTargets reports per-target failures in a 200 response.
    if let Some(failed) = put.failed_entries().first() {
        return Err(AwsError::service(
            "events:PutTargets",
            failed.error_code().unwrap_or("FailedEntry"),
            failed.error_message().unwrap_or("the target was not added"),
        ));
    }
    // PutRule ignores tags on an existing rule, so sync them explicitly.
    if !arn.is_empty() {
        sync_tags(eb, &arn, &spec.tags, deadline).await?;
    }
    Ok(arn)
}

async fn sync_tags(
    eb: &Client,
    arn: &str,
    want: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<(), AwsError> {
    let have = list_tags(eb, arn, deadline).await?;
    let stale: Vec<String> = have
        .keys()
        .filter(|k| !want.contains_key(*k))
        .cloned()
        .collect();
    if !stale.is_empty() {
        retry(deadline, || async {
            eb.untag_resource()
                .resource_arn(arn)
                .set_tag_keys(Some(stale.clone()))
                .send()
                .await
                .aws("events:UntagResource")
        })
        .await?;
    }
    if want.iter().any(|(k, v)| have.get(k) != Some(v)) {
        retry(deadline, || async {
            eb.tag_resource()
                .resource_arn(arn)
                .set_tags(Some(tags(want)))
                .send()
                .await
                .aws("events:TagResource")
        })
        .await?;
    }
    Ok(())
}

async fn list_tags(
    eb: &Client,
    arn: &str,
    deadline: Instant,
) -> Result<BTreeMap<String, String>, AwsError> {
    let out = retry(deadline, || async {
        eb.list_tags_for_resource()
            .resource_arn(arn)
            .send()
            .await
            .aws("events:ListTagsForResource")
    })
    .await?;
    Ok(out
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect())
}

/// Reads a rule with joiner's target and its tags; `None` when the rule does not exist.
pub async fn read_rule(
    eb: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<RemoteRule>, AwsError> {
    let got = retry(deadline, || async {
        eb.describe_rule()
            .name(name)
            .send()
            .await
            .aws("events:DescribeRule")
    })
    .await;
    let rule = match got {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let targets = retry(deadline, || async {
        eb.list_targets_by_rule()
            .rule(name)
            .send()
            .await
            .aws("events:ListTargetsByRule")
    })
    .await?;
    let arn = rule.arn().unwrap_or_default().to_string();
    let tags = if arn.is_empty() {
        BTreeMap::new()
    } else {
        list_tags(eb, &arn, deadline).await?
    };
    Ok(Some(RemoteRule {
        name: name.to_string(),
        arn,
        event_pattern: rule.event_pattern().unwrap_or_default().to_string(),
        enabled: rule.state() == Some(&RuleState::Enabled),
        description: rule.description().map(str::to_string),
        target_arn: targets
            .targets()
            .iter()
            .find(|t| t.id() == TARGET_ID)
            .map(|t| t.arn().to_string()),
        tags,
    }))
}

/// Removes joiner's target and deletes the rule. A rule already gone is success; a rule
/// that still has someone else's targets is an error naming them (deleting it would
/// silently cut off their events).
pub async fn delete_rule(eb: &Client, name: &str, deadline: Instant) -> Result<(), AwsError> {
    let removed = retry(deadline, || async {
        eb.remove_targets()
            .rule(name)
            .ids(TARGET_ID)
            .send()
            .await
            .aws("events:RemoveTargets")
    })
    .await;
    match removed {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    }
    let deleted = retry(deadline, || async {
        eb.delete_rule()
            .name(name)
            .send()
            .await
            .aws("events:DeleteRule")
    })
    .await;
    match deleted {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}
