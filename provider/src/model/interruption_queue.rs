//! `joiner_interruption_queue` as a struct.

use std::collections::BTreeMap;

use super::attr::model;
use crate::aws::sqs::Encryption;
use crate::protocol::prelude::*;

/// SQS's own default would be 4 days; interruption notices are worthless after minutes.
pub const DEFAULT_RETENTION_SECONDS: i64 = 300;

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct InterruptionQueueModel {
        pub name: Option<String>,
        pub message_retention_seconds: Option<i64>,
        pub kms_key_id: Option<String>,
        /// `None` is a null attribute, `Some(empty)` is `tags = {}`: SQS reports both as no
        /// tags, and each must read back the way the configuration wrote it.
        pub tags: Option<BTreeMap<String, String>>,
        pub arn: Option<String>,
        pub url: Option<String>,
        pub policy: Option<String>,
        pub timeouts: Value,
    }
}

impl InterruptionQueueModel {
    pub fn retention(&self) -> i64 {
        self.message_retention_seconds
            .unwrap_or(DEFAULT_RETENTION_SECONDS)
    }

    /// SSE-KMS with the given key, else SSE-SQS: the queue is never unencrypted.
    pub fn encryption(&self) -> Encryption {
        match &self.kms_key_id {
            Some(key) => Encryption::Kms(key.clone()),
            None => Encryption::SqsManaged,
        }
    }

    /// The tags to set; no tags when the attribute is null.
    pub fn tag_map(&self) -> BTreeMap<String, String> {
        self.tags.clone().unwrap_or_default()
    }
}
