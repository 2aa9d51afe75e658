//! End-to-end harness: the real `terraform` binary against the freshly built provider and
//! the AWS emulator, replaying the steps terraform-plugin-testing replays.
//!
//! A test reads like the lifecycle it checks:
//!
//! ```no_run
//! use joiner_e2e::{Aws, MotoServer, Workspace};
//!
//! let moto = MotoServer::start();
//! let tf = Workspace::new(&moto);
//! tf.write_config(r#"resource "joiner_interruption_queue" "q" { name = "demo" }"#);
//! tf.apply();
//! tf.plan_is_empty();
//! tf.refresh_plan_is_empty();
//! let url = tf.attr("joiner_interruption_queue.q", "url");
//! tf.import_verify("joiner_interruption_queue.q", url.as_str().unwrap(), &[]);
//! let aws = Aws::new(&moto);
//! assert!(aws.queue_url("demo").is_some());
//! tf.destroy();
//! ```
//!
//! Why a harness of our own rather than Go's terraform-plugin-testing: the provider is Rust,
//! and the tests want the AWS SDK for Rust next to Terraform to look at the remote object.

mod aws;
mod diagnostics;
mod provider;
mod reattach;
mod run;
mod state;
mod usage;
mod workspace;

pub use aws::Aws;
pub use diagnostics::Diagnostic;
pub use joiner_test_support::{agent_bin, provider_bin, terraform_bin, MotoServer};
pub use provider::{kubernetes_provider_block, PROVIDER_ADDRESS, PROVIDER_SOURCE};
pub use reattach::DebugProvider;
pub use run::Run;
pub use state::{Plan, State};
pub use usage::{measure_provider, take_usage, ProviderUsage};
pub use workspace::Workspace;
