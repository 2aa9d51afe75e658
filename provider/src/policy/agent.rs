//! The agent role's inline policy: exactly what `joiner-agent` calls, scoped to one cluster.
//!
//! Scoping is done with one tag, [`CLUSTER_TAG_KEY`]` = <cluster name>`, that the agent puts
//! on everything it creates (instances, volumes, network interfaces, Spot requests, fleets,
//! launch templates). Create calls must carry it (`aws:RequestTag`), and destructive calls
//! only apply to objects that carry it (`aws:ResourceTag`). The key is fixed and the cluster
//! name is the *value*, unlike `kubernetes.io/cluster/<name>`: the name then appears once
//! per condition instead of once per key and per condition, which is what keeps the policy
//! far below IAM's size quota even for a 100-character cluster name (terraform-aws-eks's
//! Karpenter policy overflows the 6,144-character managed-policy quota in that case).
//!
//! The agent launches only with CreateFleet of type `instant`, reads prices from its
//! embedded table (never the Price List API) and is given the queue's URL (never
//! GetQueueUrl), so neither of the last two is granted: the agent's end-to-end tests run
//! under enforced IAM with this policy and list every action they use.
//!
//! An instant fleet launches in the caller's own security context: it needs no
//! service-linked role (the EC2 Fleet user guide, "EC2 Fleet prerequisites"), and the
//! Service Authorization Reference says CreateFleet's resource-level permissions "do not
//! include the resources specified in a launch template", which are authorized under
//! `ec2:RunInstances`. So every launch grant below names both actions, as Karpenter's
//! controller policy does, and tags applied at launch are allowed under both
//! `ec2:CreateAction`s. Without `ec2:RunInstances` every launch fails on AWS: CreateFleet
//! answers with an `UnauthorizedOperation` error per override and no instance.
//!
//! What a launch touches, and how each can be scoped:
//! - created by it (instance, volume, network-interface, spot-instances-request, fleet):
//!   must be tagged at creation → `aws:RequestTag`. The fleet, instances and volumes are
//!   tagged by the CreateFleet request, network interfaces and Spot requests by the launch
//!   template (CreateFleet's TagSpecifications cannot name them);
//! - the launch template used: created earlier by the agent → `aws:ResourceTag`;
//! - existing objects it only references (image, snapshot, subnet, security group, the
//!   capacity reservation a `reserved` launch targets): AMIs and their snapshots belong to
//!   other accounts and subnets, security groups and reservations may be shared from
//!   another account, so they cannot carry our tag. They are limited to the cluster's
//!   region instead.

use super::arn::Arn;
use super::document::{PolicyDocument, Statement};
use super::trust::service_principal;

/// The tag key that marks EC2 objects as belonging to a joiner cluster; the value is the
/// cluster name. `joiner-agent` must set it on every object it creates.
pub const CLUSTER_TAG_KEY: &str = "joiner.dev/cluster";

/// Tags the agent may add to its own instances after launch (node names and NodeClaims).
pub const POST_LAUNCH_TAG_KEYS: &[&str] =
    &["Name", "joiner.dev/nodeclaim", "karpenter.sh/nodeclaim"];

/// Tags the agent puts on a Karpenter instance it adopts.
pub const ADOPTION_TAG_KEYS: &[&str] = &[
    CLUSTER_TAG_KEY,
    "joiner.dev/nodeclaim",
    "joiner.dev/nodepool",
];

/// What the agent policy is scoped to. All ARNs are validated before this is built.
#[derive(Debug, Clone)]
pub struct AgentScope {
    /// The EKS cluster: gives the partition, region, account and name.
    pub cluster: Arn,
    /// The interruption queue's ARN.
    pub queue_arn: String,
    /// The node role passed to EC2 through the instance profile.
    pub node_role_arn: String,
    /// The customer managed KMS key of an SSE-KMS queue: reading an encrypted message is
    /// a `kms:Decrypt` by SQS on the reader's behalf, which IAM authorizes for the reader.
    pub queue_kms_key_arn: Option<String>,
}

