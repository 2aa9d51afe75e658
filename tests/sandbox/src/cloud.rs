//! The AWS side of the sandbox, through the official SDK against the emulator: the network
//! the example discovers, the interruption storm (EventBridge PutEvents, and EC2 taking the
//! instances back when the notice ends), the catalogue the prices come from, and the
//! "nothing left" check after destroy.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_sdk_ec2::types::{Filter, InstanceStateName, ResourceType, Tag, TagSpecification};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_types::region::Region;
use aws_types::SdkConfig;
use joiner_agent::catalog::Catalog;

pub const REGION: &str = "us-east-1";
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// Where the AWS errors of the sandbox come from: the operation and the service's code.
fn op<E: std::fmt::Debug>(name: &'static str) -> impl FnOnce(E) -> anyhow::Error {
    move |e| anyhow::anyhow!("{name} failed: {e:?}")
}

pub struct Cloud {
    config: SdkConfig,
}

impl Cloud {
    pub fn new(endpoint: &str) -> Cloud {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let config = SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new(REGION))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "testing",
                "testing",
                Some("testing".into()),
                None,
                "joiner-sandbox",
            )))
            .http_client(http)
            .build();
        Cloud { config }
    }

    fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.config)
    }

    /// A VPC with one private subnet per zone and a node security group, all tagged
    /// `joiner.dev/discovery = <discovery>`: what a platform team prepares before applying.
    pub async fn create_network(&self, discovery: &str, second_octet: u8) -> Result<Network> {
        let ec2 = self.ec2();
        let tag = |rt: ResourceType| {
            TagSpecification::builder()
                .resource_type(rt)
                .tags(
                    Tag::builder()
                        .key("joiner.dev/discovery")
                        .value(discovery)
                        .build(),
                )
                .tags(Tag::builder().key("Name").value(discovery).build())
                .build()
        };
        let vpc = ec2
            .create_vpc()
            .cidr_block(format!("10.{second_octet}.0.0/16"))
            .tag_specifications(tag(ResourceType::Vpc))
            .send()
            .await
            .map_err(op("ec2:CreateVpc"))?;
        let vpc_id = vpc
            .vpc()
            .and_then(|v| v.vpc_id())
            .context("ec2:CreateVpc returned no VPC id")?
            .to_string();
        let mut subnets = Vec::new();
        for (i, zone) in ZONES.iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .availability_zone(*zone)
                .cidr_block(format!("10.{second_octet}.{}.0/20", i * 16))
                .tag_specifications(tag(ResourceType::Subnet))
                .send()
                .await
                .map_err(op("ec2:CreateSubnet"))?;
            subnets.push(
                s.subnet()
                    .and_then(|s| s.subnet_id())
                    .context("ec2:CreateSubnet returned no id")?
                    .to_string(),
            );
        }
        let sg = ec2
            .create_security_group()
            .group_name(format!("{discovery}-nodes"))
            .description("joiner nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(tag(ResourceType::SecurityGroup))
            .send()
            .await
            .map_err(op("ec2:CreateSecurityGroup"))?;
        Ok(Network {
            vpc_id,
            subnet_ids: subnets,
            security_group_id: sg.group_id().unwrap_or_default().to_string(),
        })
    }

    /// Reads the public SSM parameters the AMI aliases resolve through (`al2023@latest`,
    /// `bottlerocket@latest`) for Kubernetes `k8s_version`, at their real names: the local
    /// world serves them (`joiner_local.public_parameters`), pointing at images the
    /// emulator has. Returns (parameter, image id) pairs of those that exist.
    pub async fn ami_parameters(&self, k8s_version: &str) -> Result<Vec<(String, String)>> {
        let ssm = aws_sdk_ssm::Client::new(&self.config);
        let mut found = Vec::new();
        for arch in ["x86_64", "arm64"] {
            for name in [
                format!("/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/standard/recommended/image_id"),
                format!("/aws/service/bottlerocket/aws-k8s-{k8s_version}/{arch}/latest/image_id"),
            ] {
                let out = ssm
                    .get_parameter()
                    .name(&name)
                    .send()
                    .await
                    .map_err(op("ssm:GetParameter"))?;
                if let Some(v) = out.parameter().and_then(|p| p.value()) {
                    found.push((name, v.to_string()));
                }
            }
        }
        Ok(found)
    }

    /// The IAM user that runs Terraform, holding only `policy` (the deployer policy the
    /// provider prints), and its access key: (key id, secret).
    pub async fn deployer(&self, user: &str, policy: &str) -> Result<(String, String)> {
        let iam = aws_sdk_iam::Client::new(&self.config);
        iam.create_user()
            .user_name(user)
            .send()
            .await
            .map_err(op("iam:CreateUser"))?;
        iam.put_user_policy()
            .user_name(user)
            .policy_name("joiner-deployer")
            .policy_document(policy)
            .send()
            .await
            .map_err(op("iam:PutUserPolicy"))?;
        let key = iam
            .create_access_key()
            .user_name(user)
            .send()
            .await
            .map_err(op("iam:CreateAccessKey"))?
            .access_key
            .context("iam:CreateAccessKey returned no key")?;
        Ok((key.access_key_id, key.secret_access_key))
    }

    /// The security group EKS created for the cluster (DescribeCluster's
    /// `resourcesVpcConfig.clusterSecurityGroupId`).
    pub async fn cluster_security_group(&self, cluster: &str) -> Result<String> {
        let out = aws_sdk_eks::Client::new(&self.config)
            .describe_cluster()
            .name(cluster)
            .send()
            .await
            .map_err(op("eks:DescribeCluster"))?;
        out.cluster()
            .and_then(|c| c.resources_vpc_config())
            .and_then(|v| v.cluster_security_group_id())
            .map(str::to_string)
            .context("eks:DescribeCluster reported no clusterSecurityGroupId")
    }

    /// The cluster's Kubernetes version and its status on EKS's calendar
    /// (DescribeClusterVersions: `STANDARD_SUPPORT`, `EXTENDED_SUPPORT`, ...).
    pub async fn cluster_version(&self, cluster: &str) -> Result<(String, String)> {
        let eks = aws_sdk_eks::Client::new(&self.config);
        let version = eks
            .describe_cluster()
            .name(cluster)
            .send()
            .await
            .map_err(op("eks:DescribeCluster"))?
            .cluster()
            .and_then(|c| c.version())
            .map(str::to_string)
            .context("eks:DescribeCluster reported no version")?;
        let status = eks
            .describe_cluster_versions()
            .cluster_versions(&version)
            .include_all(true)
            .send()
            .await
            .map_err(op("eks:DescribeClusterVersions"))?
            .cluster_versions()
            .first()
            .and_then(|v| v.version_status())
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|| "not on EKS's calendar".into());
        Ok((version, status))
    }

    /// The account id (for event resource ARNs).
    pub async fn account(&self) -> Result<String> {
        let out = aws_sdk_sts::Client::new(&self.config)
            .get_caller_identity()
            .send()
            .await
            .map_err(op("sts:GetCallerIdentity"))?;
        Ok(out.account().unwrap_or("123456789012").to_string())
    }

    /// Puts one `EC2 Spot Instance Interruption Warning` per instance on the default event
    /// bus, as EC2 does two minutes before it reclaims a Spot instance. The rules the
    /// example created route them to the agent's queue.
    pub async fn spot_warnings(&self, instance_ids: &[String]) -> Result<usize> {
        use aws_sdk_eventbridge::types::PutEventsRequestEntry;
        let account = self.account().await?;
        let events = aws_sdk_eventbridge::Client::new(&self.config);
        let mut sent = 0;
        for chunk in instance_ids.chunks(10) {
            let mut req = events.put_events();
            for id in chunk {
                req = req.entries(
                    PutEventsRequestEntry::builder()
                        .source("aws.ec2")
                        .detail_type("EC2 Spot Instance Interruption Warning")
                        .resources(format!("arn:aws:ec2:{REGION}:{account}:instance/{id}"))
                        .detail(
                            serde_json::json!({"instance-id": id, "instance-action": "terminate"})
                                .to_string(),
                        )
                        .build(),
                );
            }
            let out = req.send().await.map_err(op("events:PutEvents"))?;
            anyhow::ensure!(
                out.failed_entry_count() == 0,
                "events:PutEvents rejected {} of {} entries: {:?}",
                out.failed_entry_count(),
                chunk.len(),
                out.entries()
            );
            sent += chunk.len();
        }
        Ok(sent)
    }

    /// What EC2 does when a Spot notice runs out: the instances go, drained or not.
    pub async fn reclaim(&self, instance_ids: &[String]) -> Result<()> {
        if instance_ids.is_empty() {
            return Ok(());
        }
        self.ec2()
            .terminate_instances()
            .set_instance_ids(Some(instance_ids.to_vec()))
            .send()
            .await
            .map_err(op("ec2:TerminateInstances"))?;
        Ok(())
    }

    /// Instance id → state name, for instances that are not terminated.
    pub async fn live_instances(&self) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        let mut pages = self
            .ec2()
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .values("stopping")
                    .values("stopped")
                    .values("shutting-down")
                    .build(),
            )
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(op("ec2:DescribeInstances"))?;
            for r in page.reservations() {
                for i in r.instances() {
                    let state = i
                        .state()
                        .and_then(|s| s.name())
                        .cloned()
                        .unwrap_or(InstanceStateName::Pending);
                    out.insert(
                        i.instance_id().unwrap_or_default().to_string(),
                        state.as_str().to_string(),
                    );
                }
            }
        }
        Ok(out)
    }

    /// The instance catalogue as the agent sees it in this region: the emulator's
    /// DescribeInstanceTypes and offerings, the agent's embedded on-demand prices and its
    /// Spot model.
    pub async fn catalog(&self) -> Result<Catalog> {
        let ec2 = self.ec2();
        let mut types = Vec::new();
        let mut pages = ec2.describe_instance_types().into_paginator().send();
        while let Some(page) = pages.next().await {
            types.extend(
                page.map_err(op("ec2:DescribeInstanceTypes"))?
                    .instance_types()
                    .iter()
                    .cloned(),
            );
        }
        let mut offerings = Vec::new();
        let mut pages = ec2
            .describe_instance_type_offerings()
            .location_type(aws_sdk_ec2::types::LocationType::AvailabilityZone)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            offerings.extend(
                page.map_err(op("ec2:DescribeInstanceTypeOfferings"))?
                    .instance_type_offerings()
                    .iter()
                    .cloned(),
            );
        }
        Ok(Catalog::from_ec2(&types, &offerings))
    }

    /// What an example may leave behind, by kind, filtered to `cluster` where names tell.
    pub async fn leftovers(&self, cluster: &str) -> Result<Vec<(String, Vec<String>)>> {
        let instances: Vec<String> = self
            .live_instances()
            .await?
            .into_iter()
            .map(|(id, state)| format!("{id} ({state})"))
            .collect();
        let sqs = aws_sdk_sqs::Client::new(&self.config);
        let queues = sqs
            .list_queues()
            .send()
            .await
            .map_err(op("sqs:ListQueues"))?
            .queue_urls()
            .iter()
            .filter(|u| u.contains(cluster))
            .cloned()
            .collect();
        let events = aws_sdk_eventbridge::Client::new(&self.config);
        let rules = events
            .list_rules()
            .send()
            .await
            .map_err(op("events:ListRules"))?
            .rules()
            .iter()
            .filter_map(|r| r.name().map(str::to_string))
            .filter(|n| n.contains(cluster))
            .collect();
        let iam = aws_sdk_iam::Client::new(&self.config);
        let roles = iam
            .list_roles()
            .send()
            .await
            .map_err(op("iam:ListRoles"))?
            .roles()
            .iter()
            .map(|r| r.role_name().to_string())
            .filter(|n| n.starts_with(&format!("{cluster}-")))
            .collect();
        let eks = aws_sdk_eks::Client::new(&self.config);
        let clusters = eks
            .list_clusters()
            .send()
            .await
            .map_err(op("eks:ListClusters"))?
            .clusters()
            .iter()
            .filter(|c| c.as_str() == cluster)
            .cloned()
            .collect();
        let lts = self
            .ec2()
            .describe_launch_templates()
            // moto returns 15 without MaxResults, and no NextToken.
            .max_results(200)
            .send()
            .await
            .map_err(op("ec2:DescribeLaunchTemplates"))?
            .launch_templates()
            .iter()
            .filter(|lt| {
                lt.tags()
                    .iter()
                    .any(|t| t.key() == Some("joiner.dev/cluster") && t.value() == Some(cluster))
            })
            .filter_map(|lt| lt.launch_template_name().map(str::to_string))
            .collect();
        Ok(vec![
            ("instances".into(), instances),
            ("launch templates".into(), lts),
            ("queues".into(), queues),
            ("rules".into(), rules),
            ("roles".into(), roles),
            ("clusters".into(), clusters),
        ])
    }
}

pub struct Network {
    pub vpc_id: String,
    pub subnet_ids: Vec<String>,
    pub security_group_id: String,
}
