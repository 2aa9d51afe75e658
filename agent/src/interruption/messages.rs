//! The EventBridge events the interruption queue carries, as typed structs.
//!
//! The provider's `joiner_interruption_rules` creates one rule per kind (see
//! `provider/src/resources/interruption_rules/kinds.rs`), each targeting the queue, so an SQS
//! message body is one EventBridge event: an envelope (`version`, `id`, `detail-type`,
//! `source`, `time`, `resources`, ...) around a kind-specific `detail`.
//!
//! Parsing is strict about what the agent acts on and lax about everything else: unknown
//! fields are ignored (AWS adds fields without notice), but a missing instance ID or state is
//! an error with the field's path, because acting on half an event could drain the wrong
//! node. Every error has a short [`ParseError::reason`] used as a metric label, so a bad
//! message is counted, logged once and deleted, never retried forever.

use serde::Deserialize;
use serde_json::Value;

/// The five event kinds the provider's rules deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    SpotInterruption,
    Rebalance,
    StateChange,
    ScheduledChange,
    CapacityReservationInterruption,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::SpotInterruption,
        Kind::Rebalance,
        Kind::StateChange,
        Kind::ScheduledChange,
        Kind::CapacityReservationInterruption,
    ];

    /// The envelope's `source` and `detail-type` for this kind.
    pub fn source_and_detail_type(self) -> (&'static str, &'static str) {
        match self {
            Kind::SpotInterruption => ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
            Kind::Rebalance => ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
            Kind::StateChange => ("aws.ec2", "EC2 Instance State-change Notification"),
            Kind::ScheduledChange => ("aws.health", "AWS Health Event"),
            Kind::CapacityReservationInterruption => (
                "aws.ec2",
                "EC2 Capacity Reservation Instance Interruption Warning",
            ),
        }
    }

    /// The EventBridge event pattern of the rule that delivers this kind to the queue. The
    /// provider's `joiner_interruption_rules` creates its rules with exactly these, and the
    /// agent's end-to-end tests route their events through the same, so the rules and what
    /// the agent is tested against cannot drift apart.
    pub fn event_pattern(self) -> Value {
        let (source, detail_type) = self.source_and_detail_type();
        let mut p = serde_json::json!({"source": [source], "detail-type": [detail_type]});
        match self {
            // Only the states the agent acts on: `pending` and `running` events would be
            // most of the traffic and all of it noise for the queue.
            Kind::StateChange => {
                p["detail"] = serde_json::json!({"state": ["stopping", "stopped", "shutting-down", "terminated"]})
            }
            Kind::ScheduledChange => {
                p["detail"] = serde_json::json!({"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]})
            }
            Kind::SpotInterruption | Kind::Rebalance | Kind::CapacityReservationInterruption => {}
        }
        p
    }

    pub fn from_envelope(source: &str, detail_type: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.source_and_detail_type() == (source, detail_type))
    }

    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterruption => "spot_interruption",
            Kind::Rebalance => "rebalance_recommendation",
            Kind::StateChange => "state_change",
            Kind::ScheduledChange => "scheduled_change",
            Kind::CapacityReservationInterruption => "capacity_reservation_interruption",
        }
    }
}

/// One parsed event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// EventBridge's event ID: duplicates (EventBridge delivers at least once) share it.
    pub id: String,
    /// When AWS emitted the event (RFC 3339), as sent.
    pub time: String,
    pub account: String,
    pub region: String,
    pub detail: Detail,
}

impl Event {
    pub fn kind(&self) -> Kind {
        match &self.detail {
            Detail::SpotInterruption(_) => Kind::SpotInterruption,
            Detail::Rebalance(_) => Kind::Rebalance,
            Detail::StateChange(_) => Kind::StateChange,
            Detail::ScheduledChange(_) => Kind::ScheduledChange,
            Detail::CapacityReservationInterruption(_) => Kind::CapacityReservationInterruption,
        }
    }

