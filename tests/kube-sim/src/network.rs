//! Whether a node's network lets its kubelet reach the API server, and its pods cluster DNS,
//! judged from the EC2 security groups as AWS evaluates them.
//!
//! On EKS the control plane's network interfaces are in the cluster security group (plus the
//! cluster's additional groups), and so is every Fargate pod, CoreDNS included. That group
//! admits only itself (`tests/aws-local/joiner_local/eks_network.py`). With private endpoint
//! access on, a kubelet in the VPC talks to those interfaces, so a node whose groups the
//! control plane's groups do not admit on 443 never registers. Security groups are stateful
//! and allow-only: traffic passes when one of the sender's groups has an outbound rule
//! allowing it and one of the receiver's groups an inbound rule allowing it, a rule
//! matching by protocol, port range and source (a CIDR holding the peer's address, or a
//! group the peer is in); replies are always allowed
//! (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-security-group-rules.html).
//!
//! Not modelled: network ACLs, route tables (a node without a way to the internet still
//! reaches a public-only endpoint here) and `publicAccessCidrs`.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use anyhow::Context;

/// An IPv4 block, `a.b.c.d/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: u32,
    pub len: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Cidr> {
        let (ip, len) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = ip.parse().ok()?;
        let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
        Some(Cidr {
            addr: u32::from(addr),
            len,
        })
    }

    fn mask(self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        }
    }

    /// Whether every address of `inner` is in this block.
    pub fn contains(self, inner: Cidr) -> bool {
        inner.len >= self.len && (inner.addr & self.mask()) == (self.addr & self.mask())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

/// One security group rule: what it allows, to or from where.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    /// `-1` (all), `tcp`/`6`, `udp`/`17`, or another protocol (never matches here).
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub cidrs: Vec<Cidr>,
    pub groups: Vec<String>,
}

impl Rule {
    fn allows(&self, protocol: Protocol, port: u16) -> bool {
        let proto = match self.protocol.as_str() {
            "-1" | "all" => return true,
            "tcp" | "6" => Protocol::Tcp,
            "udp" | "17" => Protocol::Udp,
            _ => return false,
        };
        proto == protocol && (self.from_port..=self.to_port).contains(&i32::from(port))
    }

    fn matches(&self, peer: &Peer) -> bool {
        self.groups.iter().any(|g| peer.groups.contains(g))
            || self
                .cidrs
                .iter()
                .any(|c| peer.addresses.iter().any(|a| c.contains(*a)))
    }
}

#[derive(Debug, Clone, Default)]
pub struct Group {
    pub id: String,
    pub ingress: Vec<Rule>,
    pub egress: Vec<Rule>,
}

/// One end of a connection: the groups its interface is in, and where its address lies (the
/// instance's private IP; for the control plane, which picks interfaces in the cluster's
/// subnets, those subnets' blocks).
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub groups: Vec<String>,
    pub addresses: Vec<Cidr>,
}

/// Whether `from` may open a connection to `to` on `protocol`/`port`, given every group
/// involved; the error says which half is missing, in words an operator acts on.
pub fn reaches(
    groups: &HashMap<String, Group>,
    from: &Peer,
    to: &Peer,
    protocol: Protocol,
    port: u16,
) -> Result<(), String> {
    let proto = match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
    };
    let rules = |ids: &[String], outbound: bool| -> Vec<Rule> {
        ids.iter()
            .filter_map(|id| groups.get(id))
            .flat_map(|g| if outbound { &g.egress } else { &g.ingress })
            .cloned()
            .collect()
    };
    let out = rules(&from.groups, true)
        .iter()
        .any(|r| r.allows(protocol, port) && r.matches(to));
    if !out {
        return Err(format!(
            "no outbound rule of its security groups [{}] allows {proto} {port} to [{}]",
            from.groups.join(", "),
            to.groups.join(", ")
        ));
    }
    // A peer in no security group (the internet, a public endpoint) admits by rules of its
    // own, which are not modelled here.
    let inbound = to.groups.is_empty()
        || rules(&to.groups, false)
            .iter()
            .any(|r| r.allows(protocol, port) && r.matches(from));
    if !inbound {
        return Err(format!(
            "no inbound rule of [{}] admits {proto} {port} from its security groups [{}] or its address",
            to.groups.join(", "),
            from.groups.join(", ")
        ));
    }
    Ok(())
}