/// The agent's inline policy.
pub fn agent_policy(scope: &AgentScope) -> PolicyDocument {
    let names = Names::of(scope);
    let mut statements = tagging_statements(&names);
    statements.extend(launch_statements(&names));
    statements.extend(ebs_key_statements(&names));
    statements.extend(service_statements(scope, &names));
    PolicyDocument::new(statements)
}

/// The cluster's partition, region, account and name, and the cluster tag's condition
/// keys, as the statements name them.
struct Names<'a> {
    p: &'a str,
    r: &'a str,
    a: &'a str,
    cluster_name: &'a str,
    request_tag: String,
    resource_tag: String,
}

impl<'a> Names<'a> {
    fn of(scope: &'a AgentScope) -> Self {
        let c = &scope.cluster;
        Names {
            p: &c.partition,
            r: &c.region,
            a: &c.account,
            cluster_name: c.resource_name(),
            request_tag: format!("aws:RequestTag/{CLUSTER_TAG_KEY}"),
            resource_tag: format!("aws:ResourceTag/{CLUSTER_TAG_KEY}"),
        }
    }

    /// The ARN pattern of every EC2 object of `kind` in the region owned by `account`.
    fn ec2(&self, account: &str, kind: &str) -> String {
        format!("arn:{}:ec2:{}:{account}:{kind}/*", self.p, self.r)
    }

    /// What a launch creates (and the launch templates): the objects that must carry the tag.
    fn created(&self) -> [String; 6] {
        [
            "instance",
            "volume",
            "network-interface",
            "spot-instances-request",
            "fleet",
            "launch-template",
        ]
        .map(|k| self.ec2(self.a, k))
    }
}

/// An instant fleet is authorized as both (see the module docs).
const LAUNCH: [&str; 2] = ["ec2:RunInstances", "ec2:CreateFleet"];

/// Creating tagged objects, and the only tags the agent may write.
fn tagging_statements(n: &Names<'_>) -> Vec<Statement> {
    let cluster_name = n.cluster_name;
    vec![
        // Objects created by a launch, and launch templates, must be tagged for this cluster.
        Statement::allow("CreateTagged")
            .actions(LAUNCH.into_iter().chain(["ec2:CreateLaunchTemplate"]))
            .resources(n.created())
            .condition("StringEquals", &n.request_tag, [cluster_name]),
        // Tags may be written only as part of those create calls (tag-on-create): the
        // fleet call's own under CreateFleet, and what each launch applies from the template
        // (network interfaces, Spot requests) under RunInstances...
        Statement::allow("TagOnCreate")
            .actions(["ec2:CreateTags"])
            .resources(n.created())
            .condition("StringEquals", &n.request_tag, [cluster_name])
            .condition(
                "StringEquals",
                "ec2:CreateAction",
                ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
            ),
        // ...or to name this cluster's instances, never to change the cluster tag itself.
        Statement::allow("TagOwnNodes")
            .actions(["ec2:CreateTags"])
            .resources([n.ec2(n.a, "instance")])
            .condition("StringEquals", &n.resource_tag, [cluster_name])
            .condition(
                "ForAllValues:StringEquals",
                "aws:TagKeys",
                POST_LAUNCH_TAG_KEYS.iter().copied(),
            ),
        // Adopting Karpenter's nodes (a migration): its instances of this cluster (its
        // ownership tag and its pool tag) may be given this cluster's tag and a claim,
        // nothing else; from then on the tag-scoped statements here apply to them.
        Statement::allow("AdoptKarpenterNodes")
            .actions(["ec2:CreateTags"])
            .resources([n.ec2(n.a, "instance")])
            .condition(
                "StringEquals",
                &format!("aws:ResourceTag/kubernetes.io/cluster/{cluster_name}"),
                ["owned"],
            )
            .condition("StringLike", "aws:ResourceTag/karpenter.sh/nodepool", ["*"])
            .condition("StringEquals", &n.request_tag, [cluster_name])
            .condition(
                "ForAllValues:StringEquals",
                "aws:TagKeys",
                ADOPTION_TAG_KEYS.iter().copied(),
            ),
    ]
}

