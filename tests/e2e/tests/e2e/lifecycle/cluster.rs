//! `joiner_cluster` through the real Terraform CLI against the AWS emulator: create (with
//! the IRSA OIDC provider and the CoreDNS add-on warning the emulator earns), import, in-place
//! updates, the in-place version upgrade, replacement, drift, destroy, and the inputs refused
//! at plan time; the version against EKS's calendar (a warning in extended support, an
//! error past its end, EKS's default when none is given).
//!
//! Versions come from the calendar the local world serves (DescribeClusterVersions), as the
//! provider reads it, so that the tests hold whatever today is. 1.31 is the one literal: its
//! extended support ended on 2026-11-26, for good.

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

const C: &str = "joiner_cluster.c";

/// What the test creates with the SDK before Terraform runs: a role EKS may assume and two
/// pairs of subnets (the second pair for the replacement step) plus a security group.
struct Network {
    role_arn: String,
    subnets: Vec<String>,
    other_subnets: Vec<String>,
    sg: String,
}

fn network(aws: &Aws) -> Network {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let role = iam
            .create_role()
            .role_name("e2e-cluster")
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
            .expect("iam:CreateRole");
        let vpc = ec2.create_vpc().cidr_block("10.20.0.0/16").send().await.expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut ids = Vec::new();
        for (i, az) in ["us-east-1a", "us-east-1b", "us-east-1a", "us-east-1c"].iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.20.{i}.0/24"))
                .availability_zone(*az)
                .send()
                .await
                .expect("ec2:CreateSubnet");
            ids.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        let sg = ec2
            .create_security_group()
            .group_name("e2e-extra")
            .description("extra control-plane SG")
            .vpc_id(&vpc_id)
            .send()
            .await
            .expect("ec2:CreateSecurityGroup");
        Network {
            role_arn: role.role().unwrap().arn().to_string(),
            subnets: ids[..2].to_vec(),
            other_subnets: ids[2..].to_vec(),
            sg: sg.group_id().unwrap().to_string(),
        }
    })
}

fn hcl_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// EKS's version calendar as the local world serves it, newest first, unsupported versions
/// included.
fn calendar(aws: &Aws) -> Vec<aws_sdk_eks::types::ClusterVersionInformation> {
    aws.block_on(async {
        aws_sdk_eks::Client::new(aws.sdk_config())
            .describe_cluster_versions()
            .include_all(true)
            .send()
            .await
            .expect("eks:DescribeClusterVersions")
            .cluster_versions()
            .to_vec()
    })
}

/// The version EKS gives a cluster created without one.
fn default_version(aws: &Aws) -> String {
    let cal = calendar(aws);
    let default = cal
        .iter()
        .find(|v| v.default_version())
        .unwrap_or_else(|| panic!("no default version in {cal:?}"));
    default.cluster_version().unwrap().to_string()
}

/// `1.<minor + by>` of a `1.<minor>` version.
fn minor_step(version: &str, by: i32) -> String {
    let (major, minor) = version.split_once('.').unwrap();
    format!("{major}.{}", minor.parse::<i32>().unwrap() + by)
}

/// `YYYY-MM-DD` of an EKS calendar date.
fn day(d: &aws_sdk_eks::primitives::DateTime) -> String {
    d.fmt(aws_sdk_eks::primitives::DateTimeFormat::DateTime)
        .unwrap()[..10]
        .to_string()
}

fn cluster(version: &str, name: &str, role: &str, subnets: &[String], extra: &str) -> String {
    let version = if version.is_empty() {
        String::new()
    } else {
        format!("  version    = \"{version}\"\n")
    };
    format!(
        r#"resource "joiner_cluster" "c" {{
  name       = "{name}"
{version}  role_arn   = "{role}"
  subnet_ids = {subnets}
{extra}
}}
"#,
        subnets = hcl_list(subnets)
    )
}

fn describe(aws: &Aws, name: &str) -> Option<aws_sdk_eks::types::Cluster> {
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        match eks.describe_cluster().name(name).send().await {
            Ok(out) => out.cluster().cloned(),
            Err(e) => {
                let svc = e.into_service_error();
                assert!(
                    svc.is_resource_not_found_exception(),
                    "eks:DescribeCluster: {svc:?}"
                );
                None
            }
        }
    })
}

