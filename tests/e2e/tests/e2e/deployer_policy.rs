//! The deployer's policy (`terraform-provider-joiner policy deployer CLUSTER_ARN`, written
//! down in `docs/guides/deployer-permissions.md`) is enough, and what it leaves out is
//! refused: `examples/quickstart`, applied and destroyed by the real Terraform CLI as an IAM
//! user holding only that policy, with IAM enforced by the local world.
//!
//! 1. With one statement removed (the interruption queue's), the apply fails on the first
//!    call that needs it, with a diagnostic naming the operation, the action and the code;
//!    what was created before stays in state, so nothing is orphaned.
//! 2. With the whole policy, the next apply converges, the plan after it is empty, and a
//!    destroy leaves the account with nothing the example made. Not one of the deployer's
//!    calls was refused.
//!
//! The Kubernetes half reaches kube-sim through a kubeconfig override: the deployer's IAM
//! rights are what is under test here; the EKS token path has tests of its own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

const CLUSTER: &str = "quickstart";
const ACCOUNT: &str = "123456789012";
const DEPLOYER: &str = "deployer";

fn root() -> PathBuf {
    joiner_test_support::workspace_root()
}

/// Subnets in two zones and a security group, tagged for the quickstart's discovery.
fn network(aws: &Aws) {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let tagged = |rt| {
            TagSpecification::builder()
                .resource_type(rt)
                .tags(
                    Tag::builder()
                        .key("joiner.dev/discovery")
                        .value(CLUSTER)
                        .build(),
                )
                .build()
        };
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.40.0.0/16")
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        for (i, zone) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            ec2.create_subnet()
                .vpc_id(&vpc_id)
                .availability_zone(*zone)
                .cidr_block(format!("10.40.{}.0/20", i * 16))
                .tag_specifications(tagged(ResourceType::Subnet))
                .send()
                .await
                .expect("ec2:CreateSubnet");
        }
        ec2.create_security_group()
            .group_name("quickstart-nodes")
            .description("nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(tagged(ResourceType::SecurityGroup))
            .send()
            .await
            .expect("ec2:CreateSecurityGroup");
    })
}

/// The deployer's policy as the provider binary prints it.
fn rendered_policy() -> Value {
    let out = std::process::Command::new(joiner_e2e::provider_bin())
        .args([
            "policy",
            "deployer",
            &format!("arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{CLUSTER}"),
        ])
        .output()
        .expect("run terraform-provider-joiner policy deployer");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the policy is JSON")
}

fn put_policy(aws: &Aws, policy: &Value) {
    aws.block_on(
        aws_sdk_iam::Client::new(aws.sdk_config())
            .put_user_policy()
            .user_name(DEPLOYER)
            .policy_name("joiner-deployer")
            .policy_document(policy.to_string())
            .send(),
    )
    .expect("iam:PutUserPolicy");
}

/// The IAM user `deployer` with a key of its own; the environment that makes Terraform (and
/// so the provider) run as it.
fn deployer_env(aws: &Aws, moto: &MotoServer) -> Vec<(String, String)> {
    let key = aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        iam.create_user()
            .user_name(DEPLOYER)
            .send()
            .await
            .expect("iam:CreateUser");
        iam.create_access_key()
            .user_name(DEPLOYER)
            .send()
            .await
            .expect("iam:CreateAccessKey")
            .access_key
            .unwrap()
    });
    moto.env()
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "AWS_ACCESS_KEY_ID" => (k, key.access_key_id.clone()),
            "AWS_SECRET_ACCESS_KEY" => (k, key.secret_access_key.clone()),
            _ => (k, v),
        })
        .collect()
}

/// The quickstart as a user has it, its modules beside it, kube-sim's kubeconfig given to
/// the provider.
fn quickstart(env: Vec<(String, String)>, kubeconfig: &Path) -> Workspace {
    let mut tf = Workspace::with_env(env);
    tf.set_timeout(Duration::from_secs(600));
    tf.write_file("versions.tf", "");
    let main = std::fs::read_to_string(root().join("examples/quickstart/main.tf"))
        .expect("read the quickstart");
    tf.write_config(&main.replace("\"../../terraform-modules/", "\"./terraform-modules/"));
    copy_modules(
        &root().join("terraform-modules"),
        &tf.path().join("terraform-modules"),
    );
    tf.write_file(
        "kube_sim_override.tf",
        &format!(
            "provider \"joiner\" {{\n  kubernetes {{\n    config_path = \"{}\"\n  }}\n}}\n",
            kubeconfig.display()
        ),
    );
    let got = tf.terraform(&["get", "-no-color"]);
    assert!(got.success(), "terraform get failed:\n{got}");
    tf
}

