//! The four IAM role resources through the real Terraform CLI against the AWS emulator:
//! create, in-place update, replace, import by role name, drift (deleted out of band →
//! re-created; a policy detached out of band → re-attached), destroy leaving nothing, and
//! the inputs refused at plan time with their attribute path.

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

const ACCOUNT: &str = "123456789012";

fn iam(aws: &Aws) -> aws_sdk_iam::Client {
    aws.block_on(async { aws_sdk_iam::Client::new(aws.sdk_config()) })
}

fn role_exists(aws: &Aws, name: &str) -> bool {
    let c = iam(aws);
    match aws.block_on(c.get_role().role_name(name).send()) {
        Ok(_) => true,
        Err(e) => {
            let svc = e.into_service_error();
            assert!(
                svc.is_no_such_entity_exception(),
                "iam:GetRole {name}: {svc:?}"
            );
            false
        }
    }
}

fn attached(aws: &Aws, name: &str) -> Vec<String> {
    let c = iam(aws);
    let out = aws
        .block_on(c.list_attached_role_policies().role_name(name).send())
        .expect("iam:ListAttachedRolePolicies");
    let mut v: Vec<String> = out
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_name().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn all_roles(aws: &Aws) -> Vec<String> {
    let c = iam(aws);
    let out = aws.block_on(c.list_roles().send()).expect("iam:ListRoles");
    out.roles()
        .iter()
        .map(|r| r.role_name().to_string())
        .collect()
}

fn all_instance_profiles(aws: &Aws) -> Vec<String> {
    let c = iam(aws);
    let out = aws
        .block_on(c.list_instance_profiles().send())
        .expect("iam:ListInstanceProfiles");
    out.instance_profiles()
        .iter()
        .map(|p| p.instance_profile_name().to_string())
        .collect()
}

fn json(v: &Value) -> Value {
    serde_json::from_str(v.as_str().unwrap_or_else(|| panic!("not a string: {v}")))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {v}"))
}

const OIDC_ISSUER: &str =
    "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE";

fn roles_config(extra_tag: &str, description: &str) -> String {
    format!(
        r#"
resource "joiner_cluster_role" "cluster" {{
  name        = "prod-cluster"
  description = "{description}"
  tags        = {{ team = "platform"{extra_tag} }}
}}

resource "joiner_node_role" "node" {{
  name = "prod-node"
}}

resource "joiner_fargate_role" "fargate" {{
  name         = "prod-fargate"
  cluster_name = "prod"
}}

resource "joiner_agent_role" "agent" {{
  name              = "prod-agent"
  cluster_name      = "prod"
  oidc_provider_arn = "arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
  oidc_issuer_url   = "{OIDC_ISSUER}"
  node_role_arn     = joiner_node_role.node.arn
  queue_arn         = "arn:aws:sqs:us-east-1:{ACCOUNT}:prod-interruptions"
}}
"#
    )
}

#[test]
fn four_roles_lifecycle() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let tf = Workspace::new(&moto);
    tf.write_config(&roles_config("", "joiner: EKS control plane"));

    // The agent's policy is visible in the plan before anything exists, as JSON.
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_agent_role.agent"), ["create"]);
    let planned = plan
        .after("joiner_agent_role.agent")
        .expect("planned agent role");
    // node_role_arn is unknown until the node role exists, so the policy is too; the trust
    // (which depends only on known inputs) is already rendered.
    let trust = json(&planned["assume_role_policy"]);
    assert_eq!(
        trust["Statement"][0]["Condition"]["StringEquals"]
            ["oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE:sub"],
        "system:serviceaccount:joiner:joiner-agent"
    );
    let cluster_plan = plan.after("joiner_cluster_role.cluster").unwrap();
    assert_eq!(
        json(&cluster_plan["assume_role_policy"])["Statement"][0]["Principal"]["Service"],
        "eks.amazonaws.com"
    );

    tf.apply();
    let cluster = tf.values("joiner_cluster_role.cluster");
    assert_eq!(
        cluster["arn"],
        format!("arn:aws:iam::{ACCOUNT}:role/prod-cluster")
    );
    assert_eq!(attached(&aws, "prod-cluster"), ["AmazonEKSClusterPolicy"]);
    assert_eq!(
        attached(&aws, "prod-node"),
        [
            "AmazonEC2ContainerRegistryPullOnly",
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonSSMManagedInstanceCore"
        ]
    );
    assert_eq!(
        attached(&aws, "prod-fargate"),
        ["AmazonEKSFargatePodExecutionRolePolicy"]
    );
    let node = tf.values("joiner_node_role.node");
    assert_eq!(node["instance_profile_name"], "prod-node");
    assert_eq!(
        node["instance_profile_arn"],
        format!("arn:aws:iam::{ACCOUNT}:instance-profile/prod-node")
    );
    let fargate = tf.values("joiner_fargate_role.fargate");
    assert_eq!(
        json(&fargate["assume_role_policy"])["Statement"][0]["Condition"]["ArnLike"]
            ["aws:SourceArn"],
        format!("arn:aws:eks:us-east-1:{ACCOUNT}:fargateprofile/prod/*")
    );
    let agent = tf.values("joiner_agent_role.agent");
    let policy = json(&agent["policy"]);
    let pass = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == "PassNodeRole")
        .unwrap();
    assert_eq!(pass["Resource"], node["arn"]);
    // The inline policy IAM stores is the one in state.
    let stored = aws
        .block_on(
            iam(&aws)
                .get_role_policy()
                .role_name("prod-agent")
                .policy_name("joiner-agent")
                .send(),
        )
        .expect("iam:GetRolePolicy");
    let stored = stored.policy_document();
    let stored = if stored.starts_with('{') {
        stored.to_string()
    } else {
        decode(stored)
    };
    assert_eq!(serde_json::from_str::<Value>(&stored).unwrap(), policy);

    // 2-3. Nothing to do, with or without refresh.
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // 4. Import by role name reproduces each state, inputs recovered from the documents.
    for (addr, name) in [
        ("joiner_cluster_role.cluster", "prod-cluster"),
        ("joiner_node_role.node", "prod-node"),
        ("joiner_fargate_role.fargate", "prod-fargate"),
        ("joiner_agent_role.agent", "prod-agent"),
    ] {
        tf.import_verify(addr, name, &["timeouts"]);
    }

    // In-place update: description and tags.
    tf.write_config(&roles_config(r#", env = "prod""#, "control plane of prod"));
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_cluster_role.cluster"), ["update"]);
    tf.apply();
    let got = aws
        .block_on(iam(&aws).get_role().role_name("prod-cluster").send())
        .unwrap();
    assert_eq!(
        got.role().unwrap().description(),
        Some("control plane of prod")
    );
    assert_eq!(
        tf.attr("joiner_cluster_role.cluster", "tags")["env"],
        "prod"
    );
    tf.plan_is_empty();

    // In-place update of a derived document: the Fargate trust follows cluster_name.
    tf.write_config(
        &roles_config(r#", env = "prod""#, "control plane of prod")
            .replace("cluster_name = \"prod\"\n}", "cluster_name = \"prod2\"\n}"),
    );
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_fargate_role.fargate"), ["update"]);
    tf.apply();
    assert!(tf
        .attr("joiner_fargate_role.fargate", "assume_role_policy")
        .as_str()
        .unwrap()
        .contains("fargateprofile/prod2/*"));
    tf.refresh_plan_is_empty();

    // Drift: a managed policy detached out of band is re-attached in place.
    aws.block_on(
        iam(&aws)
            .detach_role_policy()
            .role_name("prod-cluster")
            .policy_arn("arn:aws:iam::aws:policy/AmazonEKSClusterPolicy")
            .send(),
    )
    .unwrap();
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_cluster_role.cluster"), ["update"]);
    tf.apply();
    assert_eq!(attached(&aws, "prod-cluster"), ["AmazonEKSClusterPolicy"]);

    // Drift: the node role deleted out of band (with its profile) → re-created.
    let c = iam(&aws);
    aws.block_on(async {
        c.remove_role_from_instance_profile()
            .instance_profile_name("prod-node")
            .role_name("prod-node")
            .send()
            .await
            .unwrap();
        c.delete_instance_profile()
            .instance_profile_name("prod-node")
            .send()
            .await
            .unwrap();
        for p in [
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonEC2ContainerRegistryPullOnly",
            "AmazonSSMManagedInstanceCore",
        ] {
            c.detach_role_policy()
                .role_name("prod-node")
                .policy_arn(format!("arn:aws:iam::aws:policy/{p}"))
                .send()
                .await
                .unwrap();
        }
        c.delete_role().role_name("prod-node").send().await.unwrap();
    });
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_node_role.node"), ["create"]);
    tf.apply();
    assert!(role_exists(&aws, "prod-node"));
    assert!(all_instance_profiles(&aws).contains(&"prod-node".to_string()));
    tf.refresh_plan_is_empty();

    // Replace: a new name is a new role; the old one is gone.
    tf.write_config(
        &roles_config(r#", env = "prod""#, "control plane of prod")
            .replace("cluster_name = \"prod\"\n}", "cluster_name = \"prod2\"\n}")
            .replace("\"prod-cluster\"", "\"prod-cluster-v2\""),
    );
    let plan = tf.plan();
    assert!(plan.replaces("joiner_cluster_role.cluster"));
    tf.apply();
    assert!(role_exists(&aws, "prod-cluster-v2"));
    assert!(!role_exists(&aws, "prod-cluster"));

    // 5. Destroy leaves no role and no instance profile behind.
    tf.destroy();
    assert_eq!(all_roles(&aws), Vec::<String>::new());
    assert_eq!(all_instance_profiles(&aws), Vec::<String>::new());
}

#[test]
fn pod_identity_trust_and_policy_size() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let long_cluster = "c".repeat(100);
    tf.write_config(&format!(
        r#"
resource "joiner_agent_role" "agent" {{
  name          = "agent-pod-identity"
  cluster_name  = "{long_cluster}"
  trust         = "pod_identity"
  node_role_arn = "arn:aws:iam::{ACCOUNT}:role/{node}"
  queue_arn     = "arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}"
}}
"#,
        node = "n".repeat(64),
        queue = "q".repeat(80),
    ));
    tf.apply();
    let agent = tf.values("joiner_agent_role.agent");
    let trust = json(&agent["assume_role_policy"]);
    assert_eq!(
        trust["Statement"][0]["Principal"]["Service"],
        "pods.eks.amazonaws.com"
    );
    assert_eq!(
        trust["Statement"][0]["Action"],
        serde_json::json!(["sts:AssumeRole", "sts:TagSession"])
    );
    let size = agent["policy"]
        .as_str()
        .unwrap()
        .chars()
        .filter(|c| !c.is_whitespace())
        .count();
    assert!(size < 6144, "agent policy is {size} characters");
    tf.refresh_plan_is_empty();
    tf.destroy();
}

#[test]
fn bad_inputs_are_refused_at_plan_time() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let agent = |attr_line: &str| {
        format!(
            r#"
resource "joiner_agent_role" "a" {{
  name              = "agent"
  cluster_name      = "prod"
  oidc_provider_arn = "arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/X"
  oidc_issuer_url   = "https://oidc.eks.us-east-1.amazonaws.com/id/X"
  node_role_arn     = "arn:aws:iam::{ACCOUNT}:role/nodes"
  queue_arn         = "arn:aws:sqs:us-east-1:{ACCOUNT}:q"
  {attr_line}
}}
"#
        )
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (
            "resource \"joiner_cluster_role\" \"c\" {\n  name = \"has space\"\n}\n".into(),
            "name",
            "may contain only letters, digits and +=,.@_-",
        ),
        (
            format!(
                "resource \"joiner_cluster_role\" \"c\" {{\n  name = \"{}\"\n}}\n",
                "r".repeat(65)
            ),
            "name",
            "must be 1 to 64 characters",
        ),
        (
            r#"resource "joiner_node_role" "n" {
  name = "n"
  path = "nodes"
}"#
            .into(),
            "path",
            "must start and end with \"/\"",
        ),
        (
            r#"resource "joiner_fargate_role" "f" {
  name         = "f"
  cluster_name = "-bad"
}"#
            .into(),
            "cluster_name",
            "must start with a letter or a digit",
        ),
        (
            r#"resource "joiner_cluster_role" "c" {
  name                   = "c"
  additional_policy_arns = ["arn:aws:s3:::bucket"]
}"#
            .into(),
            "additional_policy_arns",
            "expected a iam ARN",
        ),
        (
            r#"resource "joiner_cluster_role" "c" {
  name = "c"
  tags = { "aws:reserved" = "x" }
}"#
            .into(),
            "tags",
            "the aws: prefix is reserved",
        ),
        (
            agent(r#"namespace = "Joiner""#).replace("  \n", ""),
            "namespace",
            "must be a DNS label",
        ),
        (
            agent(r#"trust = "kiam""#),
            "trust",
            "must be one of irsa, pod_identity",
        ),
        (
            agent("").replace(
                &format!("arn:aws:iam::{ACCOUNT}:role/nodes"),
                &format!("arn:aws:iam::{ACCOUNT}:user/nodes"),
            ),
            "node_role_arn",
            "expected a resource of the form role/<name>",
        ),
        (
            agent("").replace(&format!("arn:aws:sqs:us-east-1:{ACCOUNT}:q"), "my-queue"),
            "queue_arn",
            "is not an ARN",
        ),
        (
            agent("").replace("https://oidc.eks", "http://oidc.eks"),
            "oidc_issuer_url",
            "starting with https://",
        ),
    ];
    for (config, attribute, message) in cases {
        tf.write_config(&config);
        tf.plan_fails_with(attribute, message);
    }

    // A missing attribute has no source line to point at; the error still names it.
    tf.write_config(
        &agent("")
            .lines()
            .filter(|l| !l.contains("oidc_issuer_url"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let r = tf.terraform(&["plan", "-no-color", "-input=false"]);
    assert!(!r.success(), "plan without oidc_issuer_url must fail:\n{r}");
    assert!(
        r.output()
            .contains("oidc_issuer_url is required when trust = \"irsa\""),
        "{r}"
    );
}

/// IAM returns policy documents URL-encoded.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}