/// The parts of an EKS cluster's VPC configuration that decide reachability.
#[derive(Debug, Clone, Default)]
pub struct ClusterNetwork {
    pub cluster_security_group: Option<String>,
    pub additional_groups: Vec<String>,
    pub subnets: Vec<String>,
    pub private_access: bool,
}

impl ClusterNetwork {
    pub fn from_cluster(c: &aws_sdk_eks::types::Cluster) -> ClusterNetwork {
        let v = c.resources_vpc_config();
        ClusterNetwork {
            cluster_security_group: v
                .and_then(|v| v.cluster_security_group_id())
                .map(str::to_string),
            additional_groups: v
                .map(|v| v.security_group_ids().to_vec())
                .unwrap_or_default(),
            subnets: v.map(|v| v.subnet_ids().to_vec()).unwrap_or_default(),
            private_access: v.map(|v| v.endpoint_private_access()).unwrap_or(false),
        }
    }
}

/// What the bridge learnt about one instance's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdicts {
    /// The kubelet reaches the API server on 443 (`Err`: why not).
    pub api_server: Result<(), String>,
    /// Its pods reach CoreDNS, which runs on Fargate in the cluster security group, on UDP 53.
    pub cluster_dns: Result<(), String>,
}

/// Judges instances against the cluster's groups, reading the groups and subnets from EC2.
pub struct Judge {
    ec2: aws_sdk_ec2::Client,
}

impl Judge {
    pub fn new(ec2: aws_sdk_ec2::Client) -> Judge {
        Judge { ec2 }
    }

    pub async fn judge(
        &self,
        cluster: &ClusterNetwork,
        instance: &aws_sdk_ec2::types::Instance,
    ) -> anyhow::Result<Verdicts> {
        // The groups of its primary network interface, which is what traffic is judged by
        // (the instance's own list is that interface's on EC2; moto sometimes leaves it empty).
        let mut node_groups: Vec<String> = instance
            .network_interfaces()
            .iter()
            .filter(|n| n.attachment().and_then(|a| a.device_index()).unwrap_or(0) == 0)
            .flat_map(|n| n.groups())
            .chain(instance.security_groups())
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect();
        node_groups.sort();
        node_groups.dedup();
        let node = Peer {
            groups: node_groups,
            addresses: instance
                .private_ip_address()
                .and_then(Cidr::parse)
                .into_iter()
                .collect(),
        };
        let subnet_blocks = self.subnet_blocks(&cluster.subnets).await?;
        let cluster_group: Vec<String> = cluster.cluster_security_group.iter().cloned().collect();
        let control_plane = Peer {
            groups: cluster_group
                .iter()
                .chain(&cluster.additional_groups)
                .cloned()
                .collect(),
            addresses: subnet_blocks.clone(),
        };
        let internet = Peer {
            groups: vec![],
            addresses: vec![Cidr { addr: 0, len: 0 }],
        };
        let ids: Vec<String> = node
            .groups
            .iter()
            .chain(&control_plane.groups)
            .cloned()
            .collect();
        let groups = self.groups(&ids).await?;
        let api_server = if cluster.private_access {
            reaches(&groups, &node, &control_plane, Protocol::Tcp, 443).map_err(|why| {
                format!("its kubelet cannot reach the API server's private endpoint: {why}")
            })
        } else {
            reaches(&groups, &node, &internet, Protocol::Tcp, 443).map_err(|why| {
                format!("its kubelet cannot reach the API server's public endpoint: {why}")
            })
        };
        let coredns = Peer {
            groups: cluster_group,
            addresses: subnet_blocks,
        };
        let cluster_dns = reaches(&groups, &node, &coredns, Protocol::Udp, 53)
            .map_err(|why| format!("its pods cannot reach CoreDNS on Fargate: {why}"));
        Ok(Verdicts {
            api_server,
            cluster_dns,
        })
    }

