//! ARNs and partitions.
//!
//! Policies must name resources in the partition the cluster lives in (`aws`, `aws-cn`,
//! `aws-us-gov`...): a policy written for `arn:aws:` silently grants nothing in China or
//! GovCloud. Everything partition-specific is derived here from an ARN the user already
//! gave us (the cluster's) or from the region, never hard-coded at a call site.

use std::fmt;

/// A parsed ARN: `arn:<partition>:<service>:<region>:<account>:<resource>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arn {
    pub partition: String,
    pub service: String,
    pub region: String,
    pub account: String,
    pub resource: String,
}

/// Why a string is not an acceptable ARN; rendered into a plan-time diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArnError(pub String);

impl fmt::Display for ArnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArnError {}

const PARTITIONS: &[&str] = &[
    "aws",
    "aws-cn",
    "aws-us-gov",
    "aws-iso",
    "aws-iso-b",
    "aws-iso-e",
    "aws-iso-f",
    "aws-eusc",
];

impl Arn {
    /// Parses and checks the shape; `service` and the `resource` prefix are checked by
    /// [`Arn::expect`].
    pub fn parse(s: &str) -> Result<Arn, ArnError> {
        let parts: Vec<&str> = s.splitn(6, ':').collect();
        if parts.len() != 6 || parts[0] != "arn" {
            return Err(ArnError(format!(
                "{s:?} is not an ARN: expected arn:<partition>:<service>:<region>:<account>:<resource>"
            )));
        }
        let arn = Arn {
            partition: parts[1].to_string(),
            service: parts[2].to_string(),
            region: parts[3].to_string(),
            account: parts[4].to_string(),
            resource: parts[5].to_string(),
        };
        if !PARTITIONS.contains(&arn.partition.as_str()) {
            return Err(ArnError(format!(
                "{s:?}: unknown partition {:?} (expected one of {})",
                arn.partition,
                PARTITIONS.join(", ")
            )));
        }
        if !arn.account.is_empty()
            && arn.account != "aws"
            && (arn.account.len() != 12 || !arn.account.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(ArnError(format!(
                "{s:?}: the account ID must be 12 digits, got {:?}",
                arn.account
            )));
        }
        if !arn.region.is_empty() && !is_region_shaped(&arn.region) {
            return Err(ArnError(format!(
                "{s:?}: {:?} is not a region name",
                arn.region
            )));
        }
        if arn.resource.is_empty() {
            return Err(ArnError(format!("{s:?}: the resource part is empty")));
        }
        Ok(arn)
    }

    /// Parses and requires a given service and resource type, e.g. `("iam", "role/")`.
    /// Regional services must carry a region and an account.
    pub fn expect(s: &str, service: &str, resource_prefix: &str) -> Result<Arn, ArnError> {
        let arn = Arn::parse(s)?;
        if arn.service != service {
            return Err(ArnError(format!(
                "{s:?} is a {} ARN, expected a {service} ARN",
                if arn.service.is_empty() {
                    "service-less"
                } else {
                    &arn.service
                }
            )));
        }
        if !arn.resource.starts_with(resource_prefix) || arn.resource.len() == resource_prefix.len()
        {
            return Err(ArnError(format!(
                "{s:?}: expected a resource of the form {resource_prefix}<name>"
            )));
        }
        let global = service == "iam";
        if !global && (arn.region.is_empty() || arn.account.is_empty()) {
            return Err(ArnError(format!(
                "{s:?}: a {service} ARN needs a region and an account"
            )));
        }
        if global && arn.account.is_empty() {
            return Err(ArnError(format!("{s:?}: an IAM ARN needs an account")));
        }
        Ok(arn)
    }

    /// The resource name after the resource-type prefix, e.g. the cluster name in
    /// `cluster/<name>`, or the queue name (SQS ARNs have no prefix).
    pub fn resource_name(&self) -> &str {
        match self.resource.split_once('/') {
            Some((_, rest)) => rest,
            None => match self.resource.split_once(':') {
                Some((_, rest)) => rest,
                None => &self.resource,
            },
        }
    }

