//! The provider's default way to reach a cluster, through the real Terraform CLI:
//! `provider "joiner" {}` with **no** `kubernetes {}` block. The provider describes the EKS
//! cluster (whose endpoint and CA the local world binds to an API server of its own) and
//! authenticates with a token presigned from its AWS credentials; the API server asks the
//! local world's TokenReview webhook (`joiner_local/eks_token.py`), which verifies the token
//! with botocore's SigV4 and maps the caller through the cluster's access entries.
//!
//! - kube-sim: the cluster, a NodeClass and a NodePool in one apply (the cluster created by
//!   Terraform; its creator, the applying identity, is its bootstrap admin), then an
//!   identity with no access entry is refused and the provider's error says so, naming the
//!   cluster and the principal.
//! - the real control plane (kube-apiserver with `--authentication-token-webhook-*` and real
//!   RBAC): a cluster in API mode without the creator's bootstrap entry, an access entry for
//!   the applying identity made through the SDK, then the same apply.

use joiner_e2e::{Aws, MotoServer, Workspace};

const REGION: &str = "us-east-1";
const ADMIN: &str = "arn:aws:iam::123456789012:user/local-admin";

struct Network {
    role_arn: String,
    subnets: Vec<String>,
}

fn network(aws: &Aws, octet: u8) -> Network {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let role = iam
            .create_role()
            .role_name("eks-token-cluster")
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
            .expect("iam:CreateRole");
        let vpc = ec2
            .create_vpc()
            .cidr_block(format!("10.{octet}.0.0/16"))
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut subnets = Vec::new();
        for (i, az) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.{octet}.{i}.0/24"))
                .availability_zone(*az)
                .send()
                .await
                .expect("ec2:CreateSubnet");
            subnets.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        subnets.sort();
        Network {
            role_arn: role.role().unwrap().arn().to_string(),
            subnets,
        }
    })
}

/// Binds the EKS cluster `name` to an API server of the local world (endpoint and CA that
/// DescribeCluster returns), before or after the cluster exists.
fn bind(moto: &MotoServer, name: &str, url: &str, ca_pem: &str) {
    // A PEM is accepted and stored as EKS returns it (base64 of the PEM).
    let body = serde_json::json!({"endpoint": url, "certificateAuthority": ca_pem});
    let (status, answer) = moto
        .request(
            "POST",
            &format!("/joiner-local/eks/{REGION}/clusters/{name}/endpoint"),
            &body.to_string(),
        )
        .unwrap();
    assert_eq!(status, 200, "{answer}");
}

/// The verifier's decisions for cluster `name`, newest last.
fn decisions(moto: &MotoServer, name: &str) -> Vec<serde_json::Value> {
    let (status, body) = moto
        .request(
            "GET",
            &format!("/joiner-local/eks/{REGION}/{name}/authentications"),
            "",
        )
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["authentications"].as_array().cloned().unwrap_or_default()
}

fn webhook(moto: &MotoServer, name: &str) -> String {
    format!(
        "{}/joiner-local/eks/{REGION}/{name}/authenticate",
        moto.endpoint()
    )
}

/// The Kubernetes half on cluster `name`, reached with the provider's defaults.
fn kubernetes_half(cluster_ref: &str) -> String {
    format!(
        r#"
resource "joiner_node_class" "default" {{
  cluster_name = {cluster_ref}
  name         = "default"
  role         = "eks-token-node"
  ami_selector_term {{
    alias = "al2023@latest"
  }}
  subnet_selector_term {{
    tags = {{ "joiner.dev/discovery" = "eks-token" }}
  }}
  security_group_selector_term {{
    tags = {{ "joiner.dev/discovery" = "eks-token" }}
  }}
}}

resource "joiner_node_pool" "general" {{
  cluster_name = {cluster_ref}
  name         = "general"
  node_class   = joiner_node_class.default.name
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot", "on-demand"]
  }}
}}
"#
    )
}

const PROVIDER: &str = "provider \"joiner\" {\n  region = \"us-east-1\"\n}\n";

/// An IAM user with a key of its own and no access entry anywhere; the environment that
/// makes Terraform run as it.
fn outsider_env(aws: &Aws, moto: &MotoServer) -> (String, Vec<(String, String)>) {
    let key = aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        iam.create_user()
            .user_name("outsider")
            .send()
            .await
            .expect("iam:CreateUser");
        iam.create_access_key()
            .user_name("outsider")
            .send()
            .await
            .expect("iam:CreateAccessKey")
            .access_key
            .unwrap()
    });
    let env = moto
        .env()
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "AWS_ACCESS_KEY_ID" => (k, key.access_key_id.clone()),
            "AWS_SECRET_ACCESS_KEY" => (k, key.secret_access_key.clone()),
            _ => (k, v),
        })
        .collect();
    ("arn:aws:iam::123456789012:user/outsider".into(), env)
}

/// Applying a NodeClass as `outsider` fails with the provider's explanation of the 401.
fn refused_as_outsider(aws: &Aws, moto: &MotoServer, cluster: &str) {
    let (principal, env) = outsider_env(aws, moto);
    let tf = Workspace::with_env(env);
    tf.write_config(&format!(
        "{PROVIDER}{}",
        kubernetes_half(&format!("{cluster:?}"))
    ));
    let diag = tf.apply_fails_with("refused the token");
    assert_eq!(
        diag.summary, "Kubernetes API refused the provider's EKS token",
        "{diag:?}"
    );
    for says in [
        format!("EKS cluster \"{cluster}\""),
        format!("presigned as {principal}"),
        format!("no access entry for {principal} on cluster \"{cluster}\""),
        "joiner_access_entry".to_string(),
        "ruled out:".to_string(),
        "an expired token or clock skew".to_string(),
    ] {
        assert!(
            diag.detail.contains(&says),
            "{}\nshould say {says:?}",
            diag.detail
        );
    }
    let last = decisions(moto, cluster).pop().unwrap();
    assert_eq!(last["authenticated"], false, "{last}");
    assert_eq!(last["reason"], "no-access-entry", "{last}");
    assert!(
        last["error"].as_str().unwrap().contains(&principal),
        "{last}"
    );
}

