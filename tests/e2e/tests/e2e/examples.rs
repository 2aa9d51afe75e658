//! `examples/dev` and `examples/prod`, applied side by side into one AWS emulator, each with
//! its own kube-sim (a cluster of its own, running its agent from the built `joiner-agent`
//! on simulated Fargate):
//! 1. both apply, each with the modules' objects and nothing of the other's: no remote
//!    object (role, cluster, queue, rule, Fargate profile, NodePool) is shared, and each
//!    cluster holds exactly its own NodePools with its own inputs;
//! 2. the next plan of each is empty;
//! 3. destroying both leaves the account as it was before.
//!
//! dev runs in us-east-1 and prod in us-west-2, each set by the examples' `region` input
//! in a `terraform.tfvars`, as a user would. Why two regions: the emulator (moto 5.2.5)
//! gives every EKS cluster of a region the same OIDC issuer URL (it draws the random part
//! once, at import), where AWS gives each cluster its own; in one region prod's cluster
//! would find dev's IAM OIDC provider for "its" issuer and adopt it. The issuer URL holds
//! the region, so two regions give two issuers, as two clusters always have in AWS, and the
//! check below that the account gains exactly two OIDC providers (IAM is global) is real.
//!
//! The examples are applied as they are, with two local-world additions a user would not
//! write: module sources point at a copy of `terraform-modules/` inside the working
//! directory, and an override file gives the provider kube-sim's kubeconfig (the emulator's
//! EKS endpoint leads nowhere).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_ec2::config::Region;
use aws_types::SdkConfig;
use joiner_e2e::{Aws, MotoServer, Workspace};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

const AGENT_IMAGE: &str = "public.ecr.aws/joiner/joiner-agent";
/// Each example's cluster name and region.
const DEV: (&str, &str) = ("dev", "us-east-1");
const PROD: (&str, &str) = ("prod", "us-west-2");
const REGIONS: [&str; 2] = [DEV.1, PROD.1];

/// The emulator's SDK configuration, in `region`.
fn in_region(aws: &Aws, region: &str) -> SdkConfig {
    aws.sdk_config()
        .to_builder()
        .region(Region::new(region.to_string()))
        .build()
}

fn root() -> PathBuf {
    joiner_test_support::workspace_root()
}

/// A VPC in `region` with a subnet per zone and a node security group, tagged for `cluster`.
pub(crate) fn network(aws: &Aws, (cluster, region): (&str, &str), octet: u8) -> BTreeSet<String> {
    tagged_network(aws, (cluster, region), octet, "joiner.dev/discovery")
}

/// [`network`] with another discovery tag key (`karpenter.sh/discovery` on a Karpenter
/// cluster).
pub(crate) fn tagged_network(
    aws: &Aws,
    (cluster, region): (&str, &str),
    octet: u8,
    tag_key: &str,
) -> BTreeSet<String> {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(&in_region(aws, region));
        let tag = |rt| {
            TagSpecification::builder()
                .resource_type(rt)
                .tags(Tag::builder().key(tag_key).value(cluster).build())
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
        for (i, zone) in ["a", "b", "c"].iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .availability_zone(format!("{region}{zone}"))
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

/// Everything in the account an example creates, by kind; regional objects as
/// `<region>/<name or URL>`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Account {
    roles: BTreeSet<String>,
    oidc_providers: BTreeSet<String>,
    clusters: BTreeSet<String>,
    queues: BTreeSet<String>,
    rules: BTreeSet<String>,
    fargate_profiles: BTreeSet<String>,
    live_instances: usize,
}

fn account(aws: &Aws) -> Account {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let mut acc = Account {
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
                .iter()
                .filter_map(|p| p.arn().map(str::to_string))
                .collect(),
            ..Default::default()
        };
        for region in REGIONS {
            let c = in_region(aws, region);
            let eks = aws_sdk_eks::Client::new(&c);
            let clusters = eks
                .list_clusters()
                .send()
                .await
                .expect("eks:ListClusters")
                .clusters()
                .to_vec();
            for cl in &clusters {
                let out = eks
                    .list_fargate_profiles()
                    .cluster_name(cl)
                    .send()
                    .await
                    .expect("eks:ListFargateProfiles");
                for p in out.fargate_profile_names() {
                    acc.fargate_profiles.insert(format!("{region}/{cl}:{p}"));
                }
                acc.clusters.insert(format!("{region}/{cl}"));
            }
            let queues = aws_sdk_sqs::Client::new(&c)
                .list_queues()
                .send()
                .await
                .expect("sqs:ListQueues");
            for q in queues.queue_urls() {
                acc.queues.insert(format!("{region}/{q}"));
            }
            let rules = aws_sdk_eventbridge::Client::new(&c)
                .list_rules()
                .send()
                .await
                .expect("events:ListRules");
            for r in rules.rules().iter().filter_map(|r| r.name()) {
                acc.rules.insert(format!("{region}/{r}"));
            }
            let instances = aws_sdk_ec2::Client::new(&c)
                .describe_instances()
                .send()
                .await
                .expect("ec2:DescribeInstances");
            acc.live_instances += instances
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter(|i| {
                    i.state()
                        .and_then(|s| s.name())
                        .is_some_and(|n| n.as_str() != "terminated")
                })
                .count();
        }
        acc
    })
}

