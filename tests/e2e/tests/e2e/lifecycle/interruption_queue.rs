//! `joiner_interruption_queue` through the real Terraform CLI against the AWS emulator:
//! create, in-place update, replace, import by name and URL, drift, destroy, and the
//! inputs refused at plan time.

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

const Q: &str = "joiner_interruption_queue.q";

fn queue(name: &str, extra: &str) -> String {
    format!(
        r#"resource "joiner_interruption_queue" "q" {{
  name = "{name}"
{extra}
}}
"#
    )
}

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

/// The queue policy's statements, parsed from the Policy attribute AWS stores.
fn statements(policy: &str) -> Vec<Value> {
    let doc: Value = serde_json::from_str(policy)
        .unwrap_or_else(|e| panic!("queue policy is not JSON ({e}): {policy}"));
    match &doc["Statement"] {
        Value::Array(a) => a.clone(),
        Value::Object(_) => vec![doc["Statement"].clone()],
        other => panic!("policy has no statements: {other}"),
    }
}

/// `"x"` or `["x", "y"]`, as IAM allows either, flattened to strings.
fn one_or_many(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        _ => vec![],
    }
}

#[test]
fn create_update_import_and_destroy() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    tf.write_config(&queue(
        "orders-interruptions",
        r#"  tags = {
    team    = "platform"
    "joiner.dev/cluster" = "orders"
  }"#,
    ));

    // 1. plan, apply, then look at state and at the queue itself.
    let plan = tf.plan();
    assert_eq!(plan.actions(Q), ["create"]);
    tf.apply();
    let st = tf.values(Q);
    assert_eq!(st["name"], "orders-interruptions");
    assert_eq!(
        st["message_retention_seconds"], 300,
        "default retention is 300 s"
    );
    let url = s(&st["url"]).to_string();
    assert!(url.ends_with("/orders-interruptions"), "url: {url}");
    assert_eq!(
        st["arn"],
        "arn:aws:sqs:us-east-1:123456789012:orders-interruptions"
    );
    assert_eq!(
        aws.queue_url("orders-interruptions").as_deref(),
        Some(url.as_str())
    );

    let attrs = aws.queue_attributes(&url);
    assert_eq!(
        attrs.get("SqsManagedSseEnabled").map(String::as_str),
        Some("true"),
        "{attrs:?}"
    );
    assert_eq!(
        attrs.get("MessageRetentionPeriod").map(String::as_str),
        Some("300"),
        "{attrs:?}"
    );
    assert_eq!(
        attrs.get("QueueArn"),
        st["arn"].as_str().map(str::to_string).as_ref()
    );

    let stmts = statements(attrs.get("Policy").expect("the queue has a policy"));
    let allows: Vec<&serde_json::Value> =
        stmts.iter().filter(|st| st["Effect"] == "Allow").collect();
    let mut principals: Vec<String> = allows
        .iter()
        .flat_map(|a| one_or_many(&a["Principal"]["Service"]))
        .collect();
    principals.sort();
    assert_eq!(principals, ["events.amazonaws.com", "sqs.amazonaws.com"]);
    let account = s(&st["arn"])
        .split(':')
        .nth(4)
        .unwrap_or_default()
        .to_string();
    for allow in &allows {
        assert_eq!(one_or_many(&allow["Action"]), ["sqs:SendMessage"]);
        assert_eq!(one_or_many(&allow["Resource"]), [s(&st["arn"])]);
        // The confused deputy: a service principal sends only for this account.
        assert_eq!(
            allow["Condition"]["StringEquals"]["aws:SourceAccount"],
            account.as_str(),
            "{allow}"
        );
    }
    let deny = stmts
        .iter()
        .find(|st| st["Effect"] == "Deny")
        .unwrap_or_else(|| panic!("no Deny statement: {stmts:?}"));
    let secure = &deny["Condition"]["Bool"]["aws:SecureTransport"];
    assert!(
        secure == "false" || secure == false,
        "deny is not on insecure transport: {deny}"
    );
    assert!(
        one_or_many(&deny["Action"])
            .iter()
            .any(|a| a == "sqs:*" || a == "*"),
        "the TLS-only deny must cover every action: {deny}"
    );

    let tags = aws.queue_tags(&url);
    assert_eq!(tags.get("team").map(String::as_str), Some("platform"));
    assert_eq!(
        tags.get("joiner.dev/cluster").map(String::as_str),
        Some("orders")
    );

    // 2. and 3. what was applied is what is configured, and what is there.
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // 4. import by name and by URL reproduces the applied state, and plans nothing.
    tf.import_verify(Q, "orders-interruptions", &[])
        .plan_is_empty();
    tf.import_verify(Q, &url, &[]).refresh_plan_is_empty();

    // In-place update of the retention: same queue, new value.
    tf.write_config(&queue(
        "orders-interruptions",
        r#"  message_retention_seconds = 600
  tags = {
    team    = "platform"
    "joiner.dev/cluster" = "orders"
  }"#,
    ));
    let plan = tf.plan();
    assert_eq!(plan.actions(Q), ["update"], "retention is updated in place");
    tf.apply();
    assert_eq!(
        tf.attr(Q, "url"),
        url.as_str(),
        "same queue after the update"
    );
    assert_eq!(tf.attr(Q, "message_retention_seconds"), 600);
    let attrs = aws.queue_attributes(&url);
    assert_eq!(
        attrs.get("MessageRetentionPeriod").map(String::as_str),
        Some("600")
    );
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // 5. destroy, and the queue is gone.
    tf.destroy();
    assert_eq!(aws.queue_url("orders-interruptions"), None);
    assert!(
        aws.queue_urls().is_empty(),
        "left behind: {:?}",
        aws.queue_urls()
    );
}