fn copy_modules(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_modules(&p, &to.join(e.file_name()));
        } else if p.extension().is_some_and(|x| x == "tf") {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// The deployer's decisions so far: (calls, refusals as "action on resource").
/// Every action must be one the local world models (authorized on the resource AWS
/// authorizes it on): an unmodelled one is only checked against `*`, which would prove
/// nothing about a scoped statement.
fn decisions(moto: &MotoServer) -> (usize, Vec<String>) {
    let v: Value = serde_json::from_str(
        &moto.iam_decisions(&format!("arn:aws:iam::{ACCOUNT}:user/{DEPLOYER}")),
    )
    .expect("decisions are JSON");
    let all = v["decisions"].as_array().cloned().unwrap_or_default();
    let unmodelled: Vec<&Value> = all.iter().filter(|d| d["modelled"] == false).collect();
    assert!(
        unmodelled.is_empty(),
        "calls the local world does not model: {unmodelled:?}"
    );
    let refused = all
        .iter()
        .filter(|d| d["allowed"] == false)
        .map(|d| {
            format!(
                "{} on {}",
                d["action"].as_str().unwrap_or(""),
                d["resource"].as_str().unwrap_or("")
            )
        })
        .collect();
    (all.len(), refused)
}

/// What the example leaves in the account: roles, clusters, queues, rules, OIDC providers.
fn leftovers(aws: &Aws) -> Vec<String> {
    aws.block_on(async {
        let c = aws.sdk_config();
        let mut out = Vec::new();
        let iam = aws_sdk_iam::Client::new(c);
        for r in iam
            .list_roles()
            .send()
            .await
            .expect("iam:ListRoles")
            .roles()
        {
            if r.role_name().starts_with(CLUSTER) {
                out.push(format!("role {}", r.role_name()));
            }
        }
        let providers = iam
            .list_open_id_connect_providers()
            .send()
            .await
            .expect("iam:ListOpenIDConnectProviders");
        for p in providers.open_id_connect_provider_list() {
            out.push(format!("oidc {}", p.arn().unwrap_or_default()));
        }
        let eks = aws_sdk_eks::Client::new(c);
        for cl in eks
            .list_clusters()
            .send()
            .await
            .expect("eks:ListClusters")
            .clusters()
        {
            out.push(format!("cluster {cl}"));
        }
        let sqs = aws_sdk_sqs::Client::new(c);
        for q in sqs
            .list_queues()
            .send()
            .await
            .expect("sqs:ListQueues")
            .queue_urls()
        {
            out.push(format!("queue {q}"));
        }
        let events = aws_sdk_eventbridge::Client::new(c);
        for r in events
            .list_rules()
            .send()
            .await
            .expect("events:ListRules")
            .rules()
        {
            out.push(format!("rule {}", r.name().unwrap_or_default()));
        }
        out
    })
}

#[test]
fn the_quickstart_applies_and_destroys_with_only_the_deployer_policy() {
    let moto = MotoServer::start_enforced();
    let aws = Aws::new(&moto);
    network(&aws);
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: "us-east-1".into(),
        eks_addons: true,
        ..Default::default()
    })
    .expect("start kube-sim");
    let env = deployer_env(&aws, &moto);
    let policy = rendered_policy();

    // 1. Without the queue's statement: refused where the queue is made, nothing orphaned.
    let mut partial = policy.clone();
    partial["Statement"]
        .as_array_mut()
        .expect("statements")
        .retain(|s| s["Sid"] != "InterruptionQueue");
    put_policy(&aws, &partial);
    let tf = quickstart(env, sim.kubeconfig_path());
    let diag = tf.apply_fails_with("sqs:CreateQueue");
    let said = format!("{}\n{}", diag.summary, diag.detail);
    for needle in [
        "AccessDenied",
        &format!("user/{DEPLOYER} is not authorized to perform: sqs:CreateQueue"),
    ] {
        assert!(said.contains(needle), "should say {needle:?}:\n{said}");
    }
    let (_, refused) = decisions(&moto);
    assert!(
        !refused.is_empty() && refused.iter().all(|r| r.starts_with("sqs:CreateQueue on ")),
        "only the queue's creation is refused: {refused:?}"
    );
    let state = tf.state();
    let recorded: Vec<String> = state
        .addresses()
        .iter()
        .filter_map(|a| state.values(a).map(Value::to_string))
        .collect();
    for made in leftovers(&aws) {
        let name = made.rsplit(['/', ' ']).next().unwrap_or_default();
        assert!(
            recorded.iter().any(|v| v.contains(name)),
            "{made} exists but no resource in state records it"
        );
    }

    // 2. The whole policy: the apply converges, the next plan is empty, destroy leaves
    //    nothing, and none of these calls is refused.
    put_policy(&aws, &policy);
    let refused_before = decisions(&moto).1.len();
    tf.apply();
    tf.plan_is_empty();
    let destroyed = tf.terraform(&["destroy", "-auto-approve", "-no-color"]);
    assert!(destroyed.success(), "destroy failed:\n{destroyed}");
    assert_eq!(leftovers(&aws), Vec::<String>::new(), "left after destroy");
    let (calls, refused) = decisions(&moto);
    assert_eq!(
        refused.len(),
        refused_before,
        "refused with the whole policy: {:?}",
        &refused[refused_before..]
    );
    // Grants this apply and destroy did not use (updates, imports, first-cluster-in-account
    // service-linked roles), printed for review.
    let used: std::collections::BTreeSet<String> = serde_json::from_str::<Value>(
        &moto.iam_decisions(&format!("arn:aws:iam::{ACCOUNT}:user/{DEPLOYER}")),
    )
    .expect("decisions are JSON")["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["action"].as_str().map(str::to_string))
        .collect();
    let granted: std::collections::BTreeSet<String> = policy["Statement"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect(),
            _ => vec![],
        })
        .collect();
    let unused: Vec<_> = granted.difference(&used).collect();
    eprintln!(
        "granted {} actions, {} used; not used by one apply and destroy: {unused:?}",
        granted.len(),
        granted.len() - unused.len()
    );
    eprintln!(
        "deployer: {calls} calls under enforced IAM, {} refused (all in step 1, without the queue statement)",
        refused.len()
    );
    // Every call the deployer made is held in the fidelity ledger.
    let missing = joiner_test_support::calls_missing_from_ledger(used.iter().map(String::as_str));
    assert!(
        missing.is_empty(),
        "deployer calls docs/aws-fidelity.md does not name: {missing:?}"
    );
}
