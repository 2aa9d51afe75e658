//! `joiner_fargate_profile` through the real Terraform CLI against the AWS emulator: the
//! kube-system and agent profiles a groupless cluster needs, created together; import by
//! `cluster:profile`; replacement (EKS cannot change a profile in place); drift; destroy;
//! and the inputs refused at plan time.

use crate::common;

use common::{eks_with_fargate_role, EksFixture};
use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::json;

const SYSTEM: &str = "joiner_fargate_profile.system";
const AGENT: &str = "joiner_fargate_profile.agent";

fn profiles(f: &EksFixture, agent_labels: &str, extra: &str) -> String {
    let subnets = format!(
        "[{}]",
        f.subnets
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    format!(
        r#"resource "joiner_fargate_profile" "system" {{
  cluster_name           = "fg"
  name                   = "kube-system"
  pod_execution_role_arn = "{role}"
  subnet_ids             = {subnets}
  selector {{
    namespace = "kube-system"
  }}
{extra}
}}

resource "joiner_fargate_profile" "agent" {{
  cluster_name           = "fg"
  name                   = "joiner"
  pod_execution_role_arn = "{role}"
  subnet_ids             = {subnets}
  selector {{
    namespace = "joiner"
    labels    = {agent_labels}
  }}
}}
"#,
        role = f.role_arn
    )
}

fn remote_profiles(aws: &Aws) -> Vec<String> {
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let mut names = eks
            .list_fargate_profiles()
            .cluster_name("fg")
            .send()
            .await
            .expect("eks:ListFargateProfiles")
            .fargate_profile_names()
            .to_vec();
        names.sort();
        names
    })
}

fn describe(aws: &Aws, name: &str) -> aws_sdk_eks::types::FargateProfile {
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        eks.describe_fargate_profile()
            .cluster_name("fg")
            .fargate_profile_name(name)
            .send()
            .await
            .expect("eks:DescribeFargateProfile")
            .fargate_profile()
            .cloned()
            .unwrap()
    })
}

#[test]
fn lifecycle_create_import_replace_drift_destroy() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let f = eks_with_fargate_role(&aws, "fg", "e2e-fargate", 30);
    let tf = Workspace::new(&moto);
    let labels = r#"{ "app.kubernetes.io/name" = "joiner-agent" }"#;
    let system_extra = "  tags = { team = \"platform\" }\n  coredns_on_fargate = true";
    tf.write_config(&profiles(&f, labels, system_extra));

    // Both at once, as Terraform does; both ACTIVE.
    let plan = tf.plan();
    assert_eq!(plan.actions(SYSTEM), ["create"]);
    assert_eq!(plan.actions(AGENT), ["create"]);
    tf.apply();
    assert_eq!(remote_profiles(&aws), ["joiner", "kube-system"]);
    // The kube-system profile switched CoreDNS to Fargate, once it existed.
    let eks = aws_sdk_eks::Client::new(aws.sdk_config());
    let coredns = |aws: &Aws| {
        aws.block_on(
            eks.describe_addon()
                .cluster_name("fg")
                .addon_name("coredns")
                .send(),
        )
        .ok()
        .and_then(|o| o.addon)
    };
    let addon = coredns(&aws).expect("the coredns add-on");
    assert_eq!(
        addon.configuration_values(),
        Some(r#"{"computeType":"Fargate"}"#)
    );
    assert!(
        addon.created_at().unwrap().secs()
            >= describe(&aws, "kube-system").created_at().unwrap().secs(),
        "the add-on was switched before the profile existed"
    );
    assert_eq!(tf.values(SYSTEM)["coredns_on_fargate"], true);
    let st = tf.values(AGENT);
    assert_eq!(st["id"], "fg:joiner");
    assert_eq!(st["status"], "ACTIVE");
    assert!(st["arn"]
        .as_str()
        .unwrap()
        .contains(":fargateprofile/fg/joiner/"));
    assert_eq!(
        st["selector"],
        json!([{ "namespace": "joiner", "labels": { "app.kubernetes.io/name": "joiner-agent" } }])
    );
    let remote = describe(&aws, "joiner");
    assert_eq!(remote.pod_execution_role_arn(), Some(f.role_arn.as_str()));
    let mut subnets = remote.subnets().to_vec();
    subnets.sort();
    assert_eq!(subnets, f.subnets);
    let sel = &remote.selectors()[0];
    assert_eq!(sel.namespace(), Some("joiner"));
    assert_eq!(
        sel.labels()
            .unwrap()
            .get("app.kubernetes.io/name")
            .map(String::as_str),
        Some("joiner-agent")
    );
    assert_eq!(
        describe(&aws, "kube-system")
            .tags()
            .unwrap()
            .get("team")
            .map(String::as_str),
        Some("platform")
    );

    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // Import by `cluster:profile` (the timeouts block is configuration, not remote state).
    let fresh = tf.import_verify(SYSTEM, "fg:kube-system", &[]);
    fresh.import(AGENT, "fg:joiner");
    fresh.refresh_plan_is_empty();
    tf.import_verify(AGENT, "fg:joiner", &[]);

    // A tag change is the one in-place update EKS allows: the plan says update, not replace.
    // (The emulator's TagResource only knows clusters, so this plan is not applied here; the
    // same tag sync is applied to a cluster in tests/cluster.rs.)
    tf.write_config(&profiles(
        &f,
        labels,
        "  tags = { team = \"platform\", env = \"test\" }\n  coredns_on_fargate = true",
    ));
    assert_eq!(tf.plan().actions(SYSTEM), ["update"]);

    // Selectors cannot change in place: replacement, and the plan names the selector.
    let new_labels = r#"{ "app.kubernetes.io/name" = "joiner-agent", tier = "system" }"#;
    tf.write_config(&profiles(&f, new_labels, system_extra));
    let plan = tf.plan();
    assert!(plan.replaces(AGENT), "{:?}", plan.actions(AGENT));
    assert_eq!(plan.replace_paths(AGENT), [json!(["selector"])]);
    assert_eq!(plan.actions(SYSTEM), ["no-op"]);
    tf.apply();
    let sel = describe(&aws, "joiner").selectors()[0].clone();
    assert_eq!(
        sel.labels().unwrap().get("tier").map(String::as_str),
        Some("system")
    );
    tf.refresh_plan_is_empty();

    // Drift of the add-on: removed out of band, the refresh shows it and the apply puts it back.
    aws.block_on(
        eks.delete_addon()
            .cluster_name("fg")
            .addon_name("coredns")
            .preserve(true)
            .send(),
    )
    .expect("eks:DeleteAddon");
    assert_eq!(tf.plan().actions(SYSTEM), ["update"]);
    tf.apply();
    assert!(coredns(&aws).is_some(), "the add-on is back");
    tf.refresh_plan_is_empty();

    // Drift: deleted out of band, recreated by the next apply.
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        eks.delete_fargate_profile()
            .cluster_name("fg")
            .fargate_profile_name("kube-system")
            .send()
            .await
            .unwrap();
    });
    assert_eq!(tf.plan().actions(SYSTEM), ["create"]);
    tf.apply();
    assert_eq!(remote_profiles(&aws), ["joiner", "kube-system"]);

    tf.destroy();
    assert!(
        coredns(&aws).is_none(),
        "destroying the profile stops managing CoreDNS (preserve: its pods keep running)"
    );
    assert!(
        remote_profiles(&aws).is_empty(),
        "{:?}",
        remote_profiles(&aws)
    );
}