/// Launching from the agent's templates and its inputs, terminating what it launched, and
/// reading EC2.
fn launch_statements(n: &Names<'_>) -> Vec<Statement> {
    let a = n.a;
    vec![
        // Launching from a launch template requires permission on the template itself.
        Statement::allow("LaunchFromOwnTemplates")
            .actions(LAUNCH)
            .resources([n.ec2(a, "launch-template")])
            .condition("StringEquals", &n.resource_tag, [n.cluster_name]),
        // Referenced, untaggable inputs of a launch, limited to the region. A capacity
        // reservation a NodeClass selects may be shared by another account, like a subnet.
        Statement::allow("LaunchInputs").actions(LAUNCH).resources([
            n.ec2("", "image"),
            n.ec2("", "snapshot"),
            n.ec2("*", "subnet"),
            n.ec2("*", "security-group"),
            n.ec2("*", "capacity-reservation"),
        ]),
        Statement::allow("DeleteOwn")
            .actions(["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"])
            .resources([n.ec2(a, "instance"), n.ec2(a, "launch-template")])
            .condition("StringEquals", &n.resource_tag, [n.cluster_name]),
        // Describe calls do not support resource-level permissions.
        Statement::allow("ReadOnly")
            .actions(["ec2:Describe*"])
            .resources(["*"]),
    ]
}

/// The KMS keys of encrypted EBS volumes, used by EC2 on the agent's behalf at launch.
///
/// A volume encrypted with a customer managed key (a NodeClass `blockDeviceMappings`
/// `kmsKeyId`, or the account's EBS default key once `ModifyEbsDefaultKmsKeyId` made one
/// the default, which with encryption by default covers every volume) is created and
/// attached by EC2 calling KMS as the launching principal: `kms:CreateGrant` (for the
/// instance's use of the key), `kms:GenerateDataKeyWithoutPlaintext`, `kms:Decrypt`,
/// `kms:DescribeKey`, and `kms:ReEncrypt*` when the source snapshot has another key (the
/// EBS user guide, "Requirements for Amazon EBS encryption", permissions for users).
/// Without them EC2 does not refuse the call: the instance goes from `pending` to
/// `terminated` with state reason `Client.InternalError`, and a launcher relaunches in a
/// loop (Karpenter's troubleshooting guide, "Node terminates before ready on failed
/// encrypted EBS volume"). An AWS managed key (`alias/aws/ebs`) needs none of this.
///
/// The resource is `*` because the keys are not the provider's to know: a NodeClass may be
/// applied by anyone after the role (and name a key by alias), and the account's default
/// key is an account setting that can change at any time; a list fixed at apply time would
/// reproduce the failure on the next change. What bounds the grant instead are the
/// conditions KMS sets for a request EC2 makes for a caller: `kms:ViaService` (only
/// through EC2 in this region, never a direct KMS call) and `kms:CallerAccount` (this
/// account's principals), and for grants `kms:GrantIsForAWSResource` (a grant EC2 creates
/// for its resource, never one the agent could hand to another principal). The key
/// policy still decides first: a key whose policy does not delegate to IAM (the default
/// key policy does) must name the agent's role itself.
fn ebs_key_statements(n: &Names<'_>) -> Vec<Statement> {
    let via = format!("ec2.{}.amazonaws.com", n.r);
    vec![
        Statement::allow("EbsVolumeKeys")
            .actions([
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:GenerateDataKeyWithoutPlaintext",
                "kms:ReEncrypt*",
            ])
            .resources(["*"])
            .condition("StringEquals", "kms:ViaService", [via.clone()])
            .condition("StringEquals", "kms:CallerAccount", [n.a]),
        Statement::allow("EbsVolumeKeyGrants")
            .actions(["kms:CreateGrant"])
            .resources(["*"])
            .condition("StringEquals", "kms:ViaService", [via])
            .condition("StringEquals", "kms:CallerAccount", [n.a])
            .condition("Bool", "kms:GrantIsForAWSResource", ["true"]),
    ]
}