fn oidc_providers(aws: &Aws) -> Vec<String> {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let out = iam
            .list_open_id_connect_providers()
            .send()
            .await
            .expect("iam:ListOpenIDConnectProviders");
        out.open_id_connect_provider_list()
            .iter()
            .filter_map(|p| p.arn().map(str::to_string))
            .collect()
    })
}

fn cluster_names(aws: &Aws) -> Vec<String> {
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        eks.list_clusters()
            .send()
            .await
            .expect("eks:ListClusters")
            .clusters()
            .to_vec()
    })
}

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

fn strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("expected a list, got {v}"))
        .iter()
        .map(|x| s(x).to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn lifecycle_create_import_update_replace_drift_destroy() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let net = network(&aws);
    let tf = Workspace::new(&moto);
    // Created one minor version before EKS's default, and upgraded to it further down.
    let newest = default_version(&aws);
    let mut version = minor_step(&newest, -1);
    let base_extra = format!(
        r#"  security_group_ids = ["{sg}"]
  enabled_log_types  = ["api"]
  tags = {{ team = "platform" }}"#,
        sg = net.sg
    );
    tf.write_config(&cluster(
        &version,
        "groupless",
        &net.role_arn,
        &net.subnets,
        &base_extra,
    ));

    // 1. create: the cluster and its OIDC provider; CoreDNS is the kube-system Fargate
    // profile's business (it must exist first), so the cluster creates no add-on.
    assert_eq!(tf.plan().actions(C), ["create"]);
    tf.apply();
    let addons = aws.block_on(
        aws_sdk_eks::Client::new(aws.sdk_config())
            .list_addons()
            .cluster_name("groupless")
            .send(),
    );
    assert!(
        addons.expect("eks:ListAddons").addons().is_empty(),
        "the cluster must not switch CoreDNS before a Fargate profile selects it"
    );

    let st = tf.values(C);
    assert_eq!(st["id"], "groupless");
    assert_eq!(st["status"], "ACTIVE");
    assert_eq!(st["version"], version.as_str());
    assert!(s(&st["arn"]).ends_with(":cluster/groupless"));
    assert!(s(&st["endpoint"]).starts_with("https://"));
    assert!(!s(&st["certificate_authority"]).is_empty());
    assert!(!s(&st["platform_version"]).is_empty());
    let issuer = s(&st["oidc_issuer"]).to_string();
    let provider_arn = s(&st["oidc_provider_arn"]).to_string();
    assert!(
        provider_arn.ends_with(&format!(
            ":oidc-provider/{}",
            issuer.trim_start_matches("https://")
        )),
        "{provider_arn} vs {issuer}"
    );
    assert_eq!(st["tags_all"]["joiner.dev/discovery"], "groupless");
    assert_eq!(st["tags_all"]["team"], "platform");
    assert_eq!(st["endpoint_public_access"], true);
    assert_eq!(st["endpoint_private_access"], true);
    assert_eq!(strings(&st["public_access_cidrs"]), ["0.0.0.0/0"]);
    assert_eq!(st["enable_irsa"], true);
    assert!(st["coredns_on_fargate"].is_null(), "deprecated and unset");

    let remote = describe(&aws, "groupless").expect("the cluster exists");
    let vpc = remote.resources_vpc_config().unwrap();
    let mut subnets = vpc.subnet_ids().to_vec();
    subnets.sort();
    let mut want = net.subnets.clone();
    want.sort();
    assert_eq!(subnets, want);
    assert_eq!(vpc.security_group_ids(), std::slice::from_ref(&net.sg));
    assert_eq!(remote.role_arn(), Some(net.role_arn.as_str()));
    let tags = remote.tags().unwrap();
    assert_eq!(
        tags.get("joiner.dev/discovery").map(String::as_str),
        Some("groupless")
    );
    assert_eq!(oidc_providers(&aws), std::slice::from_ref(&provider_arn));

    // 2.-3. nothing to do, with and without refresh.
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // 4. import by name reproduces the state (the OIDC provider is found by issuer).
    tf.import_verify(C, "groupless", &[])
        .refresh_plan_is_empty();

    // In place: log types, endpoint access, tags.
    let updated_extra = format!(
        r#"  security_group_ids      = ["{sg}"]
  enabled_log_types       = ["api", "audit", "scheduler"]
  endpoint_public_access  = false
  tags = {{ team = "platform", env = "test" }}"#,
        sg = net.sg
    );
    tf.write_config(&cluster(
        &version,
        "groupless",
        &net.role_arn,
        &net.subnets,
        &updated_extra,
    ));
    let plan = tf.plan();
    assert_eq!(plan.actions(C), ["update"]);
    tf.apply();
    let st = tf.values(C);
    assert_eq!(
        strings(&st["enabled_log_types"]),
        ["api", "audit", "scheduler"]
    );
    assert_eq!(
        st["arn"],
        "arn:aws:eks:us-east-1:123456789012:cluster/groupless"
    );
    let remote = describe(&aws, "groupless").unwrap();
    assert!(!remote
        .resources_vpc_config()
        .unwrap()
        .endpoint_public_access());
    let enabled: Vec<String> = remote
        .logging()
        .unwrap()
        .cluster_logging()
        .iter()
        .filter(|l| l.enabled() == Some(true))
        .flat_map(|l| l.types().iter().map(|t| t.as_str().to_string()))
        .collect();
    assert_eq!(enabled, ["api", "audit", "scheduler"]);
    assert_eq!(
        remote.tags().unwrap().get("env").map(String::as_str),
        Some("test")
    );
    tf.refresh_plan_is_empty();

    // The version upgrade is planned in place, not as a replacement...
    tf.write_config(&cluster(
        &newest,
        "groupless",
        &net.role_arn,
        &net.subnets,
        &updated_extra,
    ));
    let plan = tf.plan();
    assert_eq!(
        plan.actions(C),
        ["update"],
        "a version change upgrades in place"
    );
    // ...and sent as eks:UpdateClusterVersion, followed to the end (DescribeUpdate).
    tf.apply();
    version = newest.clone();
    assert_eq!(tf.attr(C, "version"), version.as_str());
    let remote = describe(&aws, "groupless").unwrap();
    assert_eq!(remote.version(), Some(version.as_str()));
    tf.refresh_plan_is_empty();
    // Skipping a minor version or going back is refused at plan time.
    tf.write_config(&cluster(
        &minor_step(&version, 2),
        "groupless",
        &net.role_arn,
        &net.subnets,
        &updated_extra,
    ));
    tf.plan_fails_with("version", "one minor version at a time");
    tf.write_config(&cluster(
        &minor_step(&version, -1),
        "groupless",
        &net.role_arn,
        &net.subnets,
        &updated_extra,
    ));
    tf.plan_fails_with("version", "cannot downgrade");

    // IRSA off and on again, in place.
    let no_irsa = format!("{updated_extra}\n  enable_irsa = false");
    tf.write_config(&cluster(
        &version,
        "groupless",
        &net.role_arn,
        &net.subnets,
        &no_irsa,
    ));
    assert_eq!(tf.plan().actions(C), ["update"]);
    tf.apply();
    assert!(
        oidc_providers(&aws).is_empty(),
        "turning IRSA off deletes the OIDC provider"
    );
    assert!(tf.attr(C, "oidc_provider_arn").is_null());
    tf.write_config(&cluster(
        &version,
        "groupless",
        &net.role_arn,
        &net.subnets,
        &updated_extra,
    ));
    tf.apply();
    assert_eq!(oidc_providers(&aws).len(), 1);
    tf.plan_is_empty();

    // The OIDC provider deleted out of band is recreated in place.
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let arn = s(&tf.attr(C, "oidc_provider_arn")).to_string();
        iam.delete_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
            .unwrap();
    });
    assert_eq!(tf.plan().actions(C), ["update"]);
    tf.apply();
    assert_eq!(oidc_providers(&aws).len(), 1);

    // Replace: subnets cannot change in place, and the plan says which attribute forces it.
    tf.write_config(&cluster(
        &version,
        "groupless",
        &net.role_arn,
        &net.other_subnets,
        &updated_extra,
    ));
    let plan = tf.plan();
    assert!(plan.replaces(C), "{:?}", plan.actions(C));
    assert_eq!(plan.replace_paths(C), [serde_json::json!(["subnet_ids"])]);
    tf.apply();
    let remote = describe(&aws, "groupless").unwrap();
    let mut subnets = remote.resources_vpc_config().unwrap().subnet_ids().to_vec();
    subnets.sort();
    let mut want = net.other_subnets.clone();
    want.sort();
    assert_eq!(subnets, want);
    assert_eq!(
        oidc_providers(&aws).len(),
        1,
        "the old provider went with the old cluster"
    );
    tf.refresh_plan_is_empty();

    // Drift: deleted behind Terraform's back, the next plan creates it again.
    aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        eks.delete_cluster().name("groupless").send().await.unwrap();
    });
    assert_eq!(tf.plan().actions(C), ["create"]);
    tf.apply();
    assert!(describe(&aws, "groupless").is_some());
    tf.plan_is_empty();

    // Destroy leaves nothing: no cluster, no OIDC provider.
    tf.destroy();
    assert!(cluster_names(&aws).is_empty(), "{:?}", cluster_names(&aws));
    assert!(
        oidc_providers(&aws).is_empty(),
        "{:?}",
        oidc_providers(&aws)
    );
}

