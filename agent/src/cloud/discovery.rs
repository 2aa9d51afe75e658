//! Resolving a NodeClass's selector terms to subnets and security groups, and reading the
//! cluster's connection details.
//!
//! Terms are ORed, the fields of one term ANDed, as in Karpenter: `{id}` selects that
//! resource, `{tags}` every resource carrying all the tags (a value of `*` only requires the
//! key). Results are cached for `Ec2Options::discovery_ttl`, since every scheduling round
//! asks and free IP counts are the only thing that moves quickly.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
pub use super::records::Subnet;
use super::user_data::ClusterInfo;
use super::CloudError;
use crate::api::NodeClass;

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

impl Ec2Cloud {
    /// The NodeClass's subnets that still have free addresses, sorted by zone then most
    /// free addresses first. An empty selector list selects nothing.
    pub async fn subnets_for(&self, node_class: &NodeClass) -> Result<Vec<Subnet>, CloudError> {
        let terms = &node_class.spec.subnet_selector_terms;
        let key = serde_json::to_string(terms).unwrap_or_default();
        if let Some(s) = self.fresh(&self.subnets, &key) {
            return Ok(s);
        }
        let mut found: BTreeMap<String, Subnet> = BTreeMap::new();
        for term in terms {
            let mut req = self.ec2.describe_subnets();
            if let Some(id) = &term.id {
                req = req.filters(Filter::builder().name("subnet-id").values(id).build());
            }
            for f in tag_filters(&term.tags) {
                req = req.filters(f);
            }
            if term.id.is_none() && term.tags.is_empty() {
                continue;
            }
            let mut pages = req.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.cloud("ec2:DescribeSubnets")?;
                for s in page.subnets() {
                    let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                        continue;
                    };
                    found.insert(
                        id.to_string(),
                        Subnet {
                            id: id.to_string(),
                            zone: zone.to_string(),
                            zone_id: s.availability_zone_id().map(str::to_string),
                            available_ips: s.available_ip_address_count().unwrap_or(0),
                        },
                    );
                }
            }
        }
        let mut subnets: Vec<Subnet> = found
            .into_values()
            .filter(|s| s.available_ips > 0)
            .collect();
        subnets.sort_by(|a, b| {
            (&a.zone, -a.available_ips, &a.id).cmp(&(&b.zone, -b.available_ips, &b.id))
        });
        self.remember(&self.subnets, &key, subnets.clone());
        Ok(subnets)
    }

    /// The NodeClass's security group IDs, sorted.
    pub async fn security_groups_for(
        &self,
        node_class: &NodeClass,
    ) -> Result<Vec<String>, CloudError> {
        let terms = &node_class.spec.security_group_selector_terms;
        let key = serde_json::to_string(terms).unwrap_or_default();
        if let Some(s) = self.fresh(&self.security_groups, &key) {
            return Ok(s);
        }
        let mut ids = std::collections::BTreeSet::new();
        for term in terms {
            if term.id.is_none() && term.name.is_none() && term.tags.is_empty() {
                continue;
            }
            let mut req = self.ec2.describe_security_groups();
            if let Some(id) = &term.id {
                req = req.filters(Filter::builder().name("group-id").values(id).build());
            }
            if let Some(name) = &term.name {
                req = req.filters(Filter::builder().name("group-name").values(name).build());
            }
            for f in tag_filters(&term.tags) {
                req = req.filters(f);
            }
            let mut pages = req.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.cloud("ec2:DescribeSecurityGroups")?;
                ids.extend(
                    page.security_groups()
                        .iter()
                        .filter_map(|g| g.group_id().map(str::to_string)),
                );
            }
        }
        let ids: Vec<String> = ids.into_iter().collect();
        self.remember(&self.security_groups, &key, ids.clone());
        Ok(ids)
    }

    /// The NodeClass's resolved selectors, as its status shows them (Karpenter's
    /// EC2NodeClass status): subnets, security groups, the AMIs with the requirements of the
    /// instance types each serves (architecture, and for an alias's accelerated variants
    /// the GPU or accelerator labels), and the instance profile (named, or the role's).
    pub async fn resolve_node_class(
        &self,
        node_class: &NodeClass,
    ) -> Result<crate::api::NodeClassStatus, CloudError> {
        use crate::api::node_class::{ResolvedId, ResolvedSubnet};
        let subnets = self.subnets_for(node_class).await?;
        let security_groups = self.security_groups_for(node_class).await?;
        let amis = self.amis_for(node_class).await?;
        Ok(crate::api::NodeClassStatus {
            subnets: subnets
                .into_iter()
                .map(|s| ResolvedSubnet {
                    id: s.id,
                    zone: s.zone,
                    zone_id: s.zone_id,
                })
                .collect(),
            security_groups: security_groups
                .into_iter()
                .map(|id| ResolvedId { id, name: None })
                .collect(),
            amis: amis.status(),
            instance_profile: node_class
                .spec
                .instance_profile
                .clone()
                .or_else(|| node_class.spec.role.clone()),
            conditions: vec![],
        })
    }

    /// Endpoint, CA, service CIDR and version: from the options, else one
    /// `eks:DescribeCluster` (remembered for the life of the process). Fails rather than
    /// answer without a service CIDR, which every AL2023 NodeConfig must carry.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, CloudError> {
        self.cluster
            .get_or_try_init(|| async {
                let o = &self.options;
                let mut info = ClusterInfo {
                    name: o.cluster_name.clone(),
                    endpoint: o.cluster_endpoint.clone().unwrap_or_default(),
                    certificate_authority: o.cluster_ca.clone().unwrap_or_default(),
                    service_cidr: o.service_cidr.clone(),
                    version: o.kubernetes_version.clone().unwrap_or_default(),
                };
                // The CIDR is needed even when the endpoint and CA are given: nodeadm
                // refuses a NodeConfig without `cidr`.
                if info.endpoint.is_empty()
                    || info.certificate_authority.is_empty()
                    || info.version.is_empty()
                    || info.service_cidr.is_none()
                {
                    let out = self
                        .eks
                        .describe_cluster()
                        .name(&o.cluster_name)
                        .send()
                        .await
                        .cloud("eks:DescribeCluster")?;
                    let c = out.cluster().ok_or_else(|| {
                        CloudError::new(
                            "eks:DescribeCluster",
                            "ResourceNotFoundException",
                            format!("cluster {} not in the answer", o.cluster_name),
                        )
                    })?;
                    if info.endpoint.is_empty() {
                        info.endpoint = c.endpoint().unwrap_or_default().to_string();
                    }
                    if info.certificate_authority.is_empty() {
                        info.certificate_authority = c
                            .certificate_authority()
                            .and_then(|a| a.data())
                            .unwrap_or_default()
                            .to_string();
                    }
                    if info.service_cidr.is_none() {
                        let net = c.kubernetes_network_config();
                        info.service_cidr = net
                            .and_then(|n| n.service_ipv4_cidr())
                            .or_else(|| net.and_then(|n| n.service_ipv6_cidr()))
                            .map(str::to_string);
                    }
                    if info.service_cidr.is_none() {
                        return Err(CloudError::new(
                            "eks:DescribeCluster",
                            "ServiceCidrUnknown",
                            format!(
                                "cluster {} reports no service CIDR (IPv4 or IPv6), and nodes \
                                 cannot be configured without it; pass --service-cidr",
                                o.cluster_name
                            ),
                        ));
                    }
                    if info.version.is_empty() {
                        info.version = c.version().unwrap_or_default().to_string();
                    }
                }
                Ok(info)
            })
            .await
            .cloned()
    }
}