    /// The EC2 instances the event is about.
    pub fn instance_ids(&self) -> Vec<&str> {
        match &self.detail {
            Detail::SpotInterruption(d) => vec![d.instance_id.as_str()],
            Detail::Rebalance(d) => vec![d.instance_id.as_str()],
            Detail::StateChange(d) => vec![d.instance_id.as_str()],
            Detail::ScheduledChange(d) => d
                .affected_entities
                .iter()
                .map(|e| e.entity_value.as_str())
                .collect(),
            Detail::CapacityReservationInterruption(d) => vec![d.instance_id.as_str()],
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    SpotInterruption(SpotInterruption),
    Rebalance(Rebalance),
    StateChange(StateChange),
    ScheduledChange(ScheduledChange),
    CapacityReservationInterruption(CapacityReservationInterruption),
}

/// `aws.ec2` / `EC2 Spot Instance Interruption Warning`: two minutes' notice.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SpotInterruption {
    #[serde(rename = "instance-id")]
    pub instance_id: String,
    /// `terminate`, `stop` or `hibernate`.
    #[serde(rename = "instance-action")]
    pub instance_action: String,
}

/// `aws.ec2` / `EC2 Instance Rebalance Recommendation`: elevated risk of interruption.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Rebalance {
    #[serde(rename = "instance-id")]
    pub instance_id: String,
}

/// `aws.ec2` / `EC2 Instance State-change Notification`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StateChange {
    #[serde(rename = "instance-id")]
    pub instance_id: String,
    /// pending, running, stopping, stopped, shutting-down, terminated.
    pub state: String,
}

/// `aws.health` / `AWS Health Event`: scheduled maintenance (retirement, reboot).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledChange {
    pub service: String,
    pub event_type_category: String,
    #[serde(default)]
    pub event_type_code: String,
    #[serde(default)]
    pub event_arn: String,
    #[serde(default)]
    pub start_time: Option<String>,
    pub affected_entities: Vec<AffectedEntity>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AffectedEntity {
    pub entity_value: String,
}

/// `aws.ec2` / `EC2 Capacity Reservation Instance Interruption Warning`: an instance in an
/// interruptible capacity reservation is being reclaimed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CapacityReservationInterruption {
    #[serde(rename = "instance-id")]
    pub instance_id: String,
    #[serde(rename = "instance-action", default)]
    pub instance_action: String,
}

/// Why a message could not be turned into an [`Event`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("message body is not a JSON object: {0}")]
    Malformed(String),
    #[error(
        "not an event the agent handles: source {event_source:?}, detail-type {detail_type:?}"
    )]
    UnknownKind {
        event_source: String,
        detail_type: String,
    },
    #[error("{kind:?} event {id:?}: {message}")]
    InvalidDetail {
        kind: Kind,
        id: String,
        message: String,
    },
}

impl ParseError {
    /// Metric label for the drop.
    pub fn reason(&self) -> &'static str {
        match self {
            ParseError::Malformed(_) => "malformed",
            ParseError::UnknownKind { .. } => "unknown_kind",
            ParseError::InvalidDetail { .. } => "invalid_detail",
        }
    }
}

/// The EventBridge envelope; `detail` is decoded once the kind is known.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: String,
    #[serde(default)]
    source: String,
    #[serde(rename = "detail-type", default)]
    detail_type: String,
    #[serde(default)]
    time: String,
    #[serde(default)]
    account: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    detail: Option<Value>,
}

/// The account that owns a queue, from its URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`,
/// and the same path on any endpoint). EventBridge stamps every event with the account it
/// comes from (EventBridge user guide, "Amazon EventBridge events": `account`, "the
/// 12-digit number identifying an AWS account"); EC2's and Health's events about an
/// instance carry the account it runs in. joiner's rules are in the queue's account, so an
/// event of another account came from a rule that is not ours.
pub fn queue_account(url: &str) -> Option<&str> {
    let mut segments = url.trim_end_matches('/').rsplit('/');
    let _name = segments.next()?;
    let account = segments.next()?;
    (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())).then_some(account)
}

