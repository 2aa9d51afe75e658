//! STS: who the provider's credentials belong to.

use super::error::{AwsError, AwsResultExt};

/// The caller's identity, as `sts:GetCallerIdentity` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerIdentity {
    pub account_id: String,
    pub arn: String,
    pub user_id: String,
}

pub async fn caller_identity(client: &aws_sdk_sts::Client) -> Result<CallerIdentity, AwsError> {
    let out = client
        .get_caller_identity()
        .send()
        .await
        .aws("sts:GetCallerIdentity")?;
    Ok(CallerIdentity {
        account_id: out.account().unwrap_or_default().to_string(),
        arn: out.arn().unwrap_or_default().to_string(),
        user_id: out.user_id().unwrap_or_default().to_string(),
    })
}

/// The ARN partition of a region (`aws`, `aws-cn`, `aws-us-gov`...), needed to build ARNs
/// before the object exists.
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("us-iso-") {
        "aws-iso"
    } else if region.starts_with("us-isob-") {
        "aws-iso-b"
    } else if region.starts_with("eu-isoe-") {
        "aws-iso-e"
    } else {
        "aws"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions() {
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
    }
}