/// The names EC2 may be passed the node role under. In China EC2's principal is
/// `ec2.amazonaws.com.cn`, but the name a PassRole check sees there is not documented as
/// that one alone; Karpenter's reference policy allows both (its getting-started
/// `cloudformation.yaml`, `AllowPassingInstanceRole`), and a second name costs nothing.
fn ec2_pass_targets(partition: &str) -> Vec<String> {
    let principal = service_principal("ec2", partition);
    if principal == "ec2.amazonaws.com" {
        vec![principal]
    } else {
        vec!["ec2.amazonaws.com".to_string(), principal]
    }
}

/// What the agent needs beyond EC2: AMI parameters, the interruption queue (and its key),
/// passing the node role, the cluster and its Fargate profiles, and Spot's service-linked
/// role.
fn service_statements(scope: &AgentScope, n: &Names<'_>) -> Vec<Statement> {
    let (p, r, a, cluster_name) = (n.p, n.r, n.a, n.cluster_name);
    let mut statements = vec![
        // Public AMI IDs (e.g. /aws/service/eks/optimized-ami/...).
        Statement::allow("AmiParameters")
            .actions(["ssm:GetParameter"])
            .resources([format!("arn:{p}:ssm:{r}::parameter/aws/service/*")]),
        Statement::allow("InterruptionQueue")
            .actions(["sqs:ReceiveMessage", "sqs:DeleteMessage"])
            .resources([scope.queue_arn.clone()]),
        Statement::allow("PassNodeRole")
            .actions(["iam:PassRole"])
            .resources([scope.node_role_arn.clone()])
            .condition("StringEquals", "iam:PassedToService", ec2_pass_targets(p)),
        Statement::allow("Cluster")
            .actions(["eks:DescribeCluster", "eks:ListFargateProfiles"])
            .resources([scope.cluster.to_string()]),
        // Pods a Fargate profile selects are never given EC2 capacity.
        Statement::allow("FargateProfiles")
            .actions(["eks:DescribeFargateProfile"])
            .resources([format!(
                "arn:{p}:eks:{r}:{a}:fargateprofile/{cluster_name}/*"
            )]),
        // The first Spot launch in an account creates EC2 Spot's service-linked role; without
        // this a brand-new account's first CreateFleet fails. Only that one role.
        Statement::allow("SpotServiceLinkedRole")
            .actions(["iam:CreateServiceLinkedRole"])
            .resources([format!(
                "arn:{p}:iam::{a}:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot"
            )])
            .condition("StringEquals", "iam:AWSServiceName", ["spot.amazonaws.com"]),
    ];
    // The Region's on-demand prices from the Price List API, which has no resource-level
    // permissions (Karpenter's `AllowPricingReadActions`). Its endpoints are in the `aws`
    // and `aws-cn` partitions only; elsewhere the agent never asks, so nothing is granted.
    if p == "aws" || p == "aws-cn" {
        statements.push(
            Statement::allow("PriceList")
                .actions(["pricing:GetProducts"])
                .resources(["*"]),
        );
    }
    // Only through SQS: the key is the queue's, not the agent's to use elsewhere.
    if let Some(key) = &scope.queue_kms_key_arn {
        statements.push(
            Statement::allow("InterruptionQueueKey")
                .actions(["kms:Decrypt"])
                .resources([key.clone()])
                .condition(
                    "StringEquals",
                    "kms:ViaService",
                    [format!("sqs.{r}.amazonaws.com")],
                ),
        );
    }
    statements
}

