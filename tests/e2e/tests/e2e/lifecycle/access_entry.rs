//! `joiner_access_entry` and `joiner_cluster`'s access configuration through the real
//! Terraform CLI against the local AWS world (moto plus `joiner_local.eks_access`, which
//! serves the access-entry API with EKS's shapes and refusals): a cluster that allows access
//! entries by default and gives its creator no implicit admin, a node entry and an admin
//! entry, import, in-place changes, drift, the authentication mode moved forward (and
//! refused backwards at plan time), and EKS's refusals reaching the user as diagnostics.

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

const NODE: &str = "joiner_access_entry.node";
const ADMIN: &str = "joiner_access_entry.admin";
const C: &str = "joiner_cluster.c";
/// The identity every local test signs as (`joiner_local.identity`).
const LOCAL_ADMIN: &str = "arn:aws:iam::123456789012:user/local-admin";
const ADMIN_POLICY: &str = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy";
const EDIT_POLICY: &str = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy";

struct Prereqs {
    cluster_role: String,
    node_role: String,
    subnets: Vec<String>,
}

fn prerequisites(aws: &Aws) -> Prereqs {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let mut roles = Vec::new();
        for (name, service) in [("e2e-cluster", "eks"), ("e2e-node", "ec2")] {
            let role = iam
                .create_role()
                .role_name(name)
                .assume_role_policy_document(format!(
                    r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"Service":"{service}.amazonaws.com"}},"Action":"sts:AssumeRole"}}]}}"#
                ))
                .send()
                .await
                .expect("iam:CreateRole");
            roles.push(role.role().unwrap().arn().to_string());
        }
        let vpc = ec2.create_vpc().cidr_block("10.30.0.0/16").send().await.expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut subnets = Vec::new();
        for (i, az) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.30.{i}.0/24"))
                .availability_zone(*az)
                .send()
                .await
                .expect("ec2:CreateSubnet");
            subnets.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        Prereqs {
            cluster_role: roles[0].clone(),
            node_role: roles[1].clone(),
            subnets,
        }
    })
}

fn cluster(p: &Prereqs, extra: &str) -> String {
    format!(
        r#"resource "joiner_cluster" "c" {{
  name               = "access"
  role_arn           = "{role}"
  subnet_ids         = ["{a}", "{b}"]
  coredns_on_fargate = false
{extra}
}}
"#,
        role = p.cluster_role,
        a = p.subnets[0],
        b = p.subnets[1],
    )
}

fn entries(p: &Prereqs, admin_body: &str) -> String {
    format!(
        r#"resource "joiner_access_entry" "node" {{
  cluster_name  = joiner_cluster.c.name
  principal_arn = "{node}"
  type          = "EC2_LINUX"
}}

resource "joiner_access_entry" "admin" {{
  cluster_name  = joiner_cluster.c.name
  principal_arn = "{LOCAL_ADMIN}"
{admin_body}
}}
"#,
        node = p.node_role,
    )
}

/// The cluster's entries as EKS lists them, with each one's type and policies.
fn remote_entries(aws: &Aws, cluster: &str) -> Vec<(String, String, Vec<String>)> {
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let list = eks
            .list_access_entries()
            .cluster_name(cluster)
            .send()
            .await
            .expect("eks:ListAccessEntries");
        let mut out = Vec::new();
        for arn in list.access_entries() {
            let e = eks
                .describe_access_entry()
                .cluster_name(cluster)
                .principal_arn(arn)
                .send()
                .await
                .expect("eks:DescribeAccessEntry");
            let policies = eks
                .list_associated_access_policies()
                .cluster_name(cluster)
                .principal_arn(arn)
                .send()
                .await
                .expect("eks:ListAssociatedAccessPolicies");
            let mut p: Vec<String> = policies
                .associated_access_policies()
                .iter()
                .filter_map(|p| p.policy_arn().map(str::to_string))
                .collect();
            p.sort();
            out.push((
                arn.clone(),
                e.access_entry()
                    .unwrap()
                    .r#type()
                    .unwrap_or_default()
                    .to_string(),
                p,
            ));
        }
        out.sort();
        out
    })
}

