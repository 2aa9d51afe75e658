//! The provider killed in the middle of `terraform apply`: `examples/groupless-cluster`
//! (four IAM roles, the EKS cluster with its OIDC provider, access entries, Fargate
//! profiles, the interruption queue and its rules) is applied against the AWS emulator, and
//! the provider process is killed with SIGKILL as soon as the first object exists in the
//! emulator, so calls are in flight and objects exist that Terraform never recorded. Then:
//! 1. the next `terraform apply` converges (objects made before the kill are adopted, not
//!    refused as already existing);
//! 2. the account holds exactly what one clean apply makes: nothing twice, nothing extra;
//! 3. the next plan is empty;
//! 4. `terraform destroy` leaves the account as it found it: nothing leaked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use joiner_e2e::{Aws, MotoServer, Workspace};

const EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/groupless-cluster/main.tf"
));
const CLUSTER: &str = "groupless";

/// What the example makes, by name, so "nothing twice, nothing extra" can be compared.
#[derive(Debug, PartialEq, Eq)]
struct Account {
    roles: BTreeSet<String>,
    instance_profiles: BTreeSet<String>,
    oidc_providers: usize,
    clusters: BTreeSet<String>,
    fargate_profiles: BTreeSet<String>,
    access_entries: BTreeSet<String>,
    queues: BTreeSet<String>,
    rules: BTreeSet<String>,
}

fn snapshot(aws: &Aws) -> Account {
    let queues = aws.queue_urls().into_iter().collect();
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
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
        let mut fargate_profiles = BTreeSet::new();
        let mut access_entries = BTreeSet::new();
        for c in clusters.clusters() {
            let f = eks
                .list_fargate_profiles()
                .cluster_name(c)
                .send()
                .await
                .expect("eks:ListFargateProfiles");
            fargate_profiles.extend(f.fargate_profile_names().iter().map(|p| format!("{c}/{p}")));
            let a = eks
                .list_access_entries()
                .cluster_name(c)
                .send()
                .await
                .expect("eks:ListAccessEntries");
            access_entries.extend(a.access_entries().iter().map(|p| format!("{c}/{p}")));
        }
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
            oidc_providers: oidc.open_id_connect_provider_list().len(),
            clusters: clusters.clusters().iter().cloned().collect(),
            fargate_profiles,
            access_entries,
            queues,
            rules: rules
                .rules()
                .iter()
                .filter_map(|r| r.name().map(str::to_string))
                .collect(),
        }
    })
}

/// Two private subnets tagged for discovery.
fn vpc(aws: &Aws) {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        for (i, az) in ["us-east-1a", "us-east-1b"].into_iter().enumerate() {
            ec2.create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.0.{}.0/20", i * 16))
                .availability_zone(az)
                .tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::Subnet)
                        .tags(
                            Tag::builder()
                                .key("joiner.dev/discovery")
                                .value(CLUSTER)
                                .build(),
                        )
                        .build(),
                )
                .send()
                .await
                .expect("ec2:CreateSubnet");
        }
    })
}

/// Replaces the workspace's provider with a wrapper that records its process id in `dir`
/// before becoming the provider (`exec`), so the test can kill exactly that process.
fn record_provider_pids(tf: &Workspace) -> PathBuf {
    let link = tf.path().join(".provider/terraform-provider-joiner");
    let real = std::fs::read_link(&link).expect("the workspace links the provider");
    let dir = tf.path().join("pids");
    std::fs::create_dir_all(&dir).expect("pid dir");
    std::fs::remove_file(&link).expect("unlink the provider");
    let script = format!(
        "#!/bin/sh\necho $$ > '{}/provider.'$$\nexec '{}' \"$@\"\n",
        dir.display(),
        real.display()
    );
    std::fs::write(&link, script).expect("write the wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// The recorded provider processes still running.
fn live_providers(dir: &Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .filter(|pid: &u32| Path::new(&format!("/proc/{pid}")).exists())
        .collect()
}

#[test]
fn apply_converges_after_the_provider_is_killed_mid_apply() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    vpc(&aws);
    let before = snapshot(&aws);

    let mut tf = Workspace::new(&moto);
    tf.set_timeout(Duration::from_secs(300));
    tf.write_file("versions.tf", "");
    tf.write_config(EXAMPLE);
    let pids = record_provider_pids(&tf);

    let (killed, first) = std::thread::scope(|s| {
        let apply =
            s.spawn(|| tf.terraform(&["apply", "-no-color", "-input=false", "-auto-approve"]));
        // The kill point: the first object of the configuration exists in the emulator (an
        // IAM role: the roles and the queue have no dependencies, so they go first). One
        // cheap call per poll, so the kill lands before the cluster's create begins (it waits
        // for its role to be complete): what gets past that point (access entries, Fargate
        // profiles) is not adopted yet (see docs/reliability.md, "Crash and restart").
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let deadline = Instant::now() + Duration::from_secs(120);
        let killed = loop {
            let roles = aws
                .block_on(iam.list_roles().send())
                .expect("iam:ListRoles")
                .roles()
                .len();
            if roles > before.roles.len() {
                let live = live_providers(&pids);
                for pid in &live {
                    let status = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status()
                        .expect("run kill");
                    assert!(status.success(), "kill -KILL {pid}");
                }
                break (live, snapshot(&aws));
            }
            assert!(
                Instant::now() < deadline && !apply.is_finished(),
                "no object appeared before the apply ended"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        (killed, apply.join().expect("the apply thread"))
    });
    let (killed, at_kill) = killed;
    assert!(!killed.is_empty(), "a provider process was running");
    assert!(
        !first.success(),
        "the apply whose provider was killed fails:\n{first}"
    );
    let recorded = tf.state().addresses();

    // 1. The next apply converges.
    let second = tf.apply();
    assert!(second.output().contains("Apply complete!"), "{second}");

    // 2. Exactly what one clean apply makes: one cluster, one OIDC provider, the four
    // roles, the node role's instance profile, two Fargate profiles, two access entries,
    // one queue, five rules.
    let after = snapshot(&aws);
    let new_roles: BTreeSet<String> = after.roles.difference(&before.roles).cloned().collect();
    let want_roles: BTreeSet<String> = ["cluster", "fargate", "node", "agent"]
        .iter()
        .map(|r| format!("{CLUSTER}-{r}"))
        .collect();
    assert_eq!(new_roles, want_roles);
    assert_eq!(
        after
            .instance_profiles
            .difference(&before.instance_profiles)
            .count(),
        1,
        "{:?}",
        after.instance_profiles
    );
    assert_eq!(after.oidc_providers, before.oidc_providers + 1);
    assert_eq!(after.clusters, BTreeSet::from([CLUSTER.to_string()]));
    assert_eq!(
        after.fargate_profiles.len(),
        2,
        "{:?}",
        after.fargate_profiles
    );
    assert_eq!(after.access_entries.len(), 2, "{:?}", after.access_entries);
    assert_eq!(
        after.queues.len(),
        before.queues.len() + 1,
        "{:?}",
        after.queues
    );
    assert_eq!(
        after.rules.len(),
        before.rules.len() + 5,
        "{:?}",
        after.rules
    );

    // 3. The next plan is empty.
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // 4. Nothing leaked.
    tf.destroy();
    assert_eq!(snapshot(&aws), before);
    eprintln!(
        "provider killed mid-apply: {} provider process(es) killed with {} role(s) and {} queue(s) made, {} address(es) in state; the next apply converged and destroy left the account as found",
        killed.len(),
        at_kill.roles.len() - before.roles.len(),
        at_kill.queues.len() - before.queues.len(),
        recorded.len()
    );
}
