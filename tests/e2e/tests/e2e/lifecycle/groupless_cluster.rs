//! The groupless cluster end to end: `examples/groupless-cluster`, unchanged, applied in one
//! `terraform apply` against the AWS emulator over a VPC this test creates; then
//! 1. an `EC2 Spot Instance Interruption Warning` put on the default event bus arrives in the
//!    interruption queue;
//! 2. the next plan is empty;
//! 3. `terraform destroy` leaves the account as it found it.
//!
//! The provider runs under `/usr/bin/time` (when present) so the test also prints the
//! apply's wall time, the provider's CPU time and its peak RSS. Figures only, no thresholds:
//! timings belong in benchmarks, not in pass/fail.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use joiner_e2e::{Aws, MotoServer, Workspace};

const EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/groupless-cluster/main.tf"
));
const CLUSTER: &str = "groupless";

/// Everything the example creates, listed so "as it found it" can be checked.
#[derive(Debug, PartialEq, Eq)]
struct Account {
    roles: BTreeSet<String>,
    instance_profiles: BTreeSet<String>,
    oidc_providers: BTreeSet<String>,
    clusters: BTreeSet<String>,
    queues: BTreeSet<String>,
    rules: BTreeSet<String>,
}

fn snapshot(aws: &Aws) -> Account {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let sqs = aws_sdk_sqs::Client::new(aws.sdk_config());
        let events = aws_sdk_eventbridge::Client::new(aws.sdk_config());
        let roles = iam.list_roles().send().await.expect("iam:ListRoles");
        let profiles = iam
            .list_instance_profiles()
            .send()
            .await
            .expect("iam:ListInstanceProfiles");
        let oidc = iam
            .list_open_id_connect_providers()
            .send()
            .await
            .expect("iam:ListOpenIDConnectProviders");
        let clusters = eks.list_clusters().send().await.expect("eks:ListClusters");
        let queues = sqs.list_queues().send().await.expect("sqs:ListQueues");
        let rules = events.list_rules().send().await.expect("events:ListRules");
        Account {
            roles: roles
                .roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect(),
            instance_profiles: profiles
                .instance_profiles()
                .iter()
                .map(|p| p.instance_profile_name().to_string())
                .collect(),
            oidc_providers: oidc
                .open_id_connect_provider_list()
                .iter()
                .filter_map(|p| p.arn().map(str::to_string))
                .collect(),
            clusters: clusters.clusters().iter().cloned().collect(),
            queues: queues.queue_urls().iter().cloned().collect(),
            rules: rules
                .rules()
                .iter()
                .filter_map(|r| r.name().map(str::to_string))
                .collect(),
        }
    })
}

/// A VPC with two private subnets tagged for discovery, and one that is not.
fn vpc(aws: &Aws) -> Vec<String> {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .unwrap();
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut tagged = Vec::new();
        for (i, (az, discover)) in [
            ("us-east-1a", true),
            ("us-east-1b", true),
            ("us-east-1c", false),
        ]
        .into_iter()
        .enumerate()
        {
            let mut req = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.0.{}.0/20", i * 16))
                .availability_zone(az);
            if discover {
                req = req.tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::Subnet)
                        .tags(
                            Tag::builder()
                                .key("joiner.dev/discovery")
                                .value(CLUSTER)
                                .build(),
                        )
                        .build(),
                );
            }
            let s = req.send().await.unwrap();
            if discover {
                tagged.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
            }
        }
        tagged.sort();
        tagged
    })
}

/// Replaces the provider the workspace runs with a wrapper that runs it under
/// `/usr/bin/time`, one usage file per provider process. Returns the directory of those
/// files, or `None` when `/usr/bin/time` is not installed.
fn measure_provider(tf: &Workspace) -> Option<std::path::PathBuf> {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        return None;
    }
    let link = tf.path().join(".provider/terraform-provider-joiner");
    let real = std::fs::read_link(&link).ok()?;
    let out = tf.path().join("usage");
    std::fs::create_dir_all(&out).ok()?;
    std::fs::remove_file(&link).ok()?;
    let script = format!(
        "#!/bin/sh\nexec /usr/bin/time -f '%e %U %S %M' -o '{}/provider.'$$ '{}' \"$@\"\n",
        out.display(),
        real.display()
    );
    std::fs::write(&link, script).ok()?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o755)).ok()?;
    Some(out)
}

