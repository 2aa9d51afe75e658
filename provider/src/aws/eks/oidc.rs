//! The IAM OIDC identity provider for a cluster's service-account issuer (IRSA).
//!
//! IRSA is how pods on Fargate get AWS credentials (Fargate does not support EKS Pod
//! Identity), and the agent runs on Fargate, so the cluster creates this by default.
//!
//! Thumbprint: IAM requires one in the API, but for issuers hosted by AWS (EKS) it
//! validates the TLS chain against its own trusted root CAs and ignores the value. We
//! default to the SHA-1 of the root CA that serves `oidc.eks.*.amazonaws.com` instead of
//! dialling the issuer at plan time, which would need network access to the issuer from
//! wherever Terraform runs; `oidc_thumbprints` overrides it.

use std::collections::BTreeMap;

use aws_sdk_iam::types::Tag;
use aws_sdk_iam::Client;
use tokio::time::Instant;

use super::EksError;
use crate::aws::error::AwsResultExt;
use crate::aws::retry::retry;

/// SHA-1 thumbprint of the root CA in the certificate chain of EKS OIDC issuers.
pub const EKS_OIDC_ROOT_CA_THUMBPRINT: &str = "9e99a48a9960b14926bb7f3b02e22da2b0ab7280";
/// The audience IRSA tokens are minted for.
pub const STS_AUDIENCE: &str = "sts.amazonaws.com";

/// `https://oidc.eks.../id/X` → `oidc.eks.../id/X`, the form IAM uses in provider ARNs and
/// in trust-policy condition keys.
pub fn issuer_host_path(issuer: &str) -> &str {
    issuer
        .strip_prefix("https://")
        .unwrap_or(issuer)
        .trim_end_matches('/')
}

fn iam_tags(tags: &BTreeMap<String, String>) -> Option<Vec<Tag>> {
    if tags.is_empty() {
        return None;
    }
    Some(
        tags.iter()
            .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
            .collect(),
    )
}

/// Creates the OIDC provider for `issuer` and returns its ARN. If one already exists for
/// this issuer (a cluster recreated after out-of-band deletion left it behind, or it was
/// made by hand), it is adopted: its thumbprints and tags are brought in line, since an
/// issuer URL is unique to one cluster.
pub async fn ensure_provider(
    iam: &Client,
    issuer: &str,
    thumbprints: &[String],
    tags: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<String, EksError> {
    let url = format!("https://{}", issuer_host_path(issuer));
    let created = retry(deadline, || async {
        iam.create_open_id_connect_provider()
            .url(&url)
            .client_id_list(STS_AUDIENCE)
            .set_thumbprint_list(Some(thumbprints.to_vec()))
            .set_tags(iam_tags(tags))
            .send()
            .await
            .aws("iam:CreateOpenIDConnectProvider")
    })
    .await;
    match created {
        Ok(out) => Ok(out
            .open_id_connect_provider_arn()
            .unwrap_or_default()
            .to_string()),
        Err(e) if e.is_already_exists() => {
            let Some(arn) = find_provider(iam, issuer, deadline).await? else {
                return Err(e.into());
            };
            tracing::info!(%arn, "adopting the existing IAM OIDC provider for this issuer");
            retry(deadline, || async {
                iam.update_open_id_connect_provider_thumbprint()
                    .open_id_connect_provider_arn(&arn)
                    .set_thumbprint_list(Some(thumbprints.to_vec()))
                    .send()
                    .await
                    .aws("iam:UpdateOpenIDConnectProviderThumbprint")
            })
            .await?;
            if let Some(tags) = iam_tags(tags) {
                retry(deadline, || async {
                    iam.tag_open_id_connect_provider()
                        .open_id_connect_provider_arn(&arn)
                        .set_tags(Some(tags.clone()))
                        .send()
                        .await
                        .aws("iam:TagOpenIDConnectProvider")
                })
                .await?;
            }
            Ok(arn)
        }
        Err(e) => Err(e.into()),
    }
}

/// The ARN of the OIDC provider registered for `issuer`, if any.
pub async fn find_provider(
    iam: &Client,
    issuer: &str,
    deadline: Instant,
) -> Result<Option<String>, EksError> {
    let suffix = format!(":oidc-provider/{}", issuer_host_path(issuer));
    let out = retry(deadline, || async {
        iam.list_open_id_connect_providers()
            .send()
            .await
            .aws("iam:ListOpenIDConnectProviders")
    })
    .await?;
    Ok(out
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
        .find(|arn| arn.ends_with(&suffix))
        .map(str::to_string))
}

/// True when the provider still exists (drift detection).
pub async fn exists(iam: &Client, arn: &str, deadline: Instant) -> Result<bool, EksError> {
    let res = retry(deadline, || async {
        iam.get_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
            .aws("iam:GetOpenIDConnectProvider")
    })
    .await;
    match res {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the provider; already gone is success.
pub async fn delete(iam: &Client, arn: &str, deadline: Instant) -> Result<(), EksError> {
    let res = retry(deadline, || async {
        iam.delete_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
            .aws("iam:DeleteOpenIDConnectProvider")
    })
    .await;
    match res {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_forms() {
        assert_eq!(
            issuer_host_path("https://oidc.eks.us-east-1.amazonaws.com/id/ABC/"),
            "oidc.eks.us-east-1.amazonaws.com/id/ABC"
        );
        assert_eq!(issuer_host_path("oidc.example/id/X"), "oidc.example/id/X");
    }
}
