//! The interruption queue consumer against the AWS emulator, fed through the real
//! EventBridge → SQS path: rules on the default bus (one per kind, the patterns the
//! provider's `joiner_interruption_rules` creates) target the queue, and events are put
//! with PutEvents. Malformed, unknown and duplicate messages are sent to the queue
//! directly, as a misconfigured producer would.
//!
//! The handler here stands in for the cluster side (that one is exercised by the
//! end-to-end tests); what is under test is the consumer's contract: every message parsed
//! into its kind or counted as a drop by reason, acted-on and dropped messages deleted, a
//! failed action left in the queue and redelivered.

#![cfg(feature = "controllers")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use joiner_agent::cloud::sqs::SqsQueue;
use joiner_agent::controllers::interruption::queue::{
    Consumer, Handler, Outcome, PollSettings, Received,
};
use joiner_agent::controllers::operator::metrics::interruption::InterruptionMetrics;
use joiner_agent::interruption::actions::{action_for, Action, SeenEvents};
use joiner_agent::interruption::messages::Kind;
use joiner_test_support::MotoServer;
use serde_json::json;

async fn sdk(moto: &MotoServer) -> aws_config::SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(moto.endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_credential_types::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await
}

/// Records what it is given; `i-other*` is not ours, `i-fail*` fails the first time.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(Kind, Vec<String>)>>,
    failed_once: Mutex<bool>,
    dedup: Mutex<Option<SeenEvents>>,
}

#[async_trait::async_trait]
impl Handler for Recorder {
    async fn handle(&self, r: Received) -> Result<Outcome, String> {
        let ids: Vec<String> = r
            .event
            .instance_ids()
            .iter()
            .map(|s| s.to_string())
            .collect();
        self.seen
            .lock()
            .unwrap()
            .push((r.event.kind(), ids.clone()));
        assert!(r.sent_at <= std::time::SystemTime::now());
        if ids[0].starts_with("i-fail") {
            let mut f = self.failed_once.lock().unwrap();
            if !*f {
                *f = true;
                return Err("simulated Kubernetes outage".into());
            }
        }
        if let Action::Ignore(reason) = action_for(&r.event) {
            return Ok(Outcome::Dropped(reason));
        }
        let first = self
            .dedup
            .lock()
            .unwrap()
            .get_or_insert_with(|| SeenEvents::new(600))
            .first(&r.event.id, 0);
        if !first {
            return Ok(Outcome::Dropped("duplicate"));
        }
        if ids[0].starts_with("i-other") {
            return Ok(Outcome::Dropped("not_ours"));
        }
        Ok(Outcome::Acted(
            if action_for(&r.event) == Action::Rebalance {
                "event_only"
            } else {
                "replace"
            },
        ))
    }
}

