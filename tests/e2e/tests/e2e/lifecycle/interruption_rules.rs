//! `joiner_interruption_rules` through the real Terraform CLI against the AWS emulator:
//! the five rules and their queue target, an interruption event put on the default bus
//! arriving in the queue, a kind switched off and on in place, drift, import by cluster
//! name, replace, destroy, long cluster names, and bad inputs at plan time.

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

const R: &str = "joiner_interruption_rules.r";

fn eb(aws: &Aws) -> aws_sdk_eventbridge::Client {
    aws.block_on(async { aws_sdk_eventbridge::Client::new(aws.sdk_config()) })
}

fn rule_names(aws: &Aws) -> Vec<String> {
    let out = aws
        .block_on(eb(aws).list_rules().send())
        .expect("events:ListRules");
    let mut v: Vec<String> = out
        .rules()
        .iter()
        .filter_map(|r| r.name().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn config(cluster: &str, extra: &str) -> String {
    format!(
        r#"
resource "joiner_interruption_queue" "q" {{
  name = "{cluster}-interruptions"
}}

resource "joiner_interruption_rules" "r" {{
  cluster_name = "{cluster}"
  queue_arn    = joiner_interruption_queue.q.arn
  tags         = {{ team = "platform" }}
{extra}
}}
"#
    )
}

#[test]
fn rules_deliver_interruptions_to_the_queue() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    tf.write_config(&config("prod", ""));

    let plan = tf.plan();
    assert_eq!(plan.actions(R), ["create"]);
    // Names are known at plan time.
    let planned = plan.after(R).unwrap();
    assert_eq!(
        planned["rule_names"]["spot_interruption"],
        "joiner-prod-spot-interruption"
    );
    tf.apply();

    assert_eq!(
        rule_names(&aws),
        [
            "joiner-prod-capacity-interruption",
            "joiner-prod-rebalance",
            "joiner-prod-scheduled-change",
            "joiner-prod-spot-interruption",
            "joiner-prod-state-change",
        ]
    );
    let queue_arn = tf.attr("joiner_interruption_queue.q", "arn");
    let c = eb(&aws);
    for name in rule_names(&aws) {
        let targets = aws
            .block_on(c.list_targets_by_rule().rule(&name).send())
            .unwrap();
        assert_eq!(targets.targets().len(), 1, "{name}");
        assert_eq!(
            targets.targets()[0].arn(),
            queue_arn.as_str().unwrap(),
            "{name}"
        );
    }
    // The applied rules carry exactly the agent's patterns, the ones its end-to-end tests
    // put their events through (not copies that could drift apart).
    let sorted = |mut v: Vec<Value>| {
        v.sort_by_key(|p| p.to_string());
        v
    };
    let applied: Vec<Value> = rule_names(&aws)
        .iter()
        .map(|name| {
            let r = aws.block_on(c.describe_rule().name(name).send()).unwrap();
            serde_json::from_str(r.event_pattern().unwrap()).unwrap()
        })
        .collect();
    let agents: Vec<Value> = joiner_agent::interruption::messages::Kind::ALL
        .iter()
        .map(|k| k.event_pattern())
        .collect();
    assert_eq!(sorted(applied), sorted(agents));
    let health = aws
        .block_on(
            c.describe_rule()
                .name("joiner-prod-scheduled-change")
                .send(),
        )
        .unwrap();
    let pattern: Value = serde_json::from_str(health.event_pattern().unwrap()).unwrap();
    assert_eq!(pattern["source"], serde_json::json!(["aws.health"]));
    assert_eq!(pattern["detail"]["service"], serde_json::json!(["EC2"]));
    assert_eq!(
        pattern["detail"]["eventTypeCategory"],
        serde_json::json!(["scheduledChange"])
    );
    let arn = tf.attr(R, "rule_arns")["spot_interruption"].clone();
    let tags = aws
        .block_on(
            c.list_tags_for_resource()
                .resource_arn(arn.as_str().unwrap())
                .send(),
        )
        .unwrap();
    assert!(tags
        .tags()
        .iter()
        .any(|t| t.key() == "team" && t.value() == "platform"));

    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // A Spot interruption warning put on the default bus arrives in the queue.
    let detail = r#"{"instance-id":"i-1234567890abcdef0","instance-action":"terminate"}"#;
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .source("aws.ec2")
        .detail_type("EC2 Spot Instance Interruption Warning")
        .detail(detail)
        .resources("arn:aws:ec2:us-east-1:123456789012:instance/i-1234567890abcdef0")
        .build();
    let put = aws.block_on(c.put_events().entries(entry).send()).unwrap();
    assert_eq!(put.failed_entry_count(), 0);
    let url = aws.queue_url("prod-interruptions").unwrap();
    let got = aws
        .block_on(
            aws.sqs()
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .wait_time_seconds(5)
                .send(),
        )
        .unwrap();
    let bodies: Vec<Value> = got
        .messages()
        .iter()
        .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
        .collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(
        bodies[0]["detail-type"],
        "EC2 Spot Instance Interruption Warning"
    );
    assert_eq!(bodies[0]["detail"]["instance-id"], "i-1234567890abcdef0");

    // Import by cluster name reproduces the state.
    tf.import_verify(R, "prod", &["timeouts"]);

    // Switching one kind off deletes that rule in place; on again re-creates it.
    tf.write_config(&config("prod", "  rebalance = false"));
    let plan = tf.plan();
    assert_eq!(plan.actions(R), ["update"]);
    tf.apply();
    assert!(!rule_names(&aws).contains(&"joiner-prod-rebalance".to_string()));
    assert!(tf.attr(R, "rule_names").get("rebalance").is_none());
    tf.refresh_plan_is_empty();
    tf.write_config(&config("prod", ""));
    tf.apply();
    assert_eq!(rule_names(&aws).len(), 5);

    // Drift: a rule deleted out of band comes back in place.
    aws.block_on(async {
        c.remove_targets()
            .rule("joiner-prod-state-change")
            .ids("joiner-interruption-queue")
            .send()
            .await
            .unwrap();
        c.delete_rule()
            .name("joiner-prod-state-change")
            .send()
            .await
            .unwrap();
    });
    let plan = tf.plan();
    assert_eq!(plan.actions(R), ["update"]);
    tf.apply();
    assert!(rule_names(&aws).contains(&"joiner-prod-state-change".to_string()));

    // Drift: every rule deleted → the resource is re-created.
    let all = rule_names(&aws);
    aws.block_on(async {
        for name in all {
            c.remove_targets()
                .rule(&name)
                .ids("joiner-interruption-queue")
                .send()
                .await
                .unwrap();
            c.delete_rule().name(&name).send().await.unwrap();
        }
    });
    let plan = tf.plan();
    assert_eq!(plan.actions(R), ["create"]);
    tf.apply();
    tf.refresh_plan_is_empty();

    // Replace: another cluster name is another set of rules; the old ones are gone.
    tf.write_config(
        &config("prod", "").replace("cluster_name = \"prod\"", "cluster_name = \"staging\""),
    );
    let plan = tf.plan();
    assert!(plan.replaces(R));
    tf.apply();
    let names = rule_names(&aws);
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(
        names.iter().all(|n| n.starts_with("joiner-staging-")),
        "{names:?}"
    );

    tf.destroy();
    assert_eq!(rule_names(&aws), Vec::<String>::new());
}

#[test]
fn long_cluster_names_give_rule_names_within_64_characters() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    let cluster = format!("a{}", "-very-long-cluster-name".repeat(4)); // 93 characters
    tf.write_config(&format!(
        r#"
resource "joiner_interruption_queue" "q" {{
  name = "long-interruptions"
}}

resource "joiner_interruption_rules" "r" {{
  cluster_name = "{cluster}"
  queue_arn    = joiner_interruption_queue.q.arn
}}
"#
    ));
    tf.apply();
    let names = rule_names(&aws);
    assert_eq!(names.len(), 5);
    for n in &names {
        assert!(n.len() <= 64, "{n} is {} characters", n.len());
    }
    tf.refresh_plan_is_empty();
    tf.destroy();
    assert!(rule_names(&aws).is_empty());
}