#[test]
fn one_apply_reaches_kube_sim_with_the_eks_token() {
    const CLUSTER: &str = "eks-token";
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let net = network(&aws, 61);
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: CLUSTER.into(),
        eks_token_webhook: Some(webhook(&moto, CLUSTER)),
        ..Default::default()
    })
    .expect("kube-sim");
    // Bound before the cluster exists: Terraform creates it in the same apply.
    bind(&moto, CLUSTER, &sim.url(), sim.ca_pem());

    let tf = Workspace::new(&moto);
    tf.write_config(&format!(
        r#"{PROVIDER}
resource "joiner_cluster" "c" {{
  name       = "{CLUSTER}"
  role_arn   = "{role}"
  subnet_ids = [{subnets}]
}}

# The cluster gives its creator nothing implicitly: the applying identity is admitted by
# its own access entry, which the Kubernetes half waits for.
data "joiner_caller_identity" "me" {{}}

resource "joiner_access_entry" "me" {{
  cluster_name  = joiner_cluster.c.name
  principal_arn = data.joiner_caller_identity.me.principal_arn
  access_policy {{
    policy_arn = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    scope      = "cluster"
  }}
}}
{half}"#,
        role = net.role_arn,
        subnets = net
            .subnets
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        half = kubernetes_half("joiner_access_entry.me.cluster_name"),
    ));
    tf.apply();
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // The objects are in kube-sim, written by the identity the token named.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(sim.client()).unwrap();
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("joiner.dev", "v1", "NodePool"),
        "nodepools",
    );
    let pools: kube::Api<kube::core::DynamicObject> = kube::Api::all_with(client, &ar);
    assert!(rt.block_on(pools.get_opt("general")).unwrap().is_some());
    let who = sim.eks_authentications();
    assert!(!who.is_empty(), "the provider never sent an EKS token");
    for a in &who {
        assert!(a.authenticated, "{a:?}");
        assert_eq!(a.username.as_deref(), Some(ADMIN));
        assert_eq!(a.groups, vec!["system:masters".to_string()]);
    }

    refused_as_outsider(&aws, &moto, CLUSTER);
    tf.destroy();
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    fn apply_with_the_eks_token() {
        const CLUSTER: &str = "eks-token-cp";
        let moto = MotoServer::start();
        let aws = Aws::new(&moto);
        let net = network(&aws, 62);
        // API mode without the creator's bootstrap entry: the applying identity is admitted by
        // the access entry the test makes, nothing else.
        aws.block_on(async {
            let eks = aws_sdk_eks::Client::new(aws.sdk_config());
            eks.create_cluster()
                .name(CLUSTER)
                .role_arn(&net.role_arn)
                .resources_vpc_config(
                    aws_sdk_eks::types::VpcConfigRequest::builder()
                        .set_subnet_ids(Some(net.subnets.clone()))
                        .build(),
                )
                .access_config(
                    aws_sdk_eks::types::CreateAccessConfigRequest::builder()
                        .authentication_mode(aws_sdk_eks::types::AuthenticationMode::Api)
                        .bootstrap_cluster_creator_admin_permissions(false)
                        .build(),
                )
                .send()
                .await
                .expect("eks:CreateCluster");
            eks.create_access_entry()
                .cluster_name(CLUSTER)
                .principal_arn(ADMIN)
                .send()
                .await
                .expect("eks:CreateAccessEntry");
            eks.associate_access_policy()
                .cluster_name(CLUSTER)
                .principal_arn(ADMIN)
                .policy_arn("arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy")
                .access_scope(
                    aws_sdk_eks::types::AccessScope::builder()
                        .r#type(aws_sdk_eks::types::AccessScopeType::Cluster)
                        .build(),
                )
                .send()
                .await
                .expect("eks:AssociateAccessPolicy");
        });
        let hook = webhook(&moto, CLUSTER);
        let cp = std::thread::spawn(move || {
            joiner_control_plane::ControlPlane::start(joiner_control_plane::Options {
                controller_manager: false,
                scheduler: false,
                kwok: false,
                token_webhook: Some(hook),
                ..Default::default()
            })
        })
        .join()
        .unwrap()
        .expect("control plane");
        bind(&moto, CLUSTER, cp.url(), cp.ca_pem());

        let tf = Workspace::new(&moto);
        tf.write_config(&format!(
            "{PROVIDER}{}",
            kubernetes_half(&format!("{CLUSTER:?}"))
        ));
        tf.apply();
        tf.plan_is_empty();
        let pools = cp
            .kubectl(&["get", "nodepools.joiner.dev", "-o", "name"])
            .unwrap();
        assert!(pools.contains("nodepool.joiner.dev/general"), "{pools}");
        let ok = decisions(&moto, CLUSTER);
        assert!(
            ok.iter().any(|d| d["authenticated"] == true
                && d["user"]["username"] == ADMIN
                && d["user"]["groups"][0] == "system:masters"),
            "{ok:?}"
        );

        refused_as_outsider(&aws, &moto, CLUSTER);
        tf.destroy();
    }
}