/// IAM's quotas, in characters excluding whitespace. An inline role policy may total
/// 10,240 characters (all inline policies of the role together); a managed policy may be
/// 6,144. We hold the inline policy to the stricter managed figure, so that a user may
/// also turn it into a managed policy (as some organisations require) without hitting the
/// limit that broke terraform-aws-eks.
pub const INLINE_ROLE_POLICY_QUOTA: usize = 10_240;
pub const MANAGED_POLICY_QUOTA: usize = 6_144;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::arn::partition_for_region;
    use serde_json::Value;

    fn scope(region: &str, cluster_name: &str) -> AgentScope {
        let p = partition_for_region(region);
        let account = "123456789012";
        AgentScope {
            cluster: Arn::parse(&format!(
                "arn:{p}:eks:{region}:{account}:cluster/{cluster_name}"
            ))
            .unwrap(),
            queue_arn: format!("arn:{p}:sqs:{region}:{account}:{}", "q".repeat(80)),
            node_role_arn: format!("arn:{p}:iam::{account}:role/{}", "n".repeat(64)),
            queue_kms_key_arn: Some(format!(
                "arn:{p}:kms:{region}:{account}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
            )),
        }
    }

    #[test]
    fn only_the_spot_service_linked_role_may_be_created() {
        let doc = agent_policy(&scope("us-east-1", "prod")).to_value();
        let st = statement(&doc, "SpotServiceLinkedRole");
        assert_eq!(
            st["Action"],
            serde_json::json!("iam:CreateServiceLinkedRole")
        );
        assert_eq!(
            st["Resource"],
            serde_json::json!("arn:aws:iam::123456789012:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot")
        );
        assert_eq!(
            st["Condition"]["StringEquals"]["iam:AWSServiceName"],
            serde_json::json!("spot.amazonaws.com")
        );
    }

    fn statement<'a>(doc: &'a Value, sid: &str) -> &'a Value {
        doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Sid"] == sid)
            .unwrap_or_else(|| panic!("no statement {sid}"))
    }

    /// Every real region name the SDK knows (from its endpoint partitions), for the size test.
    const REGIONS: &[&str] = &[
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "af-south-1",
        "ap-east-1",
        "ap-east-2",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-6",
        "ap-southeast-7",
        "ca-central-1",
        "ca-west-1",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "il-central-1",
        "me-central-1",
        "me-south-1",
        "mx-central-1",
        "sa-east-1",
        "cn-north-1",
        "cn-northwest-1",
        "us-gov-east-1",
        "us-gov-west-1",
        "eusc-de-east-1",
        "us-iso-east-1",
        "us-iso-west-1",
        "us-isob-east-1",
        "us-isob-west-1",
        "eu-isoe-west-1",
        "us-isof-east-1",
        "us-isof-south-1",
    ];

    /// The size proof: a 100-character cluster name (EKS's maximum) in the longest
    /// region name. The longest region the SDK knows is `us-isof-south-1` (15 characters,
    /// partition `aws-iso-f`, whose partition name and DNS suffix are also the longest);
    /// the longest commercial ones are `ap-southeast-*`/`ap-northeast-*` (14). We check
    /// every region, with an 80-character queue name and a 64-character node role name
    /// (both maxima), against the stricter managed-policy quota.
    #[test]
    fn policy_fits_iam_quota_for_longest_names_in_every_region() {
        let longest = REGIONS.iter().max_by_key(|r| r.len()).unwrap();
        assert_eq!(*longest, "us-isof-south-1");
        let name = "c".repeat(100);
        let mut worst = (0, "");
        for region in REGIONS {
            let size = agent_policy(&scope(region, &name)).quota_size();
            if size > worst.0 {
                worst = (size, region);
            }
        }
        println!(
            "agent policy: {} characters (whitespace excluded) in {} with a 100-character cluster name; quotas {} managed / {} inline",
            worst.0, worst.1, MANAGED_POLICY_QUOTA, INLINE_ROLE_POLICY_QUOTA
        );
        assert!(worst.0 < MANAGED_POLICY_QUOTA, "{worst:?}");
        assert_eq!(worst.1, "us-isof-south-1");
    }

    #[test]
    fn creates_require_the_cluster_tag() {
        let doc = agent_policy(&scope("eu-west-1", "prod")).to_value();
        let s = statement(&doc, "CreateTagged");
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:RequestTag/joiner.dev/cluster"],
            "prod"
        );
        let resources = s["Resource"].as_array().unwrap();
        assert!(resources.contains(&Value::from(
            "arn:aws:ec2:eu-west-1:123456789012:instance/*"
        )));
        assert!(!resources
            .iter()
            .any(|r| r.as_str().unwrap().contains("subnet")));
        let t = statement(&doc, "TagOnCreate");
        assert_eq!(
            t["Condition"]["StringEquals"]["ec2:CreateAction"],
            serde_json::json!(["RunInstances", "CreateFleet", "CreateLaunchTemplate"])
        );
        assert!(resources.contains(&Value::from(
            "arn:aws:ec2:eu-west-1:123456789012:spot-instances-request/*"
        )));
    }

    /// An instant fleet's launches are authorized as `ec2:RunInstances` for the caller, on
    /// the template and everything it names: each launch grant carries both actions.
    #[test]
    fn every_launch_grant_is_also_a_run_instances_grant() {
        let doc = agent_policy(&scope("eu-west-1", "prod")).to_value();
        let mut launch_grants = Vec::new();
        for st in doc["Statement"].as_array().unwrap() {
            let actions = match &st["Action"] {
                Value::String(a) => vec![a.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let fleet = actions.contains(&"ec2:CreateFleet");
            let run = actions.contains(&"ec2:RunInstances");
            assert_eq!(fleet, run, "{st}");
            if run {
                launch_grants.push(st["Sid"].as_str().unwrap());
            }
        }
        assert_eq!(
            launch_grants,
            ["CreateTagged", "LaunchFromOwnTemplates", "LaunchInputs"]
        );
    }

    #[test]
    fn destructive_actions_require_the_resource_tag() {
        let doc = agent_policy(&scope("eu-west-1", "prod")).to_value();
        let s = statement(&doc, "DeleteOwn");
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:ResourceTag/joiner.dev/cluster"],
            "prod"
        );
        // No statement grants terminate or delete without that condition.
        for st in doc["Statement"].as_array().unwrap() {
            let actions = st["Action"].to_string();
            if actions.contains("TerminateInstances") || actions.contains("DeleteLaunchTemplate") {
                assert!(
                    st["Condition"]["StringEquals"]["aws:ResourceTag/joiner.dev/cluster"]
                        .is_string()
                );
            }
        }
    }

    #[test]
    fn the_price_list_is_read_where_it_has_an_endpoint() {
        for region in ["us-east-1", "eu-west-1", "cn-north-1"] {
            let doc = agent_policy(&scope(region, "prod")).to_value();
            let st = statement(&doc, "PriceList");
            assert_eq!(st["Action"], "pricing:GetProducts", "{region}");
            assert_eq!(st["Resource"], "*", "{region}");
            assert!(st.get("Condition").is_none(), "{region}");
        }
    }

    #[test]
    fn only_this_clusters_queue_node_role_and_cluster() {
        let sc = scope("us-gov-west-1", "gov");
        let doc = agent_policy(&sc).to_value();
        assert_eq!(
            statement(&doc, "InterruptionQueue")["Resource"],
            sc.queue_arn.as_str()
        );
        let pass = statement(&doc, "PassNodeRole");
        assert_eq!(pass["Resource"], sc.node_role_arn.as_str());
        assert_eq!(pass["Action"], "iam:PassRole");
        assert_eq!(
            pass["Condition"]["StringEquals"]["iam:PassedToService"],
            "ec2.amazonaws.com"
        );
        assert_eq!(
            statement(&doc, "Cluster")["Resource"],
            "arn:aws-us-gov:eks:us-gov-west-1:123456789012:cluster/gov"
        );
        assert_eq!(
            statement(&doc, "AmiParameters")["Resource"],
            "arn:aws-us-gov:ssm:us-gov-west-1::parameter/aws/service/*"
        );
        // Nothing but Describe* is granted on "*", except the EBS keys through EC2 alone (and
        // the price list, which GovCloud does not have).
        for st in doc["Statement"].as_array().unwrap() {
            assert_ne!(st["Sid"], "PriceList", "no Price List API in GovCloud");
            if st["Resource"] == "*" && st["Sid"] != "ReadOnly" {
                assert!(
                    st["Sid"].as_str().unwrap().starts_with("EbsVolumeKey"),
                    "{st}"
                );
                assert_eq!(
                    st["Condition"]["StringEquals"]["kms:ViaService"],
                    "ec2.us-gov-west-1.amazonaws.com"
                );
            } else if st["Resource"] == "*" {
                assert_eq!(st["Action"], serde_json::json!("ec2:Describe*"));
            }
        }
    }

    #[test]
    fn an_sse_kms_queue_key_is_decrypted_through_sqs_only() {
        let mut sc = scope("eu-west-1", "prod");
        let doc = agent_policy(&sc).to_value();
        let key = statement(&doc, "InterruptionQueueKey");
        assert_eq!(key["Action"], "kms:Decrypt");
        assert_eq!(key["Resource"], sc.queue_kms_key_arn.as_deref().unwrap());
        assert_eq!(
            key["Condition"]["StringEquals"]["kms:ViaService"],
            "sqs.eu-west-1.amazonaws.com"
        );
        sc.queue_kms_key_arn = None;
        let doc = agent_policy(&sc).to_value();
        assert!(
            !doc.to_string().contains("sqs.eu-west-1.amazonaws.com"),
            "SSE-SQS needs no KMS grant"
        );
        assert!(doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["Sid"] != "InterruptionQueueKey"));
    }

    /// EC2's KMS calls for an encrypted volume: only through EC2 in the cluster's region,
    /// for this account's principals, and grants only for EC2's own resources; nothing else
    /// of KMS (no direct Encrypt, no grant for another principal, no key administration).
    #[test]
    fn ebs_keys_are_usable_through_ec2_only() {
        let doc = agent_policy(&scope("eu-west-1", "prod")).to_value();
        let use_ = statement(&doc, "EbsVolumeKeys");
        assert_eq!(
            use_["Action"],
            serde_json::json!([
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:GenerateDataKeyWithoutPlaintext",
                "kms:ReEncrypt*"
            ])
        );
        let grant = statement(&doc, "EbsVolumeKeyGrants");
        assert_eq!(grant["Action"], "kms:CreateGrant");
        assert_eq!(
            grant["Condition"]["Bool"]["kms:GrantIsForAWSResource"],
            "true"
        );
        for st in [use_, grant] {
            assert_eq!(st["Resource"], "*");
            let eq = &st["Condition"]["StringEquals"];
            assert_eq!(eq["kms:ViaService"], "ec2.eu-west-1.amazonaws.com");
            assert_eq!(eq["kms:CallerAccount"], "123456789012");
        }
        assert!(use_["Condition"].get("Bool").is_none());
        // Every other KMS action is the queue key's, through SQS.
        let kms_actions: Vec<String> = doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| !s["Sid"].as_str().unwrap().starts_with("EbsVolumeKey"))
            .flat_map(|s| match &s["Action"] {
                Value::String(a) => vec![a.clone()],
                Value::Array(a) => a
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect(),
                _ => vec![],
            })
            .filter(|a| a.starts_with("kms:"))
            .collect();
        assert_eq!(kms_actions, ["kms:Decrypt"]);
    }

    /// The agent has no IAM client: a NodeClass names a profile Terraform made
    /// (`joiner_node_role` creates one named after its role), so the policy grants no
    /// instance-profile right; it may only pass the node role to EC2.
    #[test]
    fn no_instance_profile_rights() {
        let doc = agent_policy(&scope("eu-west-1", "prod")).to_value();
        let text = doc.to_string();
        assert!(!text.contains("InstanceProfile"), "{text}");
        assert!(!text.contains("instance-profile"), "{text}");
        let iam_actions: Vec<&str> = doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| match &s["Action"] {
                Value::String(a) => vec![a.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            })
            .filter(|a| a.starts_with("iam:"))
            .collect();
        assert_eq!(iam_actions, ["iam:PassRole", "iam:CreateServiceLinkedRole"]);
    }

    #[test]
    fn china_uses_its_ec2_principal_and_partition() {
        let doc = agent_policy(&scope("cn-north-1", "c")).to_value();
        assert_eq!(
            statement(&doc, "PassNodeRole")["Condition"]["StringEquals"]["iam:PassedToService"],
            serde_json::json!(["ec2.amazonaws.com", "ec2.amazonaws.com.cn"])
        );
        assert!(doc
            .to_string()
            .contains("arn:aws-cn:ec2:cn-north-1:123456789012:instance/*"));
        assert!(!doc.to_string().contains("arn:aws:"));
    }
}
