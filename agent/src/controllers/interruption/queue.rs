//! The SQS consumer of the interruption queue.
//!
//! Long polls (20 s, 10 messages, as Karpenter) so an idle queue costs three requests a
//! minute and a message is seen the moment it is visible. The messages of one receive are
//! handled in parallel and each is deleted only after its action succeeded: if the agent
//! dies mid-way, the message becomes visible again after the visibility timeout and the
//! next leader acts on it. Messages that can never be acted on (malformed, unknown kind, an
//! instance that is not ours, a duplicate, an event of another account than the queue's)
//! are counted by reason, logged once and deleted, so a poison message cannot wedge the
//! queue.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;

use crate::cloud::sqs::{Queue, QueueMessage};

use crate::controllers::operator::metrics::interruption::InterruptionMetrics;
use crate::controllers::operator::metrics::l;
use crate::interruption::messages::{self, Event};

/// One event, with what the handler needs to measure latency.
#[derive(Debug, Clone)]
pub struct Received {
    pub event: Event,
    /// When SQS accepted the message (its `SentTimestamp`): "visible in the queue".
    pub sent_at: SystemTime,
    pub message_id: String,
}

/// What a handler did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acted (the label is the action): the message is deleted.
    Acted(&'static str),
    /// Nothing to do (the label is the reason): counted and deleted.
    Dropped(&'static str),
}

/// Acts on events. An `Err` leaves the message in the queue for redelivery.
#[async_trait::async_trait]
pub trait Handler: Send + Sync + 'static {
    async fn handle(&self, received: Received) -> Result<Outcome, String>;
}

/// Long-poll settings (Karpenter's: 20 s, 10 messages).
#[derive(Debug, Clone)]
pub struct PollSettings {
    pub wait_seconds: i32,
    pub max_messages: i32,
    /// Pause after a failed receive, so a broken queue does not spin.
    pub error_backoff: Duration,
    /// Concurrent long polls: one receive returns at most 10 messages, so a burst (a
    /// Spot storm) drains several times faster with a few pollers; idle, each costs three
    /// requests a minute.
    pub pollers: usize,
}

impl Default for PollSettings {
    fn default() -> Self {
        PollSettings {
            wait_seconds: 20,
            max_messages: 10,
            error_backoff: Duration::from_secs(5),
            pollers: 4,
        }
    }
}

pub struct Consumer {
    queue: Arc<dyn Queue>,
    /// The queue's account: events EventBridge stamped with any other (a misrouted rule, a
    /// bus shared across accounts) are dropped. It is no guard against a forger who may
    /// send to the queue, who writes the whole body; the queue policy is.
    account: Option<String>,
    settings: PollSettings,
    metrics: Arc<InterruptionMetrics>,
}

impl Consumer {
    pub fn new(
        queue: Arc<dyn Queue>,
        settings: PollSettings,
        metrics: Arc<InterruptionMetrics>,
    ) -> Consumer {
        let account = messages::queue_account(queue.url()).map(str::to_string);
        Consumer {
            queue,
            account,
            settings,
            metrics,
        }
    }

    pub fn metrics(&self) -> &Arc<InterruptionMetrics> {
        &self.metrics
    }

    /// Polls forever with [`PollSettings::pollers`] concurrent long polls (until the
    /// task is dropped).
    pub async fn run(self: Arc<Self>, handler: Arc<dyn Handler>) {
        tracing::info!(queue = %self.queue.url(), pollers = self.settings.pollers, "interruption queue consumer started");
        let loops = (0..self.settings.pollers.max(1)).map(|_| {
            let me = self.clone();
            let handler = handler.clone();
            async move {
                loop {
                    if let Err(e) = me.poll_once(handler.as_ref()).await {
                        tracing::warn!(error = %e, "receiving from the interruption queue");
                        tokio::time::sleep(me.settings.error_backoff).await;
                    }
                }
            }
        });
        join_all(loops).await;
    }