/// One rule per kind with the pattern the provider's `joiner_interruption_rules` creates
/// (`Kind::event_pattern`, which the provider's rules are built from).
fn rules() -> Vec<(&'static str, serde_json::Value)> {
    Kind::ALL
        .into_iter()
        .map(|k| (k.as_str(), k.event_pattern()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_through_eventbridge_and_bad_messages_are_counted_and_deleted() {
    let moto = MotoServer::start();
    let cfg = sdk(&moto).await;
    let sqs = aws_sdk_sqs::Client::new(&cfg);
    let events = aws_sdk_eventbridge::Client::new(&cfg);

    let url = sqs
        .create_queue()
        .queue_name("joiner-interruptions")
        .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
        .attributes(QueueAttributeName::VisibilityTimeout, "1")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    for (name, pattern) in rules() {
        events
            .put_rule()
            .name(format!("joiner-test-{name}"))
            .event_pattern(pattern.to_string())
            .send()
            .await
            .unwrap();
        events
            .put_targets()
            .rule(format!("joiner-test-{name}"))
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("queue")
                    .arn(&arn)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }

    let entry = |source: &str, dt: &str, detail: serde_json::Value| {
        aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .source(source)
            .detail_type(dt)
            .detail(detail.to_string())
            .build()
    };
    let put = events
        .put_events()
        .entries(entry(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": "i-0000000000000001", "instance-action": "terminate"}),
        ))
        .entries(entry(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            json!({"instance-id": "i-0000000000000002"}),
        ))
        .entries(entry(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            json!({"instance-id": "i-0000000000000003", "state": "stopping"}),
        ))
        // Filtered out by the rule: never reaches the queue.
        .entries(entry(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            json!({"instance-id": "i-0000000000000004", "state": "running"}),
        ))
        .entries(entry(
            "aws.health",
            "AWS Health Event",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                   "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                   "affectedEntities": [{"entityValue": "i-0000000000000005"}]}),
        ))
        .entries(entry(
            "aws.ec2",
            "EC2 Capacity Reservation Instance Interruption Warning",
            json!({"instance-id": "i-0000000000000006", "instance-action": "terminate"}),
        ))
        .entries(entry(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": "i-other000000001", "instance-action": "terminate"}),
        ))
        .entries(entry(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": "i-fail0000000001", "instance-action": "terminate"}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(put.failed_entry_count(), 0);

    // Straight onto the queue: malformed, unknown kind, a missing field, a duplicate, and
    // a well-formed event of another account (as a rule elsewhere, or a forger, sends).
    let account = joiner_agent::interruption::messages::queue_account(&url)
        .expect("the queue URL names its account")
        .to_string();
    let dup = json!({"version": "0", "id": "dup-1", "source": "aws.ec2", "account": account,
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": "i-0000000000000007", "instance-action": "terminate"}})
    .to_string();
    let foreign = json!({"version": "0", "id": "forged-1", "source": "aws.ec2",
        "account": "210987654321", "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": "i-0000000000000001", "instance-action": "terminate"}})
    .to_string();
    for body in [
        "{not json".to_string(),
        json!({"id": "u", "source": "aws.s3", "detail-type": "Object Created", "detail": {}}).to_string(),
        json!({"id": "m", "source": "aws.ec2", "detail-type": "EC2 Instance Rebalance Recommendation",
               "detail": {}})
        .to_string(),
        dup.clone(),
        dup,
        foreign,
    ] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }

    let metrics = Arc::new(InterruptionMetrics::new());
    let consumer = Consumer::new(
        Arc::new(SqsQueue::new(sqs.clone(), &url)),
        PollSettings {
            wait_seconds: 1,
            max_messages: 10,
            error_backoff: Duration::from_millis(100),
            pollers: 1,
        },
        metrics.clone(),
    );
    let handler = Recorder::default();
    // 7 events + 6 direct messages + the failed one once more.
    let want = 14;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut received = 0;
    while received < want && Instant::now() < deadline {
        received += consumer.poll_once(&handler).await.unwrap();
    }
    assert_eq!(received, want);

    let seen = handler.seen.lock().unwrap().clone();
    let mut by_kind: BTreeMap<Kind, usize> = BTreeMap::new();
    for (k, _) in &seen {
        *by_kind.entry(*k).or_default() += 1;
    }
    // i-1, i-other, i-fail twice (redelivered), the duplicate twice.
    assert_eq!(by_kind[&Kind::SpotInterruption], 6, "{seen:?}");
    assert_eq!(by_kind[&Kind::Rebalance], 1);
    assert_eq!(
        by_kind[&Kind::StateChange],
        1,
        "the running state never arrives"
    );
    assert_eq!(by_kind[&Kind::ScheduledChange], 1);
    assert_eq!(by_kind[&Kind::CapacityReservationInterruption], 1);
    assert!(seen.iter().all(|(_, ids)| ids[0] != "i-0000000000000004"));

    assert_eq!(metrics.dropped_count("malformed"), 1);
    assert_eq!(metrics.dropped_count("unknown_kind"), 1);
    assert_eq!(metrics.dropped_count("invalid_detail"), 1);
    assert_eq!(metrics.dropped_count("not_ours"), 1);
    assert_eq!(metrics.dropped_count("duplicate"), 1);
    assert_eq!(
        metrics.dropped_count("foreign_account"),
        1,
        "the other account's event never reaches the handler"
    );
    assert_eq!(
        seen.iter()
            .filter(|(_, ids)| ids[0] == "i-0000000000000001")
            .count(),
        1,
        "i-1's own event once, the forged one for it never"
    );
    assert_eq!(metrics.dropped_count("retry"), 1);
    assert_eq!(metrics.action_count("replace", "spot_interruption"), 3);
    assert_eq!(
        metrics.action_count("event_only", "rebalance_recommendation"),
        1
    );
    assert_eq!(metrics.action_count("replace", "state_change"), 1);
    assert_eq!(metrics.action_count("replace", "scheduled_change"), 1);
    assert_eq!(
        metrics.action_count("replace", "capacity_reservation_interruption"),
        1
    );
    // Everything but the failed first attempt was deleted; the queue is empty.
    assert_eq!(metrics.deleted.get(), 13);
    let left = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(2)
        .send()
        .await
        .unwrap();
    assert!(left.messages().is_empty(), "{:?}", left.messages());
}
