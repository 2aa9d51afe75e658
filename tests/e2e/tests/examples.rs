//! `examples/dev` and `examples/prod`, applied side by side into one AWS emulator, each with
//! its own kube-sim (a cluster of its own, running its agent from the built `joiner-agent`
//! on simulated Fargate):
//! 1. both apply, each with the modules' objects and nothing of the other's: no remote
//!    object (role, cluster, queue, rule, Fargate profile, NodePool) is shared, and each
//!    cluster holds exactly its own NodePools with its own inputs;
//! 2. the next plan of each is empty;
//! 3. destroying both leaves the account as it was before.
//!
//! The examples are applied as they are, with two local-world additions a user would not
//! write: module sources point at a copy of `terraform-modules/` inside the working
//! directory, and an override file gives the provider kube-sim's kubeconfig (the emulator's
//! EKS endpoint leads nowhere).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use joiner_e2e::{Aws, MotoServer, Workspace};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

const AGENT_IMAGE: &str = "public.ecr.aws/joiner/joiner-agent";

fn root() -> PathBuf {
    joiner_test_support::workspace_root()
}

/// The agent binary next to the test executable, built first (as the provider is).
fn agent_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("<target>/<profile>/deps")
        .to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(root()).args([
        "build",
        "--quiet",
        "-p",
        "joiner-agent",
        "--bin",
        "joiner-agent",
    ]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(t) = profile_dir.parent() {
        cmd.arg("--target-dir").arg(t);
    }
    let out = cmd.output().expect("run cargo build -p joiner-agent");
    assert!(
        out.status.success(),
        "cargo build -p joiner-agent failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    profile_dir.join("joiner-agent")
}

/// A VPC with a subnet per zone and a node security group, tagged for `cluster`.
fn network(aws: &Aws, cluster: &str, octet: u8) -> BTreeSet<String> {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let tag = |rt| {
            TagSpecification::builder()
                .resource_type(rt)
                .tags(
                    Tag::builder()
                        .key("joiner.dev/discovery")
                        .value(cluster)
                        .build(),
                )
                .build()
        };
        let vpc = ec2
            .create_vpc()
            .cidr_block(format!("10.{octet}.0.0/16"))
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut ids = BTreeSet::new();
        for (i, az) in ["us-east-1a", "us-east-1b", "us-east-1c"]
            .iter()
            .enumerate()
        {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .availability_zone(*az)
                .cidr_block(format!("10.{octet}.{}.0/20", i * 16))
                .tag_specifications(tag(ResourceType::Subnet))
                .send()
                .await
                .expect("ec2:CreateSubnet");
            ids.insert(s.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        ec2.create_security_group()
            .group_name(format!("{cluster}-nodes"))
            .description("nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(tag(ResourceType::SecurityGroup))
            .send()
            .await
            .expect("ec2:CreateSecurityGroup");
        ids
    })
}

/// Everything in the account an example creates, by kind.
#[derive(Debug, PartialEq, Eq)]
struct Account {
    roles: BTreeSet<String>,
    oidc_providers: usize,
    clusters: BTreeSet<String>,
    queues: BTreeSet<String>,
    rules: BTreeSet<String>,
    fargate_profiles: BTreeSet<String>,
    live_instances: usize,
}

fn account(aws: &Aws) -> Account {
    aws.block_on(async {
        let c = aws.sdk_config();
        let iam = aws_sdk_iam::Client::new(c);
        let eks = aws_sdk_eks::Client::new(c);
        let clusters: BTreeSet<String> = eks
            .list_clusters()
            .send()
            .await
            .expect("eks:ListClusters")
            .clusters()
            .iter()
            .cloned()
            .collect();
        let mut fargate_profiles = BTreeSet::new();
        for cl in &clusters {
            let out = eks
                .list_fargate_profiles()
                .cluster_name(cl)
                .send()
                .await
                .expect("eks:ListFargateProfiles");
            for p in out.fargate_profile_names() {
                fargate_profiles.insert(format!("{cl}:{p}"));
            }
        }
        let instances = aws_sdk_ec2::Client::new(c)
            .describe_instances()
            .send()
            .await
            .expect("ec2:DescribeInstances");
        Account {
            roles: iam
                .list_roles()
                .send()
                .await
                .expect("iam:ListRoles")
                .roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect(),
            oidc_providers: iam
                .list_open_id_connect_providers()
                .send()
                .await
                .expect("iam:ListOpenIDConnectProviders")
                .open_id_connect_provider_list()
                .len(),
            clusters,
            queues: aws_sdk_sqs::Client::new(c)
                .list_queues()
                .send()
                .await
                .expect("sqs:ListQueues")
                .queue_urls()
                .iter()
                .cloned()
                .collect(),
            rules: aws_sdk_eventbridge::Client::new(c)
                .list_rules()
                .send()
                .await
                .expect("events:ListRules")
                .rules()
                .iter()
                .filter_map(|r| r.name().map(str::to_string))
                .collect(),
            fargate_profiles,
            live_instances: instances
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter(|i| {
                    i.state()
                        .and_then(|s| s.name())
                        .is_some_and(|n| n.as_str() != "terminated")
                })
                .count(),
        }
    })
}

/// A kube-sim for `cluster`: the EC2 bridge and Fargate read the emulator, and the agent's
/// image runs as the built binary.
fn kube_sim(moto: &MotoServer, cluster: &str, agent: &Path) -> kube_sim::KubeSim {
    kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: cluster.into(),
        aws_endpoint: Some(moto.endpoint()),
        images: vec![(
            AGENT_IMAGE.into(),
            kube_sim::ImageSource::Binary(agent.to_path_buf()),
        )],
        ..Default::default()
    })
    .expect("start kube-sim")
}

