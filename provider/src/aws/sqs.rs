//! SQS calls for the interruption queue, and the queue's access policy.

use super::error::{AwsError, AwsResultExt};
use aws_sdk_sqs::types::QueueAttributeName as Attr;
use aws_sdk_sqs::Client;
use std::collections::{BTreeMap, HashMap};

/// The parts of a queue's attributes the provider manages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueAttributes {
    pub arn: String,
    pub message_retention_seconds: i64,
    /// The customer-managed KMS key, when the queue uses SSE-KMS.
    pub kms_key_id: Option<String>,
    pub sqs_managed_sse: bool,
    pub policy: Option<String>,
}

/// How the queue is encrypted at rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Encryption {
    /// SSE-SQS: keys owned by SQS, no KMS cost or key policy to manage.
    SqsManaged,
    /// SSE-KMS with this key id, alias or ARN.
    Kms(String),
}

impl Encryption {
    fn attributes(&self) -> [(Attr, String); 2] {
        match self {
            Encryption::SqsManaged => [
                (Attr::SqsManagedSseEnabled, "true".into()),
                (Attr::KmsMasterKeyId, String::new()),
            ],
            Encryption::Kms(key) => [
                (Attr::SqsManagedSseEnabled, "false".into()),
                (Attr::KmsMasterKeyId, key.clone()),
            ],
        }
    }
}

