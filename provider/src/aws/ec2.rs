//! EC2 look-ups used by the discovery data sources: subnets and security groups by tag,
//! and the instance types (with where they are offered) for `joiner_instance_types`.
//!
//! Results are sorted by ID so that a data source read twice over the same account gives
//! the same list, and a plan that consumes it stays empty.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, InstanceTypeInfo, InstanceTypeOffering, LocationType};
use aws_sdk_ec2::Client;
use tokio::time::Instant;

use super::error::{AwsError, AwsResultExt};
use super::retry::retry;

/// A tag filter value that matches any value: `{ "kubernetes.io/role/internal-elb" = "*" }`
/// finds every subnet carrying the key.
pub const ANY_VALUE: &str = "*";

/// EC2 filters for "has all these tags": `tag:<key> = value`, or `tag-key = key` for
/// [`ANY_VALUE`]. The filters are ANDed by EC2.
pub fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == ANY_VALUE {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

fn tag_map(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

/// The filters both discovery lookups use: every tag must match, and the VPC if one is given.
fn discovery_filters(tags: &BTreeMap<String, String>, vpc_id: Option<&str>) -> Vec<Filter> {
    let mut filters = tag_filters(tags);
    if let Some(vpc) = vpc_id {
        filters.push(Filter::builder().name("vpc-id").values(vpc).build());
    }
    filters
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetInfo {
    pub id: String,
    pub vpc_id: String,
    pub availability_zone: String,
    pub availability_zone_id: String,
    pub cidr_block: String,
    pub available_ip_address_count: i64,
    pub map_public_ip_on_launch: bool,
    pub tags: BTreeMap<String, String>,
}

/// Subnets carrying all of `tags`, optionally restricted to one VPC, sorted by ID.
pub async fn subnets_by_tags(
    client: &Client,
    tags: &BTreeMap<String, String>,
    vpc_id: Option<&str>,
    deadline: Instant,
) -> Result<Vec<SubnetInfo>, AwsError> {
    let filters = discovery_filters(tags, vpc_id);
    let subnets = retry(deadline, || async {
        client
            .describe_subnets()
            .set_filters(Some(filters.clone()))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .aws("ec2:DescribeSubnets")
    })
    .await?;
    let mut out: Vec<SubnetInfo> = subnets
        .iter()
        .map(|s| SubnetInfo {
            id: s.subnet_id().unwrap_or_default().to_string(),
            vpc_id: s.vpc_id().unwrap_or_default().to_string(),
            availability_zone: s.availability_zone().unwrap_or_default().to_string(),
            availability_zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
            cidr_block: s.cidr_block().unwrap_or_default().to_string(),
            available_ip_address_count: s.available_ip_address_count().unwrap_or(0).into(),
            map_public_ip_on_launch: s.map_public_ip_on_launch().unwrap_or(false),
            tags: tag_map(s.tags()),
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroupInfo {
    pub id: String,
    pub name: String,
    pub vpc_id: String,
    pub description: String,
    pub tags: BTreeMap<String, String>,
}

/// Security groups carrying all of `tags`, optionally restricted to one VPC, sorted by ID.
pub async fn security_groups_by_tags(
    client: &Client,
    tags: &BTreeMap<String, String>,
    vpc_id: Option<&str>,
    deadline: Instant,
) -> Result<Vec<SecurityGroupInfo>, AwsError> {
    let filters = discovery_filters(tags, vpc_id);
    let groups = retry(deadline, || async {
        client
            .describe_security_groups()
            .set_filters(Some(filters.clone()))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .aws("ec2:DescribeSecurityGroups")
    })
    .await?;
    let mut out: Vec<SecurityGroupInfo> = groups
        .iter()
        .map(|g| SecurityGroupInfo {
            id: g.group_id().unwrap_or_default().to_string(),
            name: g.group_name().unwrap_or_default().to_string(),
            vpc_id: g.vpc_id().unwrap_or_default().to_string(),
            description: g.description().unwrap_or_default().to_string(),
            tags: tag_map(g.tags()),
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Every instance type the region offers, as the SDK describes it (the agent's catalogue
/// takes these types as they are).
pub async fn instance_types(
    client: &Client,
    deadline: Instant,
) -> Result<Vec<InstanceTypeInfo>, AwsError> {
    let mut types = retry(deadline, || async {
        client
            .describe_instance_types()
            .max_results(100)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .aws("ec2:DescribeInstanceTypes")
    })
    .await?;
    types.sort_by(|a, b| {
        let name = |t: &InstanceTypeInfo| t.instance_type().map(|i| i.as_str().to_string());
        name(a).cmp(&name(b))
    });
    Ok(types)
}

/// Where each instance type is offered, one item per (type, zone), as the SDK gives them.
pub async fn instance_type_offerings(
    client: &Client,
    deadline: Instant,
) -> Result<Vec<InstanceTypeOffering>, AwsError> {
    retry(deadline, || async {
        client
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .aws("ec2:DescribeInstanceTypeOfferings")
    })
    .await
}

/// Instance type → the zones it is offered in (sorted, deduplicated).
pub async fn zone_offerings(
    client: &Client,
    deadline: Instant,
) -> Result<BTreeMap<String, Vec<String>>, AwsError> {
    let offerings = instance_type_offerings(client, deadline).await?;
    let mut by_type: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in &offerings {
        if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
            by_type
                .entry(t.as_str().to_string())
                .or_default()
                .push(zone.to_string());
        }
    }
    for zones in by_type.values_mut() {
        zones.sort();
        zones.dedup();
    }
    Ok(by_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_filters_match_values_or_any_value() {
        let tags: BTreeMap<String, String> = [
            ("joiner.dev/discovery".to_string(), "prod".to_string()),
            (
                "kubernetes.io/role/internal-elb".to_string(),
                "*".to_string(),
            ),
        ]
        .into();
        let f = tag_filters(&tags);
        assert_eq!(f[0].name(), Some("tag:joiner.dev/discovery"));
        assert_eq!(f[0].values(), ["prod"]);
        assert_eq!(f[1].name(), Some("tag-key"));
        assert_eq!(f[1].values(), ["kubernetes.io/role/internal-elb"]);
    }
}

#[cfg(test)]
mod emulator_tests {
    use super::*;
    use crate::aws::eks::tests_support::moto_clients;
    use joiner_test_support::MotoServer;
    use std::time::Duration;

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn discovers_tagged_subnets_and_groups_sorted() {
        let moto = MotoServer::start();
        let aws = moto_clients(&moto).await;
        let ec2 = aws.ec2();
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.1.0.0/16")
            .send()
            .await
            .unwrap();
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let tag = |k: &str, v: &str| {
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Subnet)
                .tags(aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
                .build()
        };
        let mut tagged = Vec::new();
        for (i, (cidr, az, value)) in [
            ("10.1.1.0/24", "us-east-1b", "c1"),
            ("10.1.2.0/24", "us-east-1a", "c1"),
            ("10.1.3.0/24", "us-east-1c", "other"),
        ]
        .into_iter()
        .enumerate()
        {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(cidr)
                .availability_zone(az)
                .tag_specifications(tag("joiner.dev/discovery", value))
                .send()
                .await
                .unwrap();
            if i < 2 {
                tagged.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
            }
        }
        tagged.sort();
        let want: BTreeMap<String, String> =
            [("joiner.dev/discovery".to_string(), "c1".to_string())].into();
        let found = subnets_by_tags(&ec2, &want, None, deadline())
            .await
            .unwrap();
        assert_eq!(
            found.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
            tagged
        );
        assert!(found.iter().all(|s| s.vpc_id == vpc_id && s.tags == want));
        assert!(found
            .iter()
            .any(|s| s.availability_zone == "us-east-1a" && s.cidr_block == "10.1.2.0/24"));
        let any: BTreeMap<String, String> =
            [("joiner.dev/discovery".to_string(), "*".to_string())].into();
        assert_eq!(
            subnets_by_tags(&ec2, &any, Some(&vpc_id), deadline())
                .await
                .unwrap()
                .len(),
            3
        );
        let none: BTreeMap<String, String> =
            [("joiner.dev/discovery".to_string(), "nope".to_string())].into();
        assert!(subnets_by_tags(&ec2, &none, None, deadline())
            .await
            .unwrap()
            .is_empty());

        let sg = ec2
            .create_security_group()
            .group_name("nodes")
            .description("joiner nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(
                aws_sdk_ec2::types::TagSpecification::builder()
                    .resource_type(aws_sdk_ec2::types::ResourceType::SecurityGroup)
                    .tags(
                        aws_sdk_ec2::types::Tag::builder()
                            .key("joiner.dev/discovery")
                            .value("c1")
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let groups = security_groups_by_tags(&ec2, &want, Some(&vpc_id), deadline())
            .await
            .unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].id, sg.group_id().unwrap());
        assert_eq!(groups[0].name, "nodes");
        assert_eq!(groups[0].description, "joiner nodes");
    }

    #[tokio::test]
    async fn lists_every_instance_type_across_pages() {
        let moto = MotoServer::start();
        let aws = moto_clients(&moto).await;
        let ec2 = aws.ec2();
        let types = instance_types(&ec2, deadline()).await.unwrap();
        // The emulator knows ~1,400 real types; far more than one page of 100.
        assert!(types.len() > 1000, "{}", types.len());
        let names: Vec<&str> = types
            .iter()
            .filter_map(|t| t.instance_type())
            .map(|t| t.as_str())
            .collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        assert!(names.contains(&"m5.large"));
        let offers = zone_offerings(&ec2, deadline()).await.unwrap();
        assert!(offers
            .get("m5.large")
            .is_some_and(|z| z.iter().all(|z| z.starts_with("us-east-1"))));
    }
}