#[test]
fn bad_inputs_are_refused_at_plan_time_with_their_attribute() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let role = "arn:aws:iam::123456789012:role/eks";
    let subnets = vec!["subnet-0123abcd".to_string(), "subnet-4567cdef".to_string()];
    // Refused by the attribute checks, before any plan: the version is only a placeholder.
    let v = "1.35";
    let ok = |extra: &str| cluster(v, "ok", role, &subnets, extra);
    let cases: Vec<(String, &str, &str)> = vec![
        (
            cluster(v, "-starts-with-dash", role, &subnets, ""),
            "name",
            "must start with a letter or a digit",
        ),
        (
            cluster(v, &"n".repeat(101), role, &subnets, ""),
            "name",
            "1 to 100 characters",
        ),
        (
            cluster(v, "dots.are.bad", role, &subnets, ""),
            "name",
            "letters, digits",
        ),
        (
            ok("").replace("\"1.35\"", "\"v1.35\""),
            "version",
            "like \"1.35\"",
        ),
        (
            ok("").replace("\"1.35\"", "\"1.35.2\""),
            "version",
            "no patch level",
        ),
        (
            cluster(v, "ok", "arn:aws:iam::123456789012:user/eks", &subnets, ""),
            "role_arn",
            "IAM role ARN",
        ),
        (
            cluster(v, "ok", "eks-role", &subnets, ""),
            "role_arn",
            "IAM role ARN",
        ),
        (
            cluster(v, "ok", role, &subnets[..1], ""),
            "subnet_ids",
            "at least 2",
        ),
        (
            cluster(
                v,
                "ok",
                role,
                &["subnet-0123abcd".into(), "vpc-0123abcd".into()],
                "",
            ),
            "subnet_ids",
            "\"vpc-0123abcd\" is not a valid ID",
        ),
        (
            ok(r#"  security_group_ids = ["sg-xyz"]"#),
            "security_group_ids",
            "sg- followed by",
        ),
        (
            ok(r#"  public_access_cidrs = ["10.0.0.1/8"]"#),
            "public_access_cidrs",
            "did you mean 10.0.0.0/8",
        ),
        (
            ok(r#"  public_access_cidrs = ["10.0.0.0/33"]"#),
            "public_access_cidrs",
            "prefix length",
        ),
        (
            ok(r#"  kms_key_arn = "arn:aws:kms:us-east-1:123456789012:secret/x""#),
            "kms_key_arn",
            "KMS key or alias ARN",
        ),
        (
            ok(r#"  enabled_log_types = ["api", "kubelet"]"#),
            "enabled_log_types",
            "\"kubelet\" is not a control-plane log type",
        ),
        (
            ok("  endpoint_public_access  = false\n  endpoint_private_access = false"),
            "endpoint_private_access",
            "cannot both be false",
        ),
        (
            ok("  endpoint_public_access = false\n  public_access_cidrs    = [\"10.0.0.0/8\"]"),
            "public_access_cidrs",
            "only applies when endpoint_public_access = true",
        ),
        (
            ok(r#"  tags = { "aws:reserved" = "x" }"#),
            "tags",
            "reserved",
        ),
        (
            ok("  timeouts {\n    create = \"ten minutes\"\n  }"),
            "create",
            "not a duration",
        ),
    ];
    for (config, attribute, message) in cases {
        tf.write_config(&config);
        tf.plan_fails_with(attribute, message);
    }
}

/// The plan reads EKS's calendar: a version in extended support is planned and applied with
/// a warning on `version` that says it costs more and until when EKS supports it; a version
/// past its end of extended support, or one EKS never had, fails the plan on `version`,
/// naming it and the versions EKS offers now. Before the check, the plan went through and
/// CreateCluster failed ten minutes into the apply (on AWS; the local world took anything).
#[test]
fn a_version_in_extended_support_warns_and_one_past_its_end_is_refused() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let net = network(&aws);
    let tf = Workspace::new(&moto);
    let cal = calendar(&aws);
    let extended = cal
        .iter()
        .find(|v| v.version_status() == Some(&aws_sdk_eks::types::VersionStatus::ExtendedSupport))
        .unwrap_or_else(|| panic!("no version in extended support today: {cal:?}"));
    let ext = extended.cluster_version().unwrap().to_string();
    let until = day(extended.end_of_extended_support_date().unwrap());
    let newest = default_version(&aws);

    tf.write_config(&cluster(&ext, "extended", &net.role_arn, &net.subnets, ""));
    let warnings = tf.plan_warnings(&[]);
    let w = warnings
        .iter()
        .find(|w| w.mentions("extended support"))
        .unwrap_or_else(|| panic!("no extended-support warning in {warnings:?}"));
    assert_eq!(w.attribute().as_deref(), Some("version"), "{w}");
    assert!(
        w.mentions(&format!("Kubernetes {ext} is in EKS extended support")),
        "{w}"
    );
    assert!(w.mentions("additional cost per cluster hour"), "{w}");
    assert!(w.mentions(&format!("until {until}")), "{w}");
    assert!(w.mentions(&format!("{newest} (EKS's default)")), "{w}");
    // EKS still creates it: the apply goes through, and says it again.
    let applied = tf.apply();
    assert!(
        applied.output().contains("extended support"),
        "{}",
        applied.output()
    );
    assert_eq!(tf.attr(C, "version"), ext.as_str());
    tf.destroy();

    // Past its end of extended support: the plan fails on `version`.
    tf.write_config(&cluster("1.31", "ended", &net.role_arn, &net.subnets, ""));
    let e = tf.plan_fails_with("version", "Kubernetes 1.31 is no longer supported by EKS");
    assert!(e.mentions("ended on 2026-11-26"), "{e}");
    assert!(e.mentions(&format!("{newest} (EKS's default)")), "{e}");
    assert!(e.mentions(&format!("{ext} (until {until})")), "{e}");
    assert!(e.mentions("leave version unset"), "{e}");
    // Not on the calendar at all.
    tf.write_config(&cluster("1.99", "unknown", &net.role_arn, &net.subnets, ""));
    let e = tf.plan_fails_with("version", "EKS does not offer Kubernetes 1.99");
    assert!(e.mentions(&format!("{newest} (EKS's default)")), "{e}");
    assert!(cluster_names(&aws).is_empty(), "{:?}", cluster_names(&aws));
}

/// `version` left out is EKS's choice: unknown in the plan, EKS's default version once
/// created, read back into state, and no change proposed afterwards. The default must be in
/// standard support today, or the local world's calendar is out of date.
#[test]
fn an_omitted_version_is_eks_default() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let net = network(&aws);
    let tf = Workspace::new(&moto);
    let cal = calendar(&aws);
    let default = cal
        .iter()
        .find(|v| v.default_version())
        .unwrap_or_else(|| panic!("no default version in {cal:?}"));
    assert_eq!(
        default.version_status(),
        Some(&aws_sdk_eks::types::VersionStatus::StandardSupport),
        "EKS's default is always in standard support: the calendar in \
         tests/aws-local/joiner_local/eks_versions.py needs the versions EKS released since"
    );
    let newest = default.cluster_version().unwrap();

    tf.write_config(&cluster("", "default", &net.role_arn, &net.subnets, ""));
    let plan = tf.plan();
    assert_eq!(plan.actions(C), ["create"]);
    assert!(
        plan.after(C)
            .unwrap()
            .get("version")
            .is_none_or(Value::is_null),
        "the version is EKS's to choose: unknown until applied"
    );
    let warnings = tf.plan_warnings(&[]);
    assert!(
        warnings
            .iter()
            .all(|w| w.attribute().as_deref() != Some("version")),
        "no version, nothing to warn about: {warnings:?}"
    );
    tf.apply();
    assert_eq!(tf.attr(C, "version"), newest);
    assert_eq!(describe(&aws, "default").unwrap().version(), Some(newest));
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
    tf.destroy();
}
