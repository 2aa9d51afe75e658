//! The `coredns` EKS add-on, switched to Fargate.
//!
//! A cluster with no node groups has nowhere to run CoreDNS unless its pods may go to
//! Fargate. The self-managed CoreDNS that EKS installs carries the annotation
//! `eks.amazonaws.com/compute-type: ec2`, which keeps it off Fargate; people patch it with
//! a Lambda or by hand. Managing it as an add-on with the configuration value
//! `computeType: Fargate` does the same thing through a supported API, and
//! `resolveConflicts = OVERWRITE` takes over the self-managed Deployment.
//!
//! The switch belongs to the Fargate profile that selects kube-system, made after that
//! profile is ACTIVE: Fargate decides where a pod runs when the pod is created, so CoreDNS
//! pods created before the profile exists stay Pending (or make a node autoscaler launch EC2
//! capacity for them) until they are recreated. The add-on update recreates them.

use aws_sdk_eks::types::ResolveConflicts;
use aws_sdk_eks::Client;
use tokio::time::Instant;

use super::{request_token, EksError};
use crate::aws::error::{AwsError, AwsResultExt};
use crate::aws::retry::retry;

pub const COREDNS: &str = "coredns";
/// The add-on configuration that lets CoreDNS pods run on Fargate.
pub const FARGATE_CONFIGURATION: &str = r#"{"computeType":"Fargate"}"#;

/// What became of a request to manage the add-on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddonOutcome {
    /// EKS accepted it; the status it reported (usually CREATING or UPDATING).
    Accepted { status: Option<String> },
    /// The endpoint does not implement the add-on API (an emulator, or a partition without
    /// add-ons). The caller turns this into a warning: CoreDNS stays as it was.
    Unsupported(AwsError),
}

impl AddonOutcome {
    /// The Terraform warning (summary, detail) to show, if any.
    pub fn warning(&self, cluster: &str) -> Option<(String, String)> {
        match self {
            AddonOutcome::Accepted { .. } => None,
            AddonOutcome::Unsupported(e) => Some((
                "CoreDNS was not switched to Fargate: the EKS add-on API is not available".into(),
                // The operation and status say it all; the raw body of a bare 404 is an
                // HTML page that would only bury the advice.
                format!(
                    "{} answered HTTP {} without an AWS error code, which means the endpoint \
                     does not implement the EKS add-on API (local emulators do not). On real EKS, \
                     cluster {cluster:?} would get the managed `coredns` add-on with configuration \
                     {FARGATE_CONFIGURATION}; here CoreDNS keeps its default placement, so it will \
                     not run on Fargate. Set `coredns_on_fargate = false` to silence this warning.",
                    e.operation,
                    e.status.unwrap_or(0)
                ),
            )),
        }
    }
}

/// Creates the `coredns` add-on with `computeType: Fargate`, or updates its configuration
/// when it already exists.
pub async fn ensure_coredns_on_fargate(
    client: &Client,
    cluster: &str,
    deadline: Instant,
) -> Result<AddonOutcome, EksError> {
    let token = request_token();
    let created = retry(deadline, || async {
        client
            .create_addon()
            .cluster_name(cluster)
            .addon_name(COREDNS)
            .configuration_values(FARGATE_CONFIGURATION)
            .resolve_conflicts(ResolveConflicts::Overwrite)
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:CreateAddon")
    })
    .await;
    match created {
        Ok(out) => Ok(AddonOutcome::Accepted {
            status: out
                .addon()
                .and_then(|a| a.status())
                .map(|s| s.as_str().to_string()),
        }),
        Err(e) if e.is_unsupported_api() => Ok(AddonOutcome::Unsupported(e)),
        Err(e) if e.is_already_exists() => {
            let token = request_token();
            let updated = retry(deadline, || async {
                client
                    .update_addon()
                    .cluster_name(cluster)
                    .addon_name(COREDNS)
                    .configuration_values(FARGATE_CONFIGURATION)
                    .resolve_conflicts(ResolveConflicts::Overwrite)
                    .client_request_token(&token)
                    .send()
                    .await
                    .aws("eks:UpdateAddon")
            })
            .await;
            match updated {
                Ok(out) => Ok(AddonOutcome::Accepted {
                    status: out
                        .update()
                        .and_then(|u| u.status())
                        .map(|s| s.as_str().to_string()),
                }),
                Err(e) if e.is_unsupported_api() => Ok(AddonOutcome::Unsupported(e)),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the `coredns` add-on exists with `computeType: Fargate`: `None` when the endpoint
/// has no add-on API (then nothing can be said about drift).
pub async fn coredns_is_on_fargate(
    client: &Client,
    cluster: &str,
    deadline: Instant,
) -> Result<Option<bool>, EksError> {
    let res = retry(deadline, || async {
        client
            .describe_addon()
            .cluster_name(cluster)
            .addon_name(COREDNS)
            .send()
            .await
            .aws("eks:DescribeAddon")
    })
    .await;
    match res {
        Ok(out) => Ok(Some(
            out.addon()
                .and_then(|a| a.configuration_values())
                .is_some_and(is_fargate_configuration),
        )),
        Err(e) if e.is_unsupported_api() => Ok(None),
        Err(e) if e.is_not_found() => Ok(Some(false)),
        Err(e) => Err(e.into()),
    }
}

/// Whether add-on configuration values put CoreDNS on Fargate.
pub fn is_fargate_configuration(values: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(values)
        .ok()
        .is_some_and(|v| v["computeType"] == "Fargate")
}

/// Stops managing the add-on but leaves CoreDNS running (`preserve = true`): turning
/// `coredns_on_fargate` off must never take DNS away from a live cluster.
pub async fn release_coredns(
    client: &Client,
    cluster: &str,
    deadline: Instant,
) -> Result<AddonOutcome, EksError> {
    let res = retry(deadline, || async {
        client
            .delete_addon()
            .cluster_name(cluster)
            .addon_name(COREDNS)
            .preserve(true)
            .send()
            .await
            .aws("eks:DeleteAddon")
    })
    .await;
    match res {
        Ok(out) => Ok(AddonOutcome::Accepted {
            status: out
                .addon()
                .and_then(|a| a.status())
                .map(|s| s.as_str().to_string()),
        }),
        Err(e) if e.is_unsupported_api() => Ok(AddonOutcome::Unsupported(e)),
        Err(e) if e.is_not_found() => Ok(AddonOutcome::Accepted { status: None }),
        Err(e) => Err(e.into()),
    }
}