/// A workspace holding `example` as is, its modules beside it.
fn example_workspace(moto: &MotoServer, example: &str, kubeconfig: &Path) -> Workspace {
    let mut tf = Workspace::new(moto);
    tf.set_timeout(Duration::from_secs(600));
    // The example declares its own required_providers.
    tf.write_file("versions.tf", "");
    let main = std::fs::read_to_string(root().join(example).join("main.tf")).expect("read example");
    assert!(
        main.contains("\"../../terraform-modules/"),
        "{example} uses the modules by relative path"
    );
    tf.write_config(&main.replace("\"../../terraform-modules/", "\"./terraform-modules/"));
    copy_dir(
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
    // Local module sources still need installing; `get` does only that (no registry).
    let got = tf.terraform(&["get", "-no-color"]);
    assert!(got.success(), "terraform get failed:\n{got}");
    tf
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else if p.extension().is_some_and(|x| x == "tf") {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// Every remote identity in a state: ids, ARNs, names and URLs of managed resources.
fn identities(tf: &Workspace) -> BTreeSet<String> {
    let state = tf.state();
    let mut out = BTreeSet::new();
    for address in state.addresses() {
        if address.starts_with("data.") || address.contains(".data.") {
            continue;
        }
        let v = state.values(&address).unwrap();
        // Not `name`: a Fargate profile's, NodeClass's or namespace's name is unique only
        // within its cluster (both clusters have a `default` NodeClass); their ids are
        // `<cluster>:<name>`, and account-wide objects' names are in their ids and ARNs.
        for key in ["id", "arn", "url"] {
            if let Some(s) = v[key].as_str() {
                out.insert(s.to_string());
            }
        }
    }
    out
}

/// NodePools in a cluster: name → (capacity types, expireAfter).
fn node_pools(sim: &kube_sim::KubeSim) -> Vec<(String, Vec<String>, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = sim.client().await.expect("client");
        let ar = ApiResource {
            group: "joiner.dev".into(),
            version: "v1".into(),
            api_version: "joiner.dev/v1".into(),
            kind: "NodePool".into(),
            plural: "nodepools".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client, &ar);
        let list = api
            .list(&ListParams::default())
            .await
            .expect("list nodepools");
        let mut out: Vec<_> = list
            .items
            .into_iter()
            .map(|o| {
                let spec = &o.data["spec"]["template"]["spec"];
                let ct = spec["requirements"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["key"] == "karpenter.sh/capacity-type")
                    .map(|r| {
                        r["values"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_str().unwrap().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                (
                    o.metadata.name.unwrap(),
                    ct,
                    spec["expireAfter"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        out.sort();
        out
    })
}

#[test]
#[ignore = "moto 5.2.5 gives every EKS cluster the same OIDC issuer URL (its ISSUER_TEMPLATE is drawn once at import), so dev and prod get one IAM OIDC provider, not two; both applies and the agents on Fargate work; run with --ignored"]
fn dev_and_prod_side_by_side_share_nothing_but_the_modules() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let dev_subnets = network(&aws, "dev", 10);
    let prod_subnets = network(&aws, "prod", 20);
    assert!(dev_subnets.is_disjoint(&prod_subnets));
    let before = account(&aws);

    let agent = agent_bin();
    let dev_sim = kube_sim(&moto, "dev", &agent);
    let prod_sim = kube_sim(&moto, "prod", &agent);
    let dev = example_workspace(&moto, "examples/dev", dev_sim.kubeconfig_path());
    let prod = example_workspace(&moto, "examples/prod", prod_sim.kubeconfig_path());

    // 1. Both apply into the same account.
    dev.apply();
    prod.apply();

    let (d, p) = (identities(&dev), identities(&prod));
    let shared: Vec<_> = d.intersection(&p).collect();
    assert!(
        shared.is_empty(),
        "dev and prod share remote objects: {shared:?}"
    );

    let after = account(&aws);
    assert_eq!(
        after.clusters,
        BTreeSet::from(["dev".into(), "prod".into()])
    );
    assert_eq!(after.oidc_providers, before.oidc_providers + 2);
    for name in ["dev", "prod"] {
        for role in ["cluster", "fargate", "node", "agent"] {
            assert!(
                after.roles.contains(&format!("{name}-{role}")),
                "role {name}-{role} missing: {:?}",
                after.roles
            );
        }
        assert!(
            after
                .queues
                .iter()
                .any(|q| q.ends_with(&format!("/{name}-interruptions"))),
            "{:?}",
            after.queues
        );
        assert_eq!(
            after.rules.iter().filter(|r| r.contains(name)).count(),
            5,
            "five interruption rules for {name}: {:?}",
            after.rules
        );
        assert!(after
            .fargate_profiles
            .contains(&format!("{name}:kube-system")));
        assert!(after.fargate_profiles.contains(&format!("{name}:joiner")));
    }

    // Each cluster holds its own NodePools, shaped by its own inputs.
    assert_eq!(
        node_pools(&dev_sim),
        vec![("general".into(), vec!["spot".into()], "168h".into())],
        "dev: one all-Spot pool, renewed weekly"
    );
    assert_eq!(
        node_pools(&prod_sim),
        vec![
            ("critical".into(), vec!["on-demand".into()], "720h".into()),
            ("on-demand".into(), vec!["on-demand".into()], "720h".into()),
            ("spot".into(), vec!["spot".into()], "720h".into()),
        ],
        "prod: the 80/20 split and a critical pool, 30-day expiry"
    );
    assert_eq!(
        prod.output("capacity_spread"),
        serde_json::json!({"spot": ["1", "2", "3", "4"], "on_demand": ["5"]})
    );

    // 2. Nothing to do on the next plan.
    dev.plan_is_empty();
    prod.plan_is_empty();

    // 3. Destroy leaves the account as it was.
    dev.destroy();
    prod.destroy();
    assert_eq!(account(&aws), before);
}