/// (processes, wall s, CPU s, peak RSS KiB) over the usage files in `dir`.
fn usage(dir: &Path) -> (usize, f64, f64, u64) {
    let mut n = 0;
    let (mut wall, mut cpu, mut rss) = (0f64, 0f64, 0u64);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        // A killed process gets a "Command terminated by signal" line first.
        let Some(line) = text
            .lines()
            .rev()
            .find(|l| l.split_whitespace().count() == 4)
        else {
            continue;
        };
        let f: Vec<f64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() != 4 {
            continue;
        }
        n += 1;
        wall = wall.max(f[0]);
        cpu += f[1] + f[2];
        rss = rss.max(f[3] as u64);
    }
    (n, wall, cpu, rss)
}

#[test]
fn one_apply_builds_the_aws_half_and_destroy_leaves_nothing() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let subnets = vpc(&aws);
    let before = snapshot(&aws);

    let mut tf = Workspace::new(&moto);
    tf.set_timeout(Duration::from_secs(300));
    // The example declares its own required_providers: it replaces the harness's.
    tf.write_file("versions.tf", "");
    tf.write_config(EXAMPLE);
    let usage_dir = measure_provider(&tf);

    let applied = tf.apply();
    let out = applied.output();
    assert!(out.contains("Apply complete!"), "{out}");
    assert!(
        !out.contains("CoreDNS was not switched")
            && !out.contains("moved to joiner_fargate_profile"),
        "the add-on switch happened, with no deprecated attribute in use:\n{out}"
    );
    // CoreDNS is switched to Fargate by the kube-system profile, after that profile exists:
    // the add-on's creation time is not before the profile's.
    let eks = aws_sdk_eks::Client::new(aws.sdk_config());
    let addon = aws
        .block_on(
            eks.describe_addon()
                .cluster_name(CLUSTER)
                .addon_name("coredns")
                .send(),
        )
        .expect("eks:DescribeAddon coredns")
        .addon
        .expect("the coredns add-on");
    assert_eq!(
        addon.configuration_values(),
        Some(r#"{"computeType":"Fargate"}"#)
    );
    let profile = aws
        .block_on(
            eks.describe_fargate_profile()
                .cluster_name(CLUSTER)
                .fargate_profile_name("kube-system")
                .send(),
        )
        .expect("eks:DescribeFargateProfile kube-system")
        .fargate_profile
        .expect("the kube-system profile");
    assert!(
        addon.created_at().unwrap().secs() >= profile.created_at().unwrap().secs(),
        "the add-on was switched before its Fargate profile existed"
    );
    if let Some(dir) = &usage_dir {
        let (n, wall, cpu, rss) = usage(dir);
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        eprintln!(
            "groupless apply: {:.2} s wall for terraform apply; provider: {n} process(es), \
             longest {wall:.2} s wall, {cpu:.2} s CPU ({:.0}% of the apply's wall time), \
             peak RSS {:.1} MiB; {cores} cores",
            applied.elapsed.as_secs_f64(),
            100.0 * cpu / applied.elapsed.as_secs_f64(),
            rss as f64 / 1024.0
        );
    }

    let state = tf.state();
    let addresses: BTreeSet<String> = state.addresses().into_iter().collect();
    for a in [
        "data.joiner_subnets.private",
        "joiner_cluster_role.cluster",
        "joiner_fargate_role.fargate",
        "joiner_node_role.node",
        "joiner_agent_role.agent",
        "joiner_cluster.this",
        "joiner_fargate_profile.kube_system",
        "joiner_fargate_profile.joiner",
        "joiner_interruption_queue.this",
        "joiner_interruption_rules.this",
    ] {
        assert!(
            addresses.contains(a),
            "{a} missing from state: {addresses:?}"
        );
    }
    let got_subnets: Vec<String> = tf
        .output("subnet_ids")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(got_subnets, subnets, "only the tagged subnets, sorted");

    let after_apply = snapshot(&aws);
    assert_eq!(after_apply.clusters, BTreeSet::from([CLUSTER.to_string()]));
    assert_eq!(after_apply.oidc_providers.len(), 1);
    assert_eq!(after_apply.rules.len(), 5, "{:?}", after_apply.rules);
    assert!(after_apply.roles.len() >= 4, "{:?}", after_apply.roles);
    let fargate: Vec<String> = aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let out = eks
            .list_fargate_profiles()
            .cluster_name(CLUSTER)
            .send()
            .await
            .unwrap();
        let mut v = out.fargate_profile_names().to_vec();
        v.sort();
        v
    });
    assert_eq!(fargate, ["joiner", "kube-system"]);

    // Nodes may join: the node role has its EC2_LINUX entry, the identity that applied
    // (local-admin) its cluster-admin entry, and nobody got in implicitly.
    let node_role = tf.values("joiner_node_role.node")["arn"]
        .as_str()
        .unwrap()
        .to_string();
    let entries: Vec<(String, String)> = aws.block_on(async {
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let c = eks.describe_cluster().name(CLUSTER).send().await.unwrap();
        let access = c.cluster().unwrap().access_config().unwrap();
        assert_eq!(
            access.authentication_mode().map(|m| m.as_str()),
            Some("API_AND_CONFIG_MAP")
        );
        assert_eq!(
            access.bootstrap_cluster_creator_admin_permissions(),
            Some(false)
        );
        let list = eks
            .list_access_entries()
            .cluster_name(CLUSTER)
            .send()
            .await
            .unwrap();
        let mut out = Vec::new();
        for arn in list.access_entries() {
            let e = eks
                .describe_access_entry()
                .cluster_name(CLUSTER)
                .principal_arn(arn)
                .send()
                .await
                .unwrap();
            out.push((
                arn.clone(),
                e.access_entry()
                    .unwrap()
                    .r#type()
                    .unwrap_or_default()
                    .to_string(),
            ));
        }
        out.sort();
        out
    });
    let mut want = vec![
        (node_role, "EC2_LINUX".to_string()),
        (
            "arn:aws:iam::123456789012:user/local-admin".to_string(),
            "STANDARD".to_string(),
        ),
    ];
    want.sort();
    assert_eq!(entries, want);

    // 1. A Spot interruption warning on the default bus reaches the queue.
    let queue_url = tf.output("queue_url").as_str().unwrap().to_string();
    let body = aws.block_on(async {
        let events = aws_sdk_eventbridge::Client::new(aws.sdk_config());
        let sqs = aws_sdk_sqs::Client::new(aws.sdk_config());
        let put = events
            .put_events()
            .entries(
                aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                    .source("aws.ec2")
                    .detail_type("EC2 Spot Instance Interruption Warning")
                    .detail(
                        r#"{"instance-id":"i-0123456789abcdef0","instance-action":"terminate"}"#,
                    )
                    .resources("arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0")
                    .build(),
            )
            .send()
            .await
            .expect("events:PutEvents");
        assert_eq!(put.failed_entry_count(), 0, "{put:?}");
        let got = sqs
            .receive_message()
            .queue_url(&queue_url)
            .wait_time_seconds(5)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("sqs:ReceiveMessage");
        let msgs = got.messages();
        assert_eq!(
            msgs.len(),
            1,
            "exactly one delivery (one matching rule): {msgs:?}"
        );
        msgs[0].body().unwrap_or_default().to_string()
    });
    let event: serde_json::Value =
        serde_json::from_str(&body).expect("the message is the event as JSON");
    assert_eq!(
        event["detail-type"],
        "EC2 Spot Instance Interruption Warning"
    );
    assert_eq!(event["source"], "aws.ec2");
    assert_eq!(event["detail"]["instance-id"], "i-0123456789abcdef0");

    // 2. The next plan is empty.
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // 3. Destroy leaves the account as it found it.
    tf.destroy();
    assert_eq!(snapshot(&aws), before);
}