#[test]
fn renaming_replaces_the_queue() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    tf.write_config(&queue("before", ""));
    tf.apply();
    let old_url = s(&tf.attr(Q, "url")).to_string();

    tf.write_config(&queue("after", ""));
    let plan = tf.plan();
    assert!(
        plan.replaces(Q),
        "a new name must replace: {:?}",
        plan.actions(Q)
    );
    assert!(
        plan.replace_paths(Q).contains(&serde_json::json!(["name"])),
        "the plan must say `name` forces the replacement: {:?}",
        plan.replace_paths(Q)
    );
    tf.apply();

    let new_url = s(&tf.attr(Q, "url")).to_string();
    assert_ne!(new_url, old_url);
    assert_eq!(aws.queue_url("before"), None, "the old queue is deleted");
    assert_eq!(aws.queue_url("after").as_deref(), Some(new_url.as_str()));
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
    tf.destroy();
    assert!(aws.queue_urls().is_empty());
}

#[test]
fn a_queue_deleted_out_of_band_is_recreated() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    tf.write_config(&queue("drifty", "  message_retention_seconds = 120"));
    tf.apply();
    let url = s(&tf.attr(Q, "url")).to_string();

    aws.delete_queue(&url);
    assert_eq!(aws.queue_url("drifty"), None);

    let plan = tf.plan();
    assert_eq!(
        plan.actions(Q),
        ["create"],
        "the refresh must notice the queue is gone"
    );
    tf.apply();
    let url = aws.queue_url("drifty").expect("apply recreated the queue");
    let attrs = aws.queue_attributes(&url);
    assert_eq!(
        attrs.get("MessageRetentionPeriod").map(String::as_str),
        Some("120")
    );
    assert_eq!(
        attrs.get("SqsManagedSseEnabled").map(String::as_str),
        Some("true")
    );
    tf.refresh_plan_is_empty();
    tf.destroy();
}

#[test]
fn bad_input_is_refused_at_plan_time_with_the_attribute_named() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    // (configuration, attribute Terraform must point at, part of the message)
    let cases = [
        (queue("", ""), "name", "must be 1 to 80 characters long"),
        (queue("has spaces", ""), "name", "may contain only letters"),
        (
            queue(&"x".repeat(81), ""),
            "name",
            "must be 1 to 80 characters long",
        ),
        (
            queue("ok", "  message_retention_seconds = 59"),
            "message_retention_seconds",
            "must be between 60 and 1209600",
        ),
        (
            queue("ok", "  message_retention_seconds = 1209601"),
            "message_retention_seconds",
            "must be between 60 and 1209600",
        ),
    ];
    for (config, attribute, message) in cases {
        tf.write_config(&config);
        let d = tf.plan_fails_with(attribute, message);
        eprintln!("refused as expected:\n{d}");
    }
    assert!(
        aws.queue_urls().is_empty(),
        "a refused plan created something"
    );
}

#[test]
fn an_aws_error_names_the_operation_and_the_code() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    // A queue with this name already exists with other attributes: SQS refuses to create
    // it again (QueueAlreadyExists), and the provider must say which call failed and why.
    aws.block_on(
        aws.sqs()
            .create_queue()
            .queue_name("taken")
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
                "900",
            )
            .send(),
    )
    .expect("create the conflicting queue");

    let tf = Workspace::new(&moto);
    tf.write_config(&queue("taken", ""));
    let d = tf.apply_fails_with("CreateQueue");
    assert!(
        d.mentions("QueueAlreadyExists") || d.mentions("QueueNameExists"),
        "the error code is missing:\n{d}"
    );
    assert!(
        tf.state().is_empty(),
        "nothing may be recorded after a failed create"
    );
}