    async fn subnet_blocks(&self, ids: &[String]) -> anyhow::Result<Vec<Cidr>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let out = self
            .ec2
            .describe_subnets()
            .set_subnet_ids(Some(ids.to_vec()))
            .send()
            .await
            .context("EC2 DescribeSubnets")?;
        Ok(out
            .subnets()
            .iter()
            .filter_map(|s| s.cidr_block().and_then(Cidr::parse))
            .collect())
    }

    async fn groups(&self, ids: &[String]) -> anyhow::Result<HashMap<String, Group>> {
        let mut ids = ids.to_vec();
        ids.sort();
        ids.dedup();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let out = self
            .ec2
            .describe_security_groups()
            .set_group_ids(Some(ids))
            .send()
            .await
            .context("EC2 DescribeSecurityGroups")?;
        let rules = |perms: &[aws_sdk_ec2::types::IpPermission]| -> Vec<Rule> {
            perms
                .iter()
                .map(|p| Rule {
                    protocol: p.ip_protocol().unwrap_or("-1").to_string(),
                    from_port: p.from_port().unwrap_or(0),
                    to_port: p.to_port().unwrap_or(65535),
                    cidrs: p
                        .ip_ranges()
                        .iter()
                        .filter_map(|r| r.cidr_ip().and_then(Cidr::parse))
                        .collect(),
                    groups: p
                        .user_id_group_pairs()
                        .iter()
                        .filter_map(|g| g.group_id().map(str::to_string))
                        .collect(),
                })
                .collect()
        };
        Ok(out
            .security_groups()
            .iter()
            .filter_map(|g| {
                Some((
                    g.group_id()?.to_string(),
                    Group {
                        id: g.group_id()?.to_string(),
                        ingress: rules(g.ip_permissions()),
                        egress: rules(g.ip_permissions_egress()),
                    },
                ))
            })
            .collect())
    }
}

