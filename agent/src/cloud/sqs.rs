//! The interruption queue behind a trait, as EC2 sits behind [`super::Cloud`]: the
//! interruption controller receives and deletes messages through [`Queue`] and never builds
//! an SQS request or an SDK configuration. [`SqsQueue`] is the one implementation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};

use super::aws::{load_config, AwsSettings};
use super::CloudError;

/// One received message.
#[derive(Debug, Clone)]
pub struct QueueMessage {
    pub id: String,
    /// What deleting it takes.
    pub receipt_handle: String,
    pub body: String,
    /// When SQS accepted it (`SentTimestamp`): "visible in the queue".
    pub sent_at: Option<SystemTime>,
}

/// What a batch delete did: how many went, and the code of each entry that did not.
#[derive(Debug, Default)]
pub struct Deleted {
    pub deleted: usize,
    pub failed: Vec<(String, Option<String>)>,
}

#[async_trait::async_trait]
pub trait Queue: Send + Sync {
    /// The queue's URL, for logs.
    fn url(&self) -> &str;
    /// One long poll: up to `max` messages, waiting up to `wait_seconds` for the first.
    async fn receive(&self, max: i32, wait_seconds: i32) -> Result<Vec<QueueMessage>, CloudError>;
    /// Deletes the messages (at most 10, SQS's batch size).
    async fn delete(&self, messages: &[&QueueMessage]) -> Result<Deleted, CloudError>;
}

/// [`Queue`] on Amazon SQS.
pub struct SqsQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

/// `operation failed: code: message`, as every AWS error the agent reports.
fn sqs_error<E, R>(operation: &str, e: &aws_sdk_sqs::error::SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = e
        .as_service_error()
        .and_then(|s| s.code())
        .unwrap_or("Unknown")
        .to_string();
    let message = e
        .as_service_error()
        .and_then(|s| s.message().map(str::to_string))
        .unwrap_or_else(|| aws_smithy_types::error::display::DisplayErrorContext(e).to_string());
    CloudError::new(operation, &code, message)
}

impl SqsQueue {
    pub fn new(sqs: aws_sdk_sqs::Client, url: &str) -> SqsQueue {
        SqsQueue {
            sqs,
            url: url.to_string(),
        }
    }

    /// The client from the agent's AWS settings (region, endpoint, credentials).
    pub async fn from_settings(settings: &AwsSettings, url: &str) -> SqsQueue {
        let sdk = load_config(settings).await;
        SqsQueue::new(aws_sdk_sqs::Client::new(&sdk), url)
    }
}

#[async_trait::async_trait]
impl Queue for SqsQueue {
    fn url(&self) -> &str {
        &self.url
    }

    async fn receive(&self, max: i32, wait_seconds: i32) -> Result<Vec<QueueMessage>, CloudError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| sqs_error("sqs:ReceiveMessage", &e))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| QueueMessage {
                sent_at: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                    .and_then(|t| t.parse::<u64>().ok())
                    .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
                id: m.message_id.unwrap_or_default(),
                receipt_handle: m.receipt_handle.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
            })
            .collect())
    }

    async fn delete(&self, messages: &[&QueueMessage]) -> Result<Deleted, CloudError> {
        if messages.is_empty() {
            return Ok(Deleted::default());
        }
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(&m.receipt_handle)
                    .build()
                    .ok()
            })
            .collect();
        let out = self
            .sqs
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sqs_error("sqs:DeleteMessageBatch", &e))?;
        Ok(Deleted {
            deleted: out.successful.len(),
            failed: out
                .failed
                .into_iter()
                .map(|f| (f.code, f.message))
                .collect(),
        })
    }
}
