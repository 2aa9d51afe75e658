//! IRSA as STS sees it: kube-sim playing an EKS cluster gives a pod of an annotated
//! ServiceAccount a web-identity token issued by the cluster's OIDC issuer and signed with
//! the key kube-sim published for it, and the local world's STS (IAM enforced) verifies that
//! token and the role's trust. It runs on kube-sim only (the runner is a kube-sim hook).

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_eks::types::VpcConfigRequest;
use base64::Engine;
use common::{add_fake_node, kubectl_ok, kubectl_stdin, wait_for};
use kube_sim::{ImageSource, Options, TargetCluster};
use serde_json::{json, Value};

const CLUSTER: &str = "irsa-sim";
const ACCOUNT: &str = "123456789012";

fn apply(target: &TargetCluster, obj: &Value) {
    let out = kubectl_stdin(target, &["apply", "-f", "-"], Some(&obj.to_string()));
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A role that pods of `service_account` in `joiner` may assume through the issuer's provider.
async fn irsa_role(iam: &aws_sdk_iam::Client, name: &str, host: &str, service_account: &str) {
    let trust = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Federated": format!("arn:aws:iam::{ACCOUNT}:oidc-provider/{host}")},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {
            format!("{host}:sub"): format!("system:serviceaccount:joiner:{service_account}"),
            format!("{host}:aud"): "sts.amazonaws.com"}}}]});
    iam.create_role()
        .role_name(name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("iam:CreateRole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_service_account_gets_a_token_sts_accepts_for_its_role_only() {
    let moto = joiner_test_support::MotoServer::start_enforced();
    let conf = kube_sim::aws::sdk_config(&moto.endpoint(), "us-east-1").await;
    let eks = aws_sdk_eks::Client::new(&conf);
    let iam = aws_sdk_iam::Client::new(&conf);
    let sts = aws_sdk_sts::Client::new(&conf);
    eks.create_cluster()
        .name(CLUSTER)
        .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/cluster"))
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .subnet_ids("subnet-12345678")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateCluster");
    let issuer = eks
        .describe_cluster()
        .name(CLUSTER)
        .send()
        .await
        .expect("eks:DescribeCluster")
        .cluster()
        .and_then(|c| c.identity())
        .and_then(|i| i.oidc())
        .and_then(|o| o.issuer())
        .expect("the cluster's OIDC issuer")
        .to_string();
    let host = issuer.trim_start_matches("https://").to_string();
    iam.create_open_id_connect_provider()
        .url(&issuer)
        .client_id_list("sts.amazonaws.com")
        .thumbprint_list("9e99a48a9960b14926bb7f3b02e22da2b0ab7280")
        .send()
        .await
        .expect("iam:CreateOpenIDConnectProvider");
    irsa_role(&iam, "agent", &host, "agent").await;
    irsa_role(&iam, "someone-else", &host, "someone-else").await;

    let target = TargetCluster::sim_with(Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        images: vec![(
            "example.com/sim-pod".into(),
            ImageSource::Binary(PathBuf::from(env!("CARGO_BIN_EXE_sim-pod"))),
        )],
        ..Default::default()
    })
    .expect("start kube-sim");
    add_fake_node(&target, "node-a", "8", "32Gi", &[]);
    kubectl_ok(&target, &["create", "namespace", "joiner"]);
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent", "namespace": "joiner",
            "annotations": {"eks.amazonaws.com/role-arn": format!("arn:aws:iam::{ACCOUNT}:role/agent")}}}),
    );
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", "namespace": "joiner"},
            "spec": {"serviceAccountName": "agent",
              "containers": [{"name": "main", "image": "example.com/sim-pod:1", "args": ["serve"]}]}}),
    );
    // The program prints its environment once it runs; the log only grows.
    let token_file = wait_for(
        "the pod's IRSA environment",
        Duration::from_secs(60),
        || {
            let log = common::kubectl(&target, &["logs", "-n", "joiner", "agent"]);
            String::from_utf8_lossy(&log.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("env AWS_WEB_IDENTITY_TOKEN_FILE="))
                .map(str::to_string)
        },
    );
    let token = std::fs::read_to_string(&token_file).expect("read the token file");
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).expect("a JWT"))
            .expect("base64url claims"),
    )
    .expect("JSON claims");
    assert_eq!(claims["iss"], issuer.as_str(), "the cluster's OIDC issuer");
    assert_eq!(claims["sub"], "system:serviceaccount:joiner:agent");

    let assume = |role: &str| {
        sts.assume_role_with_web_identity()
            .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/{role}"))
            .role_session_name("pod")
            .web_identity_token(&token)
            .send()
    };
    let ok = assume("agent")
        .await
        .expect("STS accepts the pod's token for the role its ServiceAccount names");
    assert_eq!(
        ok.assumed_role_user().map(|u| u.arn()),
        Some(format!("arn:aws:sts::{ACCOUNT}:assumed-role/agent/pod").as_str())
    );
    let err = assume("someone-else")
        .await
        .expect_err("a role whose trust names another ServiceAccount")
        .into_service_error();
    let meta = aws_sdk_sts::error::ProvideErrorMetadata::meta(&err);
    assert_eq!(
        (meta.code(), meta.message()),
        (
            Some("AccessDenied"),
            Some("Not authorized to perform sts:AssumeRoleWithWebIdentity")
        )
    );
    let d: Value = serde_json::from_str(&moto.iam_decisions("web-identity:")).unwrap();
    assert_eq!(
        (d["calls"].as_u64(), d["refused"].as_u64()),
        (Some(2), Some(1)),
        "{d:#}"
    );
}