/// Parses an SQS message body.
pub fn parse(body: &str) -> Result<Event, ParseError> {
    let env: Envelope = serde_json::from_str(body)
        .map_err(|e| ParseError::Malformed(format!("{e} (body starts {:?})", preview(body))))?;
    let kind = Kind::from_envelope(&env.source, &env.detail_type).ok_or_else(|| {
        ParseError::UnknownKind {
            event_source: env.source.clone(),
            detail_type: env.detail_type.clone(),
        }
    })?;
    let invalid = |message: String| ParseError::InvalidDetail {
        kind,
        id: env.id.clone(),
        message,
    };
    let detail = env
        .detail
        .clone()
        .ok_or_else(|| invalid("missing field `detail`".into()))?;
    fn decode<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, String> {
        serde_json::from_value(v).map_err(|e| format!("detail: {e}"))
    }
    let detail = match kind {
        Kind::SpotInterruption => decode(detail).map(Detail::SpotInterruption),
        Kind::Rebalance => decode(detail).map(Detail::Rebalance),
        Kind::StateChange => decode(detail).map(Detail::StateChange),
        Kind::ScheduledChange => decode(detail).map(Detail::ScheduledChange),
        Kind::CapacityReservationInterruption => {
            decode(detail).map(Detail::CapacityReservationInterruption)
        }
    }
    .map_err(invalid)?;
    let event = Event {
        id: env.id,
        time: env.time,
        account: env.account,
        region: env.region,
        detail,
    };
    if let Some(bad) = event
        .instance_ids()
        .into_iter()
        .find(|id| !id.starts_with("i-"))
    {
        return Err(ParseError::InvalidDetail {
            kind,
            id: event.id.clone(),
            message: format!("{bad:?} is not an EC2 instance ID"),
        });
    }
    if event.instance_ids().is_empty() {
        return Err(ParseError::InvalidDetail {
            kind,
            id: event.id.clone(),
            message: "names no instance".into(),
        });
    }
    Ok(event)
}

