//! The AWS SDK for Rust pointed at the emulator, for looking at remote objects directly.
//!
//! Tests are plain `#[test]` functions that run terraform synchronously, so this owns a
//! small tokio runtime and offers blocking helpers; `block_on` is there for anything else.

use aws_credential_types::Credentials;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_types::region::Region;
use aws_types::SdkConfig;
use joiner_test_support::MotoServer;
use std::collections::HashMap;
use std::future::Future;

pub struct Aws {
    rt: tokio::runtime::Runtime,
    config: SdkConfig,
}

impl Aws {
    /// Clients for the emulator: its endpoint, dummy credentials, us-east-1.
    pub fn new(moto: &MotoServer) -> Aws {
        Aws::with_credentials(
            moto,
            Credentials::new(
                "testing",
                "testing",
                Some("testing".into()),
                None,
                "joiner-e2e",
            ),
        )
    }

    /// Clients for the emulator signing as another principal (an assumed role's session, a
    /// user's key): what matters when IAM is enforced.
    pub fn with_credentials(moto: &MotoServer, credentials: Credentials) -> Aws {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let config = SdkConfig::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .endpoint_url(moto.endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(
                aws_credential_types::provider::SharedCredentialsProvider::new(credentials),
            )
            .http_client(http)
            .build();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime for the AWS SDK");
        Aws { rt, config }
    }

    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn sdk_config(&self) -> &SdkConfig {
        &self.config
    }

    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        let _guard = self.rt.enter();
        aws_sdk_sqs::Client::new(&self.config)
    }

    pub fn sts(&self) -> aws_sdk_sts::Client {
        let _guard = self.rt.enter();
        aws_sdk_sts::Client::new(&self.config)
    }

    /// The account the emulator says we are (GetCallerIdentity).
    pub fn account_id(&self) -> String {
        let out = self
            .block_on(self.sts().get_caller_identity().send())
            .expect("sts:GetCallerIdentity");
        out.account().unwrap_or_default().to_string()
    }

    /// The queue's URL, or `None` when no queue has that name.
    pub fn queue_url(&self, name: &str) -> Option<String> {
        match self.block_on(self.sqs().get_queue_url().queue_name(name).send()) {
            Ok(out) => out.queue_url().map(str::to_string),
            Err(e) => {
                let svc = e.into_service_error();
                assert!(
                    svc.is_queue_does_not_exist(),
                    "sqs:GetQueueUrl({name}) failed unexpectedly: {svc:?}"
                );
                None
            }
        }
    }

    /// Every attribute of the queue at `url` (`All`).
    pub fn queue_attributes(&self, url: &str) -> HashMap<String, String> {
        let out = self
            .block_on(
                self.sqs()
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
                    .send(),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "sqs:GetQueueAttributes({url}): {:?}",
                    e.into_service_error()
                )
            });
        out.attributes()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.as_str().to_string(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The queue's tags.
    pub fn queue_tags(&self, url: &str) -> HashMap<String, String> {
        let out = self
            .block_on(self.sqs().list_queue_tags().queue_url(url).send())
            .unwrap_or_else(|e| panic!("sqs:ListQueueTags({url}): {:?}", e.into_service_error()));
        out.tags().cloned().unwrap_or_default()
    }

    /// Deletes a queue behind Terraform's back, to simulate drift.
    pub fn delete_queue(&self, url: &str) {
        self.block_on(self.sqs().delete_queue().queue_url(url).send())
            .unwrap_or_else(|e| panic!("sqs:DeleteQueue({url}): {:?}", e.into_service_error()));
    }

    /// Every queue URL in the emulator.
    pub fn queue_urls(&self) -> Vec<String> {
        let out = self
            .block_on(self.sqs().list_queues().send())
            .unwrap_or_else(|e| panic!("sqs:ListQueues: {:?}", e.into_service_error()));
        out.queue_urls().to_vec()
    }
}