/// The interruption queue's policy: EventBridge may send messages from joiner's rules in
/// the queue's own account and Region, SQS itself (redrive) from that account, and nothing
/// may use the queue without TLS.
///
/// Karpenter's queue policy lets `events.amazonaws.com` send with no condition, so any
/// account's rule could target the queue and forge Spot or termination notices. AWS's
/// confused-deputy guidance for service principals asks for `aws:SourceAccount` and
/// `aws:SourceArn` (IAM user guide, "The confused deputy problem"; EventBridge user guide,
/// "Permissions for Amazon SQS": `ArnEquals aws:SourceArn` on the rule's ARN). joiner's
/// rules are all named `joiner-...` (`interruption_rules::naming`); the agent also drops
/// an event stamped with another account than the queue's.
pub fn interruption_policy(queue_arn: &str) -> String {
    let parts: Vec<&str> = queue_arn.splitn(6, ':').collect();
    let field = |i: usize| parts.get(i).copied().unwrap_or_default();
    let (partition, region, account) = (field(1), field(3), field(4));
    serde_json::json!({
        "Version": "2012-10-17",
        "Id": "joiner-interruption-queue",
        "Statement": [
            {
                "Sid": "AllowJoinerRulesToSend",
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": account},
                    "ArnLike": {"aws:SourceArn": format!("arn:{partition}:events:{region}:{account}:rule/joiner-*")},
                },
            },
            {
                "Sid": "AllowSqsRedriveFromThisAccount",
                "Effect": "Allow",
                "Principal": {"Service": "sqs.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"StringEquals": {"aws:SourceAccount": account}},
            },
            {
                "Sid": "DenyNonTlsAccess",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    })
    .to_string()
}

/// True when two policy documents say the same thing (SQS may reformat what we stored).
pub fn same_policy(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// What CreateQueue needs.
pub struct NewQueue<'a> {
    pub name: &'a str,
    pub message_retention_seconds: i64,
    pub encryption: Encryption,
    pub policy: String,
    pub tags: &'a BTreeMap<String, String>,
}

/// Creates the queue with every attribute in one call, so that there is never a queue
/// without its encryption or policy. Returns the queue URL.
pub async fn create_queue(client: &Client, q: &NewQueue<'_>) -> Result<String, AwsError> {
    let mut attrs: HashMap<Attr, String> = HashMap::new();
    attrs.insert(
        Attr::MessageRetentionPeriod,
        q.message_retention_seconds.to_string(),
    );
    for (k, v) in q.encryption.attributes() {
        // An empty key id means "none" for updates; on create, just leave it out.
        if !v.is_empty() {
            attrs.insert(k, v);
        }
    }
    attrs.insert(Attr::Policy, q.policy.clone());
    let tags: HashMap<String, String> = q.tags.clone().into_iter().collect();
    let out = client
        .create_queue()
        .queue_name(q.name)
        .set_attributes(Some(attrs))
        .set_tags((!tags.is_empty()).then_some(tags))
        .send()
        .await
        .aws("sqs:CreateQueue")?;
    out.queue_url().map(str::to_string).ok_or_else(|| {
        AwsError::service(
            "sqs:CreateQueue",
            "MissingQueueUrl",
            "the response has no QueueUrl",
        )
    })
}

/// The queue's attributes, or `None` when the queue does not exist.
pub async fn queue_attributes(
    client: &Client,
    url: &str,
) -> Result<Option<QueueAttributes>, AwsError> {
    let out = match client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(Attr::All)
        .send()
        .await
        .aws("sqs:GetQueueAttributes")
    {
        Ok(out) => out,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let attrs = out.attributes().cloned().unwrap_or_default();
    let get = |k: &Attr| attrs.get(k).filter(|v| !v.is_empty()).cloned();
    let retention = get(&Attr::MessageRetentionPeriod)
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    Ok(Some(QueueAttributes {
        arn: get(&Attr::QueueArn).unwrap_or_default(),
        message_retention_seconds: retention,
        kms_key_id: get(&Attr::KmsMasterKeyId),
        sqs_managed_sse: get(&Attr::SqsManagedSseEnabled).as_deref() == Some("true"),
        policy: get(&Attr::Policy),
    }))
}

/// Attribute changes for SetQueueAttributes; `None` leaves an attribute as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueUpdate {
    pub message_retention_seconds: Option<i64>,
    pub encryption: Option<Encryption>,
    pub policy: Option<String>,
}

/// Applies every change in one SetQueueAttributes call.
pub async fn update_queue(client: &Client, url: &str, u: &QueueUpdate) -> Result<(), AwsError> {
    let mut attrs: Vec<(Attr, String)> = Vec::new();
    if let Some(r) = u.message_retention_seconds {
        attrs.push((Attr::MessageRetentionPeriod, r.to_string()));
    }
    if let Some(e) = &u.encryption {
        attrs.extend(e.attributes());
    }
    if let Some(p) = &u.policy {
        attrs.push((Attr::Policy, p.clone()));
    }
    if attrs.is_empty() {
        return Ok(());
    }
    set_attributes(client, url, attrs).await
}

async fn set_attributes(
    client: &Client,
    url: &str,
    attrs: impl IntoIterator<Item = (Attr, String)>,
) -> Result<(), AwsError> {
    client
        .set_queue_attributes()
        .queue_url(url)
        .set_attributes(Some(attrs.into_iter().collect()))
        .send()
        .await
        .aws("sqs:SetQueueAttributes")?;
    Ok(())
}

pub async fn tags(client: &Client, url: &str) -> Result<BTreeMap<String, String>, AwsError> {
    let out = client
        .list_queue_tags()
        .queue_url(url)
        .send()
        .await
        .aws("sqs:ListQueueTags")?;
    Ok(out
        .tags()
        .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default())
}

/// Makes the queue's tags exactly `want`.
pub async fn set_tags(
    client: &Client,
    url: &str,
    have: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
) -> Result<(), AwsError> {
    let removed: Vec<String> = have
        .keys()
        .filter(|k| !want.contains_key(*k))
        .cloned()
        .collect();
    if !removed.is_empty() {
        client
            .untag_queue()
            .queue_url(url)
            .set_tag_keys(Some(removed))
            .send()
            .await
            .aws("sqs:UntagQueue")?;
    }
    let changed: HashMap<String, String> = want
        .iter()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !changed.is_empty() {
        client
            .tag_queue()
            .queue_url(url)
            .set_tags(Some(changed))
            .send()
            .await
            .aws("sqs:TagQueue")?;
    }
    Ok(())
}

/// The URL of the queue named `name` (owned by `owner`, default the caller), if it exists.
pub async fn queue_url(
    client: &Client,
    name: &str,
    owner: Option<&str>,
) -> Result<Option<String>, AwsError> {
    match client
        .get_queue_url()
        .queue_name(name)
        .set_queue_owner_aws_account_id(owner.map(str::to_string))
        .send()
        .await
        .aws("sqs:GetQueueUrl")
    {
        Ok(out) => Ok(out.queue_url().map(str::to_string)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes the queue; a queue already gone is not an error.
pub async fn delete_queue(client: &Client, url: &str) -> Result<(), AwsError> {
    match client
        .delete_queue()
        .queue_url(url)
        .send()
        .await
        .aws("sqs:DeleteQueue")
    {
        Err(e) if e.is_not_found() => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Splits a queue URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`) into
/// account and name.
pub fn parse_queue_url(url: &str) -> Option<(&str, &str)> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let mut parts = rest.trim_end_matches('/').rsplit('/');
    let name = parts.next().filter(|s| !s.is_empty())?;
    let account = parts
        .next()
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))?;
    Some((account, name))
}

/// True when CreateQueue failed because a queue of that name was deleted less than 60 s
/// ago (AWS refuses the name meanwhile); waiting is the only fix.
pub fn is_deleted_recently(e: &AwsError) -> bool {
    matches!(
        e.code(),
        Some("AWS.SimpleQueueService.QueueDeletedRecently" | "QueueDeletedRecently")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_allows_only_this_accounts_joiner_rules_and_denies_plaintext() {
        let arn = "arn:aws-cn:sqs:cn-north-1:123456789012:q";
        let p: serde_json::Value = serde_json::from_str(&interruption_policy(arn)).unwrap();
        let st = p["Statement"].as_array().unwrap();
        assert_eq!(st[0]["Effect"], "Allow");
        assert_eq!(st[0]["Action"], "sqs:SendMessage");
        assert_eq!(st[0]["Principal"]["Service"], "events.amazonaws.com");
        assert_eq!(
            st[0]["Condition"]["StringEquals"]["aws:SourceAccount"],
            "123456789012"
        );
        assert_eq!(
            st[0]["Condition"]["ArnLike"]["aws:SourceArn"],
            "arn:aws-cn:events:cn-north-1:123456789012:rule/joiner-*"
        );
        assert_eq!(st[1]["Principal"]["Service"], "sqs.amazonaws.com");
        assert_eq!(
            st[1]["Condition"]["StringEquals"]["aws:SourceAccount"],
            "123456789012"
        );
        assert_eq!(st[2]["Effect"], "Deny");
        assert_eq!(st[2]["Condition"]["Bool"]["aws:SecureTransport"], "false");
        assert!(
            st.iter()
                .all(|s| s["Effect"] == "Deny" || s.get("Condition").is_some()),
            "no allow without a condition"
        );
        let (a, b) = ("arn:aws:sqs:us-east-1:1:a", "arn:aws:sqs:us-east-1:1:b");
        assert!(same_policy(
            &interruption_policy(a),
            &format!(" {}", interruption_policy(a))
        ));
        assert!(!same_policy(
            &interruption_policy(a),
            &interruption_policy(b)
        ));
    }

    #[test]
    fn queue_urls() {
        assert_eq!(
            parse_queue_url("https://sqs.us-east-1.amazonaws.com/123456789012/q-1"),
            Some(("123456789012", "q-1"))
        );
        assert_eq!(
            parse_queue_url("http://127.0.0.1:5000/123456789012/q"),
            Some(("123456789012", "q"))
        );
        assert_eq!(parse_queue_url("q"), None);
        assert_eq!(parse_queue_url("https://host/q"), None);
    }
}