/// The security group EKS created for `cluster` (DescribeCluster's
/// `resourcesVpcConfig.clusterSecurityGroupId`): what an instance a test launches by hand
/// must be in to register, as a Karpenter or managed node is.
pub async fn cluster_security_group(
    conf: &aws_config::SdkConfig,
    cluster: &str,
) -> anyhow::Result<String> {
    aws_sdk_eks::Client::new(conf)
        .describe_cluster()
        .name(cluster)
        .send()
        .await
        .context("EKS DescribeCluster")?
        .cluster()
        .and_then(|c| c.resources_vpc_config())
        .and_then(|v| v.cluster_security_group_id())
        .map(str::to_string)
        .context("EKS DescribeCluster reported no clusterSecurityGroupId")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_from(group: &str) -> Rule {
        Rule {
            protocol: "-1".into(),
            groups: vec![group.into()],
            ..Default::default()
        }
    }

    fn anywhere() -> Rule {
        Rule {
            protocol: "-1".into(),
            cidrs: vec![Cidr::parse("0.0.0.0/0").unwrap()],
            ..Default::default()
        }
    }

    fn world() -> HashMap<String, Group> {
        let cluster = Group {
            id: "sg-cluster".into(),
            ingress: vec![all_from("sg-cluster")],
            egress: vec![anywhere()],
        };
        let bare = Group {
            id: "sg-bare".into(),
            ingress: vec![],
            egress: vec![anywhere()],
        };
        let admitted = Group {
            id: "sg-admitted".into(),
            ingress: vec![],
            egress: vec![anywhere()],
        };
        [cluster, bare, admitted]
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect()
    }

    fn peer(groups: &[&str], ip: &str) -> Peer {
        Peer {
            groups: groups.iter().map(|g| g.to_string()).collect(),
            addresses: vec![Cidr::parse(ip).unwrap()],
        }
    }

    #[test]
    fn the_cluster_group_admits_only_itself() {
        let groups = world();
        let cp = peer(&["sg-cluster"], "10.0.1.0/24");
        assert_eq!(
            reaches(
                &groups,
                &peer(&["sg-cluster"], "10.0.1.7"),
                &cp,
                Protocol::Tcp,
                443
            ),
            Ok(())
        );
        let refused = reaches(
            &groups,
            &peer(&["sg-bare"], "10.0.1.8"),
            &cp,
            Protocol::Tcp,
            443,
        )
        .unwrap_err();
        assert!(
            refused.contains("no inbound rule of [sg-cluster]"),
            "{refused}"
        );
    }

    #[test]
    fn a_rule_admits_by_group_by_cidr_and_by_port_range() {
        let mut groups = world();
        let cp = peer(&["sg-cluster"], "10.0.1.0/24");
        let node = peer(&["sg-admitted"], "10.0.2.9");
        let cluster = groups.get_mut("sg-cluster").unwrap();
        cluster.ingress.push(Rule {
            protocol: "tcp".into(),
            from_port: 443,
            to_port: 443,
            groups: vec!["sg-admitted".into()],
            ..Default::default()
        });
        assert_eq!(reaches(&groups, &node, &cp, Protocol::Tcp, 443), Ok(()));
        // TCP 443 is not UDP 53.
        assert!(reaches(&groups, &node, &cp, Protocol::Udp, 53).is_err());
        // By CIDR: the node's subnet.
        let other = peer(&["sg-bare"], "10.0.3.4");
        assert!(reaches(&groups, &other, &cp, Protocol::Udp, 53).is_err());
        groups.get_mut("sg-cluster").unwrap().ingress.push(Rule {
            protocol: "udp".into(),
            from_port: 53,
            to_port: 53,
            cidrs: vec![Cidr::parse("10.0.3.0/24").unwrap()],
            ..Default::default()
        });
        assert_eq!(reaches(&groups, &other, &cp, Protocol::Udp, 53), Ok(()));
    }

    #[test]
    fn a_public_endpoint_needs_only_a_way_out() {
        let mut groups = world();
        let internet = Peer {
            groups: vec![],
            addresses: vec![Cidr::parse("0.0.0.0/0").unwrap()],
        };
        let node = peer(&["sg-bare"], "10.0.1.7");
        assert_eq!(
            reaches(&groups, &node, &internet, Protocol::Tcp, 443),
            Ok(())
        );
        groups.get_mut("sg-bare").unwrap().egress.clear();
        assert!(reaches(&groups, &node, &internet, Protocol::Tcp, 443).is_err());
    }

    #[test]
    fn egress_must_allow_it_too() {
        let mut groups = world();
        groups.get_mut("sg-cluster").unwrap().egress.clear();
        let cp = peer(&["sg-cluster"], "10.0.1.0/24");
        let why = reaches(
            &groups,
            &peer(&["sg-cluster"], "10.0.1.7"),
            &cp,
            Protocol::Tcp,
            443,
        )
        .unwrap_err();
        assert!(why.contains("no outbound rule"), "{why}");
    }

    #[test]
    fn cidr_containment() {
        let vpc = Cidr::parse("10.0.0.0/16").unwrap();
        assert!(vpc.contains(Cidr::parse("10.0.5.0/24").unwrap()));
        assert!(!vpc.contains(Cidr::parse("10.1.5.0/24").unwrap()));
        assert!(!Cidr::parse("10.0.5.0/24").unwrap().contains(vpc));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(vpc));
        assert_eq!(Cidr::parse("10.0.0.300/8"), None);
    }
}