fn strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn lifecycle_import_update_drift_and_mode_change() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let p = prerequisites(&aws);
    let tf = Workspace::new(&moto);
    let admin_v1 = format!(
        r#"  kubernetes_groups = ["platform"]
  tags              = {{ team = "platform" }}
  access_policy {{
    policy_arn = "{ADMIN_POLICY}"
    scope      = "cluster"
  }}"#
    );
    tf.write_config(&(cluster(&p, "") + &entries(&p, &admin_v1)));
    tf.apply();

    // The defaults: entries allowed, no implicit creator admin; only what the
    // configuration shows exists on the cluster.
    let c = tf.values(C);
    assert_eq!(c["authentication_mode"], "API_AND_CONFIG_MAP");
    assert_eq!(c["bootstrap_cluster_creator_admin_permissions"], false);
    assert_eq!(
        remote_entries(&aws, "access"),
        [
            (p.node_role.clone(), "EC2_LINUX".to_string(), vec![]),
            (
                LOCAL_ADMIN.to_string(),
                "STANDARD".to_string(),
                vec![ADMIN_POLICY.to_string()]
            ),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    let node = tf.values(NODE);
    assert_eq!(node["id"], format!("access:{}", p.node_role));
    assert_eq!(node["username"], "system:node:{{EC2PrivateDNSName}}");
    assert_eq!(strings(&node["kubernetes_groups"]), Vec::<String>::new());
    assert!(node["arn"]
        .as_str()
        .unwrap()
        .contains(":access-entry/access/"));
    let admin = tf.values(ADMIN);
    assert_eq!(
        admin["username"], LOCAL_ADMIN,
        "EKS names a user by its ARN"
    );
    assert_eq!(strings(&admin["kubernetes_groups"]), ["platform"]);

    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
    tf.import_verify(NODE, &format!("access:{}", p.node_role), &["timeouts"]);
    // The imported entry plans nothing; the rest of the sibling's configuration is not
    // in its state, so only this address is checked.
    let fresh = tf.import_verify(ADMIN, &format!("access:{LOCAL_ADMIN}"), &["timeouts"]);
    let plan = fresh.plan();
    assert!(
        plan.actions(ADMIN).is_empty() || plan.actions(ADMIN) == ["no-op"],
        "{:?}",
        plan.actions(ADMIN)
    );

    // In place: groups, tags, a namespace-scoped policy added, the cluster policy's scope
    // narrowed.
    let admin_v2 = format!(
        r#"  kubernetes_groups = ["platform", "viewers"]
  tags              = {{ team = "platform", env = "test" }}
  access_policy {{
    policy_arn = "{ADMIN_POLICY}"
    scope      = "namespace"
    namespaces = ["apps"]
  }}
  access_policy {{
    policy_arn = "{EDIT_POLICY}"
    scope      = "namespace"
    namespaces = ["apps", "jobs"]
  }}"#
    );
    tf.write_config(&(cluster(&p, "") + &entries(&p, &admin_v2)));
    let plan = tf.plan();
    assert_eq!(plan.actions(ADMIN), ["update"]);
    assert!(plan.actions(NODE).is_empty() || plan.actions(NODE) == ["no-op"]);
    tf.apply();
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
    let admin = tf.values(ADMIN);
    assert_eq!(
        strings(&admin["kubernetes_groups"]),
        ["platform", "viewers"]
    );
    assert_eq!(admin["tags"]["env"], "test");
    let remote = remote_entries(&aws, "access");
    let mine = remote.iter().find(|e| e.0 == LOCAL_ADMIN).unwrap();
    assert_eq!(mine.2, [ADMIN_POLICY.to_string(), EDIT_POLICY.to_string()]);

    // Drift: the node entry deleted out of band is planned again.
    aws.block_on(async {
        aws_sdk_eks::Client::new(aws.sdk_config())
            .delete_access_entry()
            .cluster_name("access")
            .principal_arn(&p.node_role)
            .send()
            .await
            .expect("eks:DeleteAccessEntry");
    });
    assert_eq!(tf.plan().actions(NODE), ["create"]);
    tf.apply();
    tf.refresh_plan_is_empty();

    // The mode moves forward in place; backwards is refused at plan time, naming it.
    tf.write_config(&(cluster(&p, r#"  authentication_mode = "API""#) + &entries(&p, &admin_v2)));
    assert_eq!(tf.plan().actions(C), ["update"]);
    tf.apply();
    assert_eq!(tf.attr(C, "authentication_mode"), "API");
    tf.refresh_plan_is_empty();
    tf.write_config(
        &(cluster(&p, r#"  authentication_mode = "API_AND_CONFIG_MAP""#) + &entries(&p, &admin_v2)),
    );
    tf.plan_fails_with("authentication_mode", "only moves forward");

    tf.write_config(&(cluster(&p, r#"  authentication_mode = "API""#) + &entries(&p, &admin_v2)));
    tf.destroy();
    assert!(aws.block_on(async {
        aws_sdk_eks::Client::new(aws.sdk_config())
            .list_clusters()
            .send()
            .await
            .unwrap()
            .clusters()
            .is_empty()
    }));
}

/// What EKS refuses reaches the user: at plan time with the attribute named when the
/// provider can tell, and from EKS (operation and code) when only EKS can.
#[test]
fn refusals() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let p = prerequisites(&aws);
    let tf = Workspace::new(&moto);

    // Plan time.
    tf.write_config(&cluster(&p, r#"  authentication_mode = "CONFIG_MAP""#));
    tf.plan_fails_with(
        "authentication_mode",
        "requires bootstrap_cluster_creator_admin_permissions = true",
    );
    tf.write_config(&cluster(
        &p,
        r#"  authentication_mode                         = "CONFIG_MAP"
  bootstrap_cluster_creator_admin_permissions = false"#,
    ));
    tf.plan_fails_with(
        "bootstrap_cluster_creator_admin_permissions",
        "requires bootstrap_cluster_creator_admin_permissions = true",
    );
    tf.write_config(&cluster(&p, r#"  authentication_mode = "api""#));
    tf.plan_fails_with("authentication_mode", "CONFIG_MAP, API_AND_CONFIG_MAP, API");
    let node_with = |extra: &str| {
        format!(
            r#"resource "joiner_access_entry" "node" {{
  cluster_name  = "access"
  principal_arn = "{node}"
  type          = "EC2_LINUX"
{extra}
}}
"#,
            node = p.node_role
        )
    };
    tf.write_config(&node_with(r#"  kubernetes_groups = ["ops"]"#));
    tf.plan_fails_with("kubernetes_groups", "No Kubernetes groups on a node entry");
    tf.write_config(&node_with(r#"  username = "me""#));
    tf.plan_fails_with("username", "remove username");
    tf.write_config(&node_with("").replace(
        &p.node_role,
        "arn:aws:sts::123456789012:assumed-role/deployer/ci",
    ));
    tf.plan_fails_with("principal_arn", "arn:aws:iam::123456789012:role/deployer");

    // EKS's own refusal: an entry on a CONFIG_MAP cluster.
    tf.write_config(
        &(cluster(
            &p,
            r#"  authentication_mode                         = "CONFIG_MAP"
  bootstrap_cluster_creator_admin_permissions = true"#,
        ) + &node_with("").replace(r#""access""#, "joiner_cluster.c.name")),
    );
    let d = tf.apply_fails_with("eks:CreateAccessEntry");
    assert!(d.mentions("InvalidRequestException"), "{d}");
    assert!(d.mentions("authentication mode"), "{d}");
    // EKS gave the creator its implicit admin on that cluster (CONFIG_MAP: in aws-auth,
    // which the emulator does not model) and made no entry.
    assert_eq!(
        tf.attr(C, "bootstrap_cluster_creator_admin_permissions"),
        true
    );
}