#[test]
fn bad_inputs_are_refused_at_plan_time_with_their_attribute() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let profile = |body: &str| {
        format!(
            r#"resource "joiner_fargate_profile" "p" {{
{body}
}}
"#
        )
    };
    let good = [
        ("cluster_name", r#""fg""#),
        ("name", r#""kube-system""#),
        (
            "pod_execution_role_arn",
            r#""arn:aws:iam::123456789012:role/fargate""#,
        ),
        ("subnet_ids", r#"["subnet-0123abcd"]"#),
    ];
    let with = |attr: &str, value: &str, selector: &str| {
        let mut lines: Vec<String> = good
            .iter()
            .map(|(k, v)| format!("  {k} = {}", if *k == attr { value } else { v }))
            .collect();
        lines.push(selector.to_string());
        profile(&lines.join("\n"))
    };
    let ns = "  selector {\n    namespace = \"kube-system\"\n  }";
    let cases: Vec<(String, &str, &str)> = vec![
        (with("cluster_name", r#""bad name""#, ns), "cluster_name", "letters, digits"),
        (with("name", r#""-x""#, ns), "name", "must start with a letter or a digit"),
        (with("pod_execution_role_arn", r#""arn:aws:iam::123456789012:policy/x""#, ns), "pod_execution_role_arn", "IAM role ARN"),
        (with("subnet_ids", r#"["sg-0123abcd"]"#, ns), "subnet_ids", "subnet- followed by"),
        (with("subnet_ids", "[]", ns), "subnet_ids", "at least 1"),
        (with("name", r#""ok""#, "  selector {\n    namespace = \"Kube_System\"\n  }"), "namespace", "Kubernetes namespace name"),
        (
            with(
                "name",
                r#""ok""#,
                "  selector {\n    namespace = \"a\"\n    labels = { a = \"1\", b = \"2\", c = \"3\", d = \"4\", e = \"5\", f = \"6\" }\n  }",
            ),
            "labels",
            "at most 5 labels",
        ),
        (
            with(
                "name",
                r#""ok""#,
                "  coredns_on_fargate = true\n  selector {\n    namespace = \"joiner\"\n  }",
            ),
            "coredns_on_fargate",
            "does not select CoreDNS",
        ),
    ];
    for (config, attribute, message) in cases {
        tf.write_config(&config);
        tf.plan_fails_with(attribute, message);
    }
    // No selector at all: Terraform itself enforces the block's minimum.
    tf.write_config(&profile(
        &good
            .iter()
            .map(|(k, v)| format!("  {k} = {v}"))
            .collect::<Vec<_>>()
            .join("\n"),
    ));
    let r = tf.terraform(&["plan", "-no-color", "-input=false"]);
    assert!(!r.success());
    assert!(r.output().contains("selector"), "{r}");
}