/// A kube-sim for `cluster`: the EC2 bridge and Fargate read the emulator in `region`, and
/// the agent's image runs as the built binary.
fn kube_sim(moto: &MotoServer, (cluster, region): (&str, &str), agent: &Path) -> kube_sim::KubeSim {
    kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: cluster.into(),
        aws_endpoint: Some(moto.endpoint()),
        aws_region: region.into(),
        images: vec![(
            AGENT_IMAGE.into(),
            kube_sim::ImageSource::Binary(agent.to_path_buf()),
        )],
        // EKS's self-managed CoreDNS, which the kube-system profile must move to Fargate.
        eks_addons: true,
        ..Default::default()
    })
    .expect("start kube-sim")
}

/// A kind of the API group `group` (`""`: the core group), version v1.
fn v1(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: if group.is_empty() {
            "v1".into()
        } else {
            format!("{group}/v1")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Waits (up to 60 s) until the cluster's CoreDNS pods all run on Fargate nodes, and returns
/// them as `name@node`. The end state is stable, so reading it until it holds cannot miss it.
fn coredns_on_fargate(sim: &kube_sim::KubeSim) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = sim.client().await.expect("client");
        let ar = |kind: &str, plural: &str| v1("", kind, plural);
        let pods: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "kube-system", &ar("Pod", "pods"));
        let nodes: Api<DynamicObject> = Api::all_with(client, &ar("Node", "nodes"));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let list = pods
                .list(&ListParams::default().labels("k8s-app=kube-dns"))
                .await
                .expect("list CoreDNS pods");
            let mut placed = Vec::new();
            let mut all_fargate = !list.items.is_empty();
            for p in &list.items {
                let node = p.data["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let running = p.data["status"]["phase"] == "Running";
                let fargate = !node.is_empty()
                    && nodes.get(&node).await.is_ok_and(|n| {
                        n.metadata.labels.unwrap_or_default()["eks.amazonaws.com/compute-type"]
                            == "fargate"
                    });
                all_fargate &= running && fargate;
                placed.push(format!(
                    "{}@{}",
                    p.metadata.name.clone().unwrap_or_default(),
                    if node.is_empty() { "-" } else { &node }
                ));
            }
            if all_fargate && list.items.len() >= 2 {
                return placed;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "CoreDNS not on Fargate 60 s after the apply: {placed:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// A workspace holding `example` as is, its modules beside it, its `region` input set in a
/// `terraform.tfvars`.
pub(crate) fn example_workspace(
    moto: &MotoServer,
    example: &str,
    region: &str,
    kubeconfig: &Path,
) -> Workspace {
    let mut tf = Workspace::new(moto);
    tf.set_timeout(Duration::from_secs(600));
    tf.write_file("terraform.tfvars", &format!("region = \"{region}\"\n"));
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
        // The cluster's OIDC provider ARN too: a cluster that found another's provider for
        // its issuer would adopt it, and only this attribute would show it.
        for key in ["id", "arn", "url", "oidc_provider_arn"] {
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
        let ar = v1("joiner.dev", "NodePool", "nodepools");
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
fn dev_and_prod_side_by_side_share_nothing_but_the_modules() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let dev_subnets = network(&aws, DEV, 10);
    let prod_subnets = network(&aws, PROD, 20);
    assert!(dev_subnets.is_disjoint(&prod_subnets));
    let before = account(&aws);

    let agent = joiner_e2e::agent_bin().to_path_buf();
    let dev_sim = kube_sim(&moto, DEV, &agent);
    let prod_sim = kube_sim(&moto, PROD, &agent);
    let dev = example_workspace(&moto, "examples/dev", DEV.1, dev_sim.kubeconfig_path());
    let prod = example_workspace(&moto, "examples/prod", PROD.1, prod_sim.kubeconfig_path());

    // 1. Both apply into the same account.
    dev.apply();
    prod.apply();

    // CoreDNS, created with each cluster as EKS creates it (kept off Fargate by its
    // `compute-type: ec2` annotation), is on Fargate after the one apply, and no EC2 instance
    // was launched for it (DescribeInstances lists terminated instances too).
    for sim in [&dev_sim, &prod_sim] {
        let placed = coredns_on_fargate(sim);
        eprintln!("CoreDNS: {placed:?}");
    }
    for (_, region) in [DEV, PROD] {
        let ec2 = aws_sdk_ec2::Client::new(&in_region(&aws, region));
        let reservations = aws
            .block_on(ec2.describe_instances().send())
            .expect("ec2:DescribeInstances")
            .reservations
            .unwrap_or_default();
        assert!(
            reservations.is_empty(),
            "EC2 capacity was launched in {region} before any workload: {reservations:?}"
        );
    }

    let (d, p) = (identities(&dev), identities(&prod));
    let shared: Vec<_> = d.intersection(&p).collect();
    assert!(
        shared.is_empty(),
        "dev and prod share remote objects: {shared:?}"
    );

    let after = account(&aws);
    assert_eq!(
        after.clusters,
        BTreeSet::from([
            format!("{}/{}", DEV.1, DEV.0),
            format!("{}/{}", PROD.1, PROD.0)
        ])
    );
    let new_oidc: BTreeSet<_> = after
        .oidc_providers
        .difference(&before.oidc_providers)
        .cloned()
        .collect();
    let oidc_of = |tf: &Workspace| {
        tf.attr("module.cluster.joiner_cluster.this[0]", "oidc_provider_arn")
            .as_str()
            .expect("oidc_provider_arn")
            .to_string()
    };
    assert_eq!(
        new_oidc,
        BTreeSet::from([oidc_of(&dev), oidc_of(&prod)]),
        "one IAM OIDC provider per cluster, each the one its cluster's state names"
    );
    for (name, region) in [DEV, PROD] {
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
                .any(|q| q.starts_with(region) && q.ends_with(&format!("/{name}-interruptions"))),
            "{:?}",
            after.queues
        );
        assert_eq!(
            after
                .rules
                .iter()
                .filter(|r| r.starts_with(region) && r.contains(name))
                .count(),
            5,
            "five interruption rules for {name}: {:?}",
            after.rules
        );
        assert!(after
            .fargate_profiles
            .contains(&format!("{region}/{name}:kube-system")));
        assert!(after
            .fargate_profiles
            .contains(&format!("{region}/{name}:joiner")));
    }
    // The module's defaults let the nodes join: the node role's EC2_LINUX entry, and the
    // identity that applied (local-admin) as cluster admin, on each cluster.
    for (tf, (name, region)) in [(&dev, DEV), (&prod, PROD)] {
        let node_role = tf
            .attr("module.cluster.joiner_node_role.node", "arn")
            .as_str()
            .expect("node role arn")
            .to_string();
        let conf = in_region(&aws, region);
        let entries: BTreeSet<(String, String)> = aws.block_on(async {
            let eks = aws_sdk_eks::Client::new(&conf);
            let list = eks
                .list_access_entries()
                .cluster_name(name)
                .send()
                .await
                .expect("eks:ListAccessEntries");
            let mut out = BTreeSet::new();
            for arn in list.access_entries() {
                let e = eks
                    .describe_access_entry()
                    .cluster_name(name)
                    .principal_arn(arn)
                    .send()
                    .await
                    .expect("eks:DescribeAccessEntry");
                let kind = e
                    .access_entry()
                    .and_then(|e| e.r#type())
                    .unwrap_or_default();
                out.insert((arn.clone(), kind.to_string()));
            }
            out
        });
        assert_eq!(
            entries,
            BTreeSet::from([
                (node_role, "EC2_LINUX".to_string()),
                (
                    "arn:aws:iam::123456789012:user/local-admin".to_string(),
                    "STANDARD".to_string()
                ),
            ]),
            "{name}: the module's default access entries"
        );
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

/// `examples/existing-cluster`: joiner added to a cluster made outside Terraform, as a team
/// running Karpenter has one: subnets and node security group tagged
/// `karpenter.sh/discovery`, an IAM OIDC provider made with the SDK (as `eksctl utils
/// associate-iam-oidc-provider` makes it). The apply reads the cluster and changes nothing
/// of it; the agent it installs provisions a workload onto nodes that join; the next plan is
/// empty; destroy removes joiner's objects and leaves the cluster and its OIDC provider.
#[test]
fn joiner_added_to_an_existing_cluster_provisions_and_leaves_the_cluster_on_destroy() {
    const LEGACY: (&str, &str) = ("legacy", "us-east-1");
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let subnets: Vec<String> = tagged_network(&aws, LEGACY, 30, "karpenter.sh/discovery")
        .into_iter()
        .collect();
    let (cluster_arn, issuer) = existing_cluster(&aws, LEGACY.0, &subnets);
    // Before it has an IAM OIDC provider, and under a wrong name, the data source says
    // what is missing, at its `name`.
    let probe = Workspace::new(&moto);
    for (name, says) in [
        (LEGACY.0, "has no IAM OIDC provider"),
        ("legacyy", "found no cluster named"),
    ] {
        probe.write_config(&format!(
            "data \"joiner_cluster\" \"x\" {{\n  name = \"{name}\"\n}}\n"
        ));
        probe.plan_fails_with("name", says);
    }
    let oidc_arn = oidc_provider(&aws, &issuer);
    let before = account(&aws);

    let agent = joiner_e2e::agent_bin().to_path_buf();
    let sim = kube_sim(&moto, LEGACY, &agent);
    let tf = example_workspace(
        &moto,
        "examples/existing-cluster",
        LEGACY.1,
        sim.kubeconfig_path(),
    );
    tf.apply();

    // The cluster was read, not made: the same ARN, no second cluster, its own OIDC
    // provider trusted by the agent's role.
    assert_eq!(tf.output("cluster_arn"), serde_json::json!(cluster_arn));
    let after = account(&aws);
    assert_eq!(after.clusters, before.clusters);
    assert_eq!(after.oidc_providers, before.oidc_providers);
    let trust = tf.attr(
        "module.cluster.joiner_agent_role.agent",
        "assume_role_policy",
    );
    assert!(
        trust.as_str().unwrap_or_default().contains(&oidc_arn),
        "the agent's role trusts the existing OIDC provider: {trust}"
    );
    for role in ["fargate", "node", "agent"] {
        assert!(
            after.roles.contains(&format!("legacy-{role}")),
            "{:?}",
            after.roles
        );
    }
    assert!(!after.roles.contains("legacy-cluster"), "{:?}", after.roles);
    // The NodeClass selects by the Karpenter tag.
    let class = tf.values("module.cluster.joiner_node_class.default");
    assert_eq!(
        class["subnet_selector_term"][0]["tags"],
        serde_json::json!({"karpenter.sh/discovery": "legacy"}),
        "{class}"
    );
    let pools: Vec<String> = node_pools(&sim).into_iter().map(|p| p.0).collect();
    assert_eq!(pools, ["general"], "the module's pool was written");

    // The installed agent provisions: pods that need EC2 capacity run on nodes that join.
    let pods = running_workload(&sim, 6);
    eprintln!("workload: {pods:?}");

    tf.plan_is_empty();
    tf.destroy();
    let gone = account(&aws);
    assert_eq!(gone.clusters, before.clusters, "the cluster is still there");
    assert_eq!(gone.oidc_providers, before.oidc_providers);
    assert_eq!(
        gone.roles, before.roles,
        "joiner's roles are gone, the cluster's kept"
    );
    assert_eq!(gone.queues, before.queues);
    assert_eq!(gone.rules, before.rules);
}

/// A cluster made outside Terraform, as a team adopting joiner already has (API and
/// config-map authentication, its role named `<name>-eks`): its ARN and OIDC issuer.
pub(crate) fn existing_cluster(aws: &Aws, name: &str, subnets: &[String]) -> (String, String) {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let role = iam
            .create_role()
            .role_name(format!("{name}-eks"))
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
            .expect("iam:CreateRole");
        let cluster = eks
            .create_cluster()
            .name(name)
            .role_arn(role.role().unwrap().arn())
            .resources_vpc_config(
                aws_sdk_eks::types::VpcConfigRequest::builder()
                    .set_subnet_ids(Some(subnets.to_vec()))
                    .build(),
            )
            .access_config(
                aws_sdk_eks::types::CreateAccessConfigRequest::builder()
                    .authentication_mode(aws_sdk_eks::types::AuthenticationMode::ApiAndConfigMap)
                    .build(),
            )
            .send()
            .await
            .expect("eks:CreateCluster");
        let cluster = cluster.cluster().unwrap();
        let issuer = cluster
            .identity()
            .and_then(|i| i.oidc())
            .and_then(|o| o.issuer())
            .expect("the cluster's OIDC issuer")
            .to_string();
        (cluster.arn().unwrap().to_string(), issuer)
    })
}

/// The IAM OIDC provider for `issuer`, as the team that made an existing cluster added it
/// for IRSA: its ARN.
pub(crate) fn oidc_provider(aws: &Aws, issuer: &str) -> String {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let oidc = iam
            .create_open_id_connect_provider()
            .url(issuer)
            .client_id_list("sts.amazonaws.com")
            .thumbprint_list("9e99a48a9960b14926bb7f3b02e22da2b0ab7280")
            .send()
            .await
            .expect("iam:CreateOpenIDConnectProvider");
        oidc.open_id_connect_provider_arn().unwrap().to_string()
    })
}

/// Creates a Deployment of `replicas` pods (250m/256Mi each, on no Fargate profile's
/// namespace) and waits, up to 120 s, until all run on EC2 nodes; returns them as
/// `name@node`. All Running is an end state, so reading it until it holds cannot miss it.
fn running_workload(sim: &kube_sim::KubeSim, replicas: usize) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = sim.client().await.expect("client");
        let deployments: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            "default",
            &v1("apps", "Deployment", "deployments"),
        );
        let deployment: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web", "image": "nginx",
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}
                    }]}
                }
            }
        }))
        .unwrap();
        deployments
            .create(&Default::default(), &deployment)
            .await
            .expect("create the workload");
        let pods: Api<DynamicObject> =
            Api::namespaced_with(client, "default", &v1("", "Pod", "pods"));
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .expect("list the workload's pods");
            let placed: Vec<String> = list
                .items
                .iter()
                .filter(|p| p.data["status"]["phase"] == "Running")
                .map(|p| {
                    format!(
                        "{}@{}",
                        p.metadata.name.clone().unwrap_or_default(),
                        p.data["spec"]["nodeName"].as_str().unwrap_or("-")
                    )
                })
                .collect();
            if placed.len() == replicas {
                return placed;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {replicas} pods Running 120 s after the apply",
                placed.len()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// EKS takes a 100-character cluster name, but the module derives IAM role names from it
/// (64 characters at most): a longer name is refused at plan, at `name`, not half-way
/// through the apply.
#[test]
fn a_cluster_name_too_long_for_its_role_names_is_refused_at_plan() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    tf.write_config(&format!(
        "module \"cluster\" {{\n  source = \"./terraform-modules/groupless-eks\"\n  name   = \"{}\"\n}}\n",
        "c".repeat(57)
    ));
    copy_dir(
        &root().join("terraform-modules"),
        &tf.path().join("terraform-modules"),
    );
    let got = tf.terraform(&["get", "-no-color"]);
    assert!(got.success(), "terraform get failed:\n{got}");
    let d = tf.plan_fails_with("name", "at most 56 characters");
    assert!(d.detail.contains("IAM allows 64 characters"), "{d}");
}