#[test]
fn bad_inputs_are_refused_at_plan_time() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let cases = [
        (
            "cluster_name = \"has space\"\n  queue_arn    = \"arn:aws:sqs:us-east-1:123456789012:q\"",
            "cluster_name",
            "may contain only letters, digits, \"-\" and \"_\"",
        ),
        (
            "cluster_name = \"prod\"\n  queue_arn    = \"https://sqs.us-east-1.amazonaws.com/123456789012/q\"",
            "queue_arn",
            "is not an ARN",
        ),
        (
            "cluster_name = \"prod\"\n  queue_arn    = \"arn:aws:sns:us-east-1:123456789012:t\"",
            "queue_arn",
            "expected a sqs ARN",
        ),
        (
            "cluster_name = \"prod\"\n  queue_arn    = \"arn:aws:sqs:us-east-1:123456789012:q\"\n  spot_interruption = false\n  rebalance = false\n  state_change = false\n  scheduled_change = false\n  capacity_reservation_interruption = false",
            "spot_interruption",
            "at least one kind must be enabled",
        ),
    ];
    for (body, attribute, message) in cases {
        tf.write_config(&format!(
            "resource \"joiner_interruption_rules\" \"r\" {{\n  {body}\n}}\n"
        ));
        tf.plan_fails_with(attribute, message);
    }
}