/// The first characters of a body, for an error message that does not dump the whole thing.
fn preview(body: &str) -> String {
    body.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_url_names_its_account() {
        assert_eq!(
            queue_account("https://sqs.us-east-1.amazonaws.com/123456789012/joiner-prod"),
            Some("123456789012")
        );
        assert_eq!(
            queue_account("http://127.0.0.1:4566/123456789012/q/"),
            Some("123456789012")
        );
        assert_eq!(queue_account("https://sqs.us-east-1.amazonaws.com/q"), None);
        assert_eq!(queue_account("memory://queue"), None);
    }

    pub(crate) fn spot(id: &str, instance: &str) -> String {
        serde_json::json!({
            "version": "0",
            "id": id,
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-11-22T18:00:00Z",
            "region": "us-east-1",
            "resources": [format!("arn:aws:ec2:us-east-1b:instance/{instance}")],
            "detail": {"instance-id": instance, "instance-action": "terminate"}
        })
        .to_string()
    }

    #[test]
    fn spot_warning() {
        let e = parse(&spot("e1", "i-0abc")).unwrap();
        assert_eq!(e.kind(), Kind::SpotInterruption);
        assert_eq!(e.id, "e1");
        assert_eq!(e.instance_ids(), vec!["i-0abc"]);
        match &e.detail {
            Detail::SpotInterruption(d) => assert_eq!(d.instance_action, "terminate"),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn rebalance_and_capacity_reservation() {
        let body = r#"{"version":"0","id":"r1","detail-type":"EC2 Instance Rebalance Recommendation",
            "source":"aws.ec2","account":"1","time":"2026-11-22T18:00:00Z","region":"us-east-1",
            "resources":["arn:aws:ec2:us-east-1b:instance/i-1"],"detail":{"instance-id":"i-1"}}"#;
        let e = parse(body).unwrap();
        assert_eq!(e.kind(), Kind::Rebalance);
        assert_eq!(e.instance_ids(), vec!["i-1"]);
        let body = r#"{"id":"c1","detail-type":"EC2 Capacity Reservation Instance Interruption Warning",
            "source":"aws.ec2","detail":{"instance-id":"i-2","instance-action":"terminate","extra":1}}"#;
        let e = parse(body).unwrap();
        assert_eq!(e.kind(), Kind::CapacityReservationInterruption);
        assert_eq!(e.instance_ids(), vec!["i-2"]);
    }

    #[test]
    fn state_change() {
        let body = r#"{"version":"0","id":"s1","detail-type":"EC2 Instance State-change Notification",
            "source":"aws.ec2","account":"1","time":"t","region":"us-east-1","resources":[],
            "detail":{"instance-id":"i-3","state":"stopping"}}"#;
        let e = parse(body).unwrap();
        match e.detail {
            Detail::StateChange(d) => assert_eq!(d.state, "stopping"),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn health_scheduled_change() {
        let body = r#"{"version":"0","id":"h1","detail-type":"AWS Health Event","source":"aws.health",
            "account":"1","time":"t","region":"us-east-1","resources":["i-4","i-5"],
            "detail":{"eventArn":"arn:aws:health:us-east-1::event/EC2/EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
              "service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
              "eventTypeCategory":"scheduledChange","startTime":"Sat, 05 Jun 2026 15:10:09 GMT",
              "eventDescription":[{"language":"en_US","latestDescription":"retiring"}],
              "affectedEntities":[{"entityValue":"i-4"},{"entityValue":"i-5","tags":{}}]}}"#;
        let e = parse(body).unwrap();
        assert_eq!(e.kind(), Kind::ScheduledChange);
        assert_eq!(e.instance_ids(), vec!["i-4", "i-5"]);
        match e.detail {
            Detail::ScheduledChange(d) => {
                assert_eq!(d.service, "EC2");
                assert_eq!(d.event_type_category, "scheduledChange");
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn malformed_unknown_and_missing() {
        let e = parse("{not json").unwrap_err();
        assert_eq!(e.reason(), "malformed");
        assert!(e.to_string().contains("{not json"), "{e}");
        assert_eq!(parse("[1,2]").unwrap_err().reason(), "malformed");

        let e =
            parse(r#"{"source":"aws.s3","detail-type":"Object Created","detail":{}}"#).unwrap_err();
        assert_eq!(e.reason(), "unknown_kind");
        assert!(e.to_string().contains("Object Created"));

        let e = parse(
            r#"{"id":"x","source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning",
                "detail":{"instance-action":"terminate"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.reason(), "invalid_detail");
        assert!(e.to_string().contains("instance-id"), "{e}");

        let e = parse(
            r#"{"id":"x","source":"aws.ec2","detail-type":"EC2 Instance State-change Notification"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("detail"), "{e}");

        let e = parse(
            r#"{"id":"x","source":"aws.health","detail-type":"AWS Health Event",
                "detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[]}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("names no instance"), "{e}");

        let e = parse(
            r#"{"id":"x","source":"aws.ec2","detail-type":"EC2 Instance Rebalance Recommendation",
                "detail":{"instance-id":"vol-1"}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not an EC2 instance ID"), "{e}");
    }

    #[test]
    fn every_kind_round_trips_its_envelope() {
        for k in Kind::ALL {
            let (s, d) = k.source_and_detail_type();
            assert_eq!(Kind::from_envelope(s, d), Some(k));
        }
        assert_eq!(
            Kind::from_envelope("aws.health", "EC2 Spot Instance Interruption Warning"),
            None
        );
    }
}