    /// One receive: handles what came back in parallel, deletes what was acted on or
    /// dropped. Returns how many messages were received.
    pub async fn poll_once(&self, handler: &dyn Handler) -> Result<usize, String> {
        let msgs = self
            .queue
            .receive(self.settings.max_messages, self.settings.wait_seconds)
            .await
            .map_err(|e| {
                self.metrics
                    .errors
                    .get_or_create(&l(&[("operation", &e.operation), ("code", &e.code)]))
                    .inc();
                e.to_string()
            })?;
        let n = msgs.len();
        if n == 0 {
            // An empty long poll: nothing is waiting.
            self.metrics.message_age.set(0.0);
            return Ok(0);
        }
        let oldest = msgs
            .iter()
            .filter_map(|m| SystemTime::now().duration_since(m.sent_at?).ok())
            .max()
            .unwrap_or_default();
        self.metrics.message_age.set(oldest.as_secs_f64());
        self.metrics.in_flight.inc_by(n as i64);
        let results = join_all(msgs.iter().map(|m| self.handle_one(handler, m))).await;
        self.metrics.in_flight.dec_by(n as i64);
        let done: Vec<&QueueMessage> = msgs
            .iter()
            .zip(results)
            .filter_map(|(m, delete)| delete.then_some(m))
            .collect();
        self.delete(&done).await;
        Ok(n)
    }

    /// Handles one message; true when it should be deleted.
    async fn handle_one(&self, handler: &dyn Handler, m: &QueueMessage) -> bool {
        let id = m.id.clone();
        let body = m.body.as_str();
        let event = match messages::parse(body) {
            Ok(e) => e,
            Err(e) => {
                self.metrics.received_kind("unparsed");
                self.metrics.drop_reason(e.reason());
                // Logged once: the message is deleted below, so it never comes back.
                tracing::warn!(message_id = %id, reason = e.reason(), error = %e, "interruption message dropped");
                return true;
            }
        };
        let kind = event.kind();
        self.metrics.received_kind(kind.as_str());
        if let Some(account) = self.account.as_deref().filter(|a| *a != event.account) {
            self.metrics.drop_reason("foreign_account");
            tracing::warn!(message_id = %id, event = %event.id, kind = kind.as_str(), event_account = %event.account, queue_account = account, "interruption message dropped: its event is from another account than the queue's");
            return true;
        }
        let sent_at = m.sent_at.unwrap_or_else(SystemTime::now);
        let event_id = event.id.clone();
        match handler
            .handle(Received {
                event,
                sent_at,
                message_id: id.clone(),
            })
            .await
        {
            Ok(Outcome::Acted(action)) => {
                self.metrics.action(action, kind.as_str());
                true
            }
            Ok(Outcome::Dropped(reason)) => {
                self.metrics.drop_reason(reason);
                tracing::info!(message_id = %id, event = %event_id, kind = kind.as_str(), reason, "interruption message needs no action");
                true
            }
            Err(e) => {
                self.metrics.drop_reason("retry");
                tracing::warn!(message_id = %id, event = %event_id, kind = kind.as_str(), error = %e, "interruption action failed; the message will be redelivered");
                false
            }
        }
    }

    async fn delete(&self, msgs: &[&QueueMessage]) {
        if msgs.is_empty() {
            return;
        }
        match self.queue.delete(msgs).await {
            Ok(out) => {
                self.metrics.deleted.inc_by(out.deleted as u64);
                for (code, message) in &out.failed {
                    self.metrics
                        .errors
                        .get_or_create(&l(&[
                            ("operation", "sqs:DeleteMessageBatch"),
                            ("code", code),
                        ]))
                        .inc();
                    tracing::warn!(code = %code, message = ?message, "deleting an interruption message failed; it will be redelivered");
                }
            }
            Err(e) => {
                self.metrics
                    .errors
                    .get_or_create(&l(&[("operation", &e.operation), ("code", &e.code)]))
                    .inc();
                tracing::warn!(error = %e, "deleting interruption messages");
            }
        }
    }
}