    /// The DNS suffix of the partition, for service principals and endpoints.
    pub fn dns_suffix(&self) -> &'static str {
        dns_suffix(&self.partition)
    }
}

impl fmt::Display for Arn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arn:{}:{}:{}:{}:{}",
            self.partition, self.service, self.region, self.account, self.resource
        )
    }
}

/// `xx-yyyy-N` shaped (also `us-gov-west-1`, `cn-north-1`, `us-isob-east-1`).
pub fn is_region_shaped(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        && parts
            .last()
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// The partition a region belongs to.
pub fn partition_for_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("us-isob-") {
        "aws-iso-b"
    } else if region.starts_with("us-iso-") {
        "aws-iso"
    } else if region.starts_with("eu-isoe-") {
        "aws-iso-e"
    } else if region.starts_with("us-isof-") {
        "aws-iso-f"
    } else if region.starts_with("eusc-") {
        "aws-eusc"
    } else {
        "aws"
    }
}

/// The DNS suffix of a partition (`amazonaws.com`, `amazonaws.com.cn`...).
pub fn dns_suffix(partition: &str) -> &'static str {
    match partition {
        "aws-cn" => "amazonaws.com.cn",
        "aws-iso" => "c2s.ic.gov",
        "aws-iso-b" => "sc2s.sgov.gov",
        "aws-iso-e" => "cloud.adc-e.uk",
        "aws-iso-f" => "csp.hci.ic.gov",
        "aws-eusc" => "amazonaws.eu",
        _ => "amazonaws.com",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_arn() {
        let a = Arn::expect(
            "arn:aws-cn:eks:cn-north-1:123456789012:cluster/prod",
            "eks",
            "cluster/",
        )
        .unwrap();
        assert_eq!(a.partition, "aws-cn");
        assert_eq!(a.region, "cn-north-1");
        assert_eq!(a.resource_name(), "prod");
        assert_eq!(a.dns_suffix(), "amazonaws.com.cn");
        assert_eq!(
            a.to_string(),
            "arn:aws-cn:eks:cn-north-1:123456789012:cluster/prod"
        );
    }

    #[test]
    fn sqs_arn_has_no_resource_prefix() {
        let a = Arn::expect("arn:aws:sqs:us-east-1:123456789012:q", "sqs", "").unwrap();
        assert_eq!(a.resource_name(), "q");
    }

    #[test]
    fn rejects_bad_shapes() {
        for (s, service, prefix) in [
            ("", "iam", "role/"),
            ("arn:aws:iam::123:role/x", "iam", "role/"),
            ("arn:aws:iam::123456789012:user/x", "iam", "role/"),
            ("arn:aws:iam::123456789012:role/", "iam", "role/"),
            ("arn:aws:sqs:us-east-1:123456789012:q", "iam", "role/"),
            ("arn:nope:iam::123456789012:role/x", "iam", "role/"),
            ("arn:aws:eks::123456789012:cluster/x", "eks", "cluster/"),
            (
                "arn:aws:eks:US-EAST-1:123456789012:cluster/x",
                "eks",
                "cluster/",
            ),
        ] {
            assert!(Arn::expect(s, service, prefix).is_err(), "{s}");
        }
    }

    #[test]
    fn partitions() {
        assert_eq!(partition_for_region("us-east-1"), "aws");
        assert_eq!(partition_for_region("ap-southeast-7"), "aws");
        assert_eq!(partition_for_region("cn-northwest-1"), "aws-cn");
        assert_eq!(partition_for_region("us-gov-west-1"), "aws-us-gov");
        assert_eq!(partition_for_region("us-isob-east-1"), "aws-iso-b");
        assert!(is_region_shaped("us-gov-west-1"));
        assert!(!is_region_shaped("useast1"));
    }
}
