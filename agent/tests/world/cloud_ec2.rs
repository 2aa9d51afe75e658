//! `Ec2Cloud` against the AWS emulator (moto), through the fault proxy where the emulator
//! cannot produce a behaviour (insufficient capacity, throttling, a lost answer).
//!
//! Each test gets its own emulator with a VPC: subnets in us-east-1a and us-east-1b tagged
//! for discovery, one in us-east-1c that is not, a tagged security group, and the public
//! AL2023 AMI parameter (x86_64 only) put into SSM under a test root (the emulator has
//! none and reserves `/aws/`).
//! The emulator launches the first override of an instant fleet and ignores ClientToken and
//! the allocation strategy; where that matters the test checks the request the proxy saw.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use base64::Engine;
use fault_proxy::FaultProxy;
use joiner_agent::api::node_class::{
    AmiSelectorTerm, KubeletConfiguration, SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
use joiner_agent::api::{NodeClass, NodeClassSpec};
use joiner_agent::catalog::CapacityType;
use joiner_agent::cloud::aws::{load_config, AwsSettings};
use joiner_agent::cloud::ice_cache::ManualClock;
use joiner_agent::cloud::launch_template::TEMPLATE_TTL;
use joiner_agent::cloud::user_data::parse_mime;
use joiner_agent::cloud::{Cloud, Ec2Cloud, Ec2Options, LaunchRequest, TAG_CLUSTER};
use joiner_agent::scheduler::Candidate;
use joiner_agent::taints::{Effect, Taint};
use joiner_test_support::MotoServer;

const CLUSTER: &str = "cloud-test";
/// The emulator refuses PutParameter under `/aws/` (reserved), so the public AMI parameter
/// is published under this root and the agent is told so; the paths below it are the real
/// ones (`ami::tests` pins those).
const PARAMETER_ROOT: &str = "/joiner-test/aws/service";

struct World {
    _moto: MotoServer,
    proxy: FaultProxy,
    /// Straight to the emulator, for setup and for reading back what the agent made.
    ec2: aws_sdk_ec2::Client,
    cloud: Ec2Cloud,
    subnets: BTreeMap<String, String>,
    image_id: String,
}

async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    let base = load_config(&AwsSettings {
        region: Some("us-east-1".into()),
        endpoint_url: Some(endpoint.to_string()),
        max_attempts: None,
        credentials: None,
    })
    .await;
    base.to_builder()
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new("testing", "testing", None, None, "test"),
            ),
        )
        .build()
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

fn discovery() -> BTreeMap<String, String> {
    BTreeMap::from([("joiner.dev/discovery".to_string(), CLUSTER.to_string())])
}

async fn world() -> World {
    let moto = MotoServer::start();
    let proxy = FaultProxy::start(&moto.endpoint());
    let direct = sdk_config(&moto.endpoint()).await;
    // The NodeClass role's instance profile: EC2 refuses a launch template naming a
    // profile that does not exist.
    kube_sim::node_auth::instance_profile(&direct, "cloud-test-node")
        .await
        .expect("the node role's instance profile");
    let ec2 = aws_sdk_ec2::Client::new(&direct);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap()
        .vpc()
        .unwrap()
        .vpc_id()
        .unwrap()
        .to_string();
    let mut subnets = BTreeMap::new();
    for (i, zone) in ["us-east-1a", "us-east-1b", "us-east-1c"]
        .iter()
        .enumerate()
    {
        let mut req = ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(format!("10.0.{}.0/24", i + 1))
            .availability_zone(*zone);
        if *zone != "us-east-1c" {
            req = req.tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Subnet)
                    .tags(tag("joiner.dev/discovery", CLUSTER))
                    .build(),
            );
        }
        let s = req.send().await.unwrap();
        subnets.insert(
            zone.to_string(),
            s.subnet().unwrap().subnet_id().unwrap().to_string(),
        );
    }
    ec2.create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::SecurityGroup)
                .tags(tag("joiner.dev/discovery", CLUSTER))
                .build(),
        )
        .send()
        .await
        .unwrap();
    // Any x86_64 image the emulator knows stands in for the EKS-optimised AMI.
    let images = ec2
        .describe_images()
        .owners("amazon")
        .filters(
            Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let image_id = images.images()[0].image_id().unwrap().to_string();
    let ssm = aws_sdk_ssm::Client::new(&direct);
    ssm.put_parameter()
        .name(format!("{PARAMETER_ROOT}/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"))
        .value(&image_id)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap();

    let cloud = Ec2Cloud::new(&sdk_config(&proxy.endpoint()).await, options());
    World {
        _moto: moto,
        proxy,
        ec2,
        cloud,
        subnets,
        image_id,
    }
}

/// The cloud's options in these tests: the cluster given, so that nothing reads EKS.
fn options() -> Ec2Options {
    let mut options = Ec2Options::new(CLUSTER);
    options.cluster_endpoint = Some("https://ABCDEF.gr7.us-east-1.eks.amazonaws.com".into());
    options.cluster_ca = Some("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t".into());
    options.service_cidr = Some("10.100.0.0/16".into());
    options.kubernetes_version = Some("1.33".into());
    options.launch_backoff = std::time::Duration::from_millis(20);
    options.public_parameter_root = PARAMETER_ROOT.into();
    options
}

fn node_class() -> NodeClass {
    NodeClass::new(
        "default",
        NodeClassSpec {
            subnet_selector_terms: vec![SubnetSelectorTerm {
                tags: discovery(),
                id: None,
            }],
            security_group_selector_terms: vec![SecurityGroupSelectorTerm {
                tags: discovery(),
                ..Default::default()
            }],
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some("al2023@latest".into()),
                ..Default::default()
            }],
            role: Some("cloud-test-node".into()),
            kubelet: Some(KubeletConfiguration {
                max_pods: Some(58),
                ..Default::default()
            }),
            tags: BTreeMap::from([("team".to_string(), "platform".to_string())]),
            ..Default::default()
        },
    )
}

/// A launch request over the given types, priced and zoned from the agent's own catalogue,
/// cheapest first as the scheduler orders them.
async fn request(
    w: &World,
    claim: &str,
    types: &[&str],
    capacity: &[CapacityType],
) -> LaunchRequest {
    request_for(w, node_class(), claim, types, capacity).await
}

/// [`request`] for a NodeClass of the test's own.
async fn request_for(
    w: &World,
    nc: NodeClass,
    claim: &str,
    types: &[&str],
    capacity: &[CapacityType],
) -> LaunchRequest {
    let catalog = w.cloud.catalog(&nc).await.unwrap();
    let mut candidates: Vec<Candidate> = types
        .iter()
        .map(|t| {
            let it = catalog
                .get(t)
                .unwrap_or_else(|| panic!("{t} in the catalogue"));
            let ct = capacity[0];
            let price = it
                .offerings
                .iter()
                .filter(|o| o.capacity_type == ct)
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min);
            Candidate {
                instance_type: t.to_string(),
                price,
                capacity_type: ct,
                zones: it
                    .offerings
                    .iter()
                    .filter(|o| o.capacity_type == ct)
                    .map(|o| o.zone.clone())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            }
        })
        .collect();
    candidates.sort_by(|a, b| a.price.total_cmp(&b.price));
    LaunchRequest {
        nodeclaim: claim.to_string(),
        nodepool: "general".into(),
        node_class: nc,
        candidates,
        capacity_types: capacity.to_vec(),
        zones: vec!["us-east-1a".into(), "us-east-1b".into()],
        labels: BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "general".to_string()),
            ("team".to_string(), "platform".to_string()),
        ]),
        taints: vec![Taint::new("dedicated", "batch", Effect::NoSchedule)],
        startup_taints: vec![Taint::new(
            "joiner.dev/agent-not-ready",
            "",
            Effect::NoExecute,
        )],
        reservation: None,
        prioritized: false,
        on_demand_prices: Default::default(),
    }
}

const BOTH: [CapacityType; 2] = [CapacityType::Spot, CapacityType::OnDemand];
const TYPES: [&str; 4] = ["c5.large", "m5.large", "c5a.large", "m6i.large"];

/// The resource types a launch template tags at launch (the emulator also lists the
/// template's own tags, under `launch-template`, in its data).
async fn template_tag_kinds(w: &World, template_id: &str) -> BTreeSet<String> {
    let versions = w
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(template_id)
        .send()
        .await
        .unwrap();
    versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap()
        .tag_specifications()
        .iter()
        .filter_map(|t| t.resource_type().map(|r| r.as_str().to_string()))
        .filter(|kind| kind != "launch-template")
        .collect()
}

/// Instances in the emulator carrying the NodeClaim tag, whatever their state.
/// The tag keys a recorded CreateFleet request sets on one resource type.
fn requested_tag_keys(f: &fault_proxy::RecordedRequest, kind: &str) -> Vec<String> {
    let params = f.params_with_prefix("TagSpecification.");
    let index = params
        .iter()
        .find(|(k, v)| k.ends_with(".ResourceType") && *v == kind)
        .map(|(k, _)| k.trim_end_matches(".ResourceType").to_string())
        .unwrap_or_else(|| panic!("no {kind} tag specification"));
    let prefix = format!("{index}.Tag.");
    params
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix) && k.ends_with(".Key"))
        .map(|(_, v)| v.to_string())
        .collect()
}

async fn tagged(w: &World, claim: &str) -> Vec<aws_sdk_ec2::types::Instance> {
    let out = w
        .ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name("tag:joiner.dev/nodeclaim")
                .values(claim)
                .build(),
        )
        .filters(
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        )
        .send()
        .await
        .unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances().iter().cloned())
        .collect()
}

#[tokio::test]
async fn catalogue_zones_come_from_the_node_class_subnets() {
    let w = world().await;
    let nc = node_class();
    let catalog = w.cloud.catalog(&nc).await.unwrap();
    assert!(
        catalog.len() > 100,
        "the emulator's instance types ({})",
        catalog.len()
    );
    assert_eq!(
        catalog.zones(),
        BTreeSet::from(["us-east-1a".to_string(), "us-east-1b".to_string()]),
        "us-east-1c's subnet is not tagged for discovery"
    );
    // Only an x86_64 image is published, so arm64 types are not offered.
    assert!(catalog.get("m6g.large").is_none());
    let m5 = catalog.get("m5.large").unwrap();
    assert_eq!(
        m5.capacity.pods, 58,
        "the NodeClass's kubelet maxPods applies"
    );
    assert!(m5
        .offerings
        .iter()
        .any(|o| o.capacity_type == CapacityType::Spot));

    // A term by ID selects just that subnet.
    let mut by_id = node_class();
    by_id.spec.subnet_selector_terms = vec![SubnetSelectorTerm {
        tags: BTreeMap::new(),
        id: Some(w.subnets["us-east-1c"].clone()),
    }];
    let c = w.cloud.catalog(&by_id).await.unwrap();
    assert_eq!(c.zones(), BTreeSet::from(["us-east-1c".to_string()]));

    // The raw EC2 data is fetched once and reused.
    assert!(w.proxy.count("DescribeInstanceTypes") > 0);
    let before = w.proxy.count("DescribeInstanceTypes");
    let again = w.cloud.catalog(&nc).await.unwrap();
    assert_eq!(w.proxy.count("DescribeInstanceTypes"), before);
    assert_eq!(
        again.zones(),
        catalog.zones(),
        "rebuilt for the tagged subnets' zones"
    );

    // With the same inputs the catalogue is not rebuilt: every caller (each launch in
    // flight) shares its types rather than holding a copy.
    let third = w.cloud.catalog(&nc).await.unwrap();
    assert!(again
        .types
        .iter()
        .zip(&third.types)
        .all(|(a, b)| std::sync::Arc::ptr_eq(a, b)));
    // A change of kubelet settings is a new catalogue.
    let mut more_pods = node_class();
    more_pods.spec.kubelet.as_mut().unwrap().max_pods = Some(110);
    let c = w.cloud.catalog(&more_pods).await.unwrap();
    assert_eq!(c.get("m5.large").unwrap().capacity.pods, 110);
    assert_eq!(
        w.cloud
            .catalog(&nc)
            .await
            .unwrap()
            .get("m5.large")
            .unwrap()
            .capacity
            .pods,
        58
    );
}

/// The local world serves a Spot price history as EC2 does (`joiner_local.spot_prices`:
/// the benchmarks' model printed to six decimals, and no entry where there is no market:
/// `c6in` in us-east-1a, types not sold as Spot such as t2.nano). The catalogue offers Spot
/// only where the history priced it, on-demand everywhere the type is sold; a Spot fleet
/// never asks for a type or zone without a market, and the on-demand fallback asks in
/// every zone.
#[tokio::test]
async fn spot_is_offered_only_where_the_price_history_has_a_market() {
    let w = world().await;
    let catalog = w.cloud.catalog(&node_class()).await.unwrap();
    let zones = |t: &str, ct: CapacityType| -> Vec<String> {
        catalog
            .get(t)
            .unwrap_or_else(|| panic!("{t} in the catalogue"))
            .offerings
            .iter()
            .filter(|o| o.capacity_type == ct)
            .map(|o| o.zone.clone())
            .collect()
    };
    let both = ["us-east-1a".to_string(), "us-east-1b".to_string()];
    assert_eq!(zones("c6in.large", CapacityType::Spot), ["us-east-1b"]);
    assert_eq!(zones("c6in.large", CapacityType::OnDemand), both);
    assert!(zones("t2.nano", CapacityType::Spot).is_empty());
    assert_eq!(zones("t2.nano", CapacityType::OnDemand), both);
    assert_eq!(zones("m5.large", CapacityType::Spot), both);
    let m5_spot = catalog
        .get("m5.large")
        .unwrap()
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::Spot && o.zone == "us-east-1b")
        .unwrap()
        .price;
    let model = joiner_agent::catalog::prices::spot_fallback("us-east-1", "m5.large", "us-east-1b")
        .unwrap();
    assert!(
        (m5_spot - model).abs() < 1e-6,
        "the observed price ({m5_spot}) is the model's ({model}) to six decimals"
    );
    let asked = w.proxy.requests_for("DescribeSpotPriceHistory");
    assert_eq!(asked[0].param("ProductDescription.1"), Some("Linux/UNIX"));

    // No Spot capacity at all: the Spot fleet asks only where there is a market, the
    // on-demand one in both zones.
    w.proxy.insufficient_capacity("*", "spot");
    let req = request(&w, "c6in-00001", &["c6in.large"], &BOTH).await;
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(l.capacity_type, CapacityType::OnDemand);
    let fleets = w.proxy.requests_for("CreateFleet");
    let asked = |i: usize| -> Vec<String> {
        fleets[i]
            .fleet_overrides()
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o.instance_type(),
                    o.fields
                        .get("AvailabilityZone")
                        .cloned()
                        .unwrap_or_default()
                )
            })
            .collect()
    };
    assert_eq!(fleets.len(), 2);
    assert_eq!(asked(0), ["c6in.large/us-east-1b"]);
    assert_eq!(asked(1), ["c6in.large/us-east-1a", "c6in.large/us-east-1b"]);
}

#[tokio::test]
async fn launch_tags_the_instance_and_uses_a_hardened_template() {
    let w = world().await;
    let req = request(&w, "general-abc12", &TYPES, &BOTH).await;
    let cheapest = req.candidates[0].instance_type.clone();
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(
        l.instance_type, cheapest,
        "the emulator launches the first override"
    );
    assert_eq!(l.capacity_type, CapacityType::Spot);
    assert!(
        ["us-east-1a", "us-east-1b"].contains(&l.zone.as_str()),
        "{l:?}"
    );
    assert_eq!(
        l.provider_id,
        format!("aws:///{}/{}", l.zone, l.instance_id)
    );
    assert_eq!(l.image_id, w.image_id);

    // Tags on the instance.
    let found = tagged(&w, "general-abc12").await;
    assert_eq!(found.len(), 1);
    let tags: BTreeMap<&str, &str> = found[0]
        .tags()
        .iter()
        .map(|t| (t.key().unwrap(), t.value().unwrap()))
        .collect();
    assert_eq!(tags.get(TAG_CLUSTER), Some(&CLUSTER));
    assert_eq!(tags.get("joiner.dev/nodepool"), Some(&"general"));
    assert_eq!(tags.get("joiner.dev/nodeclaim"), Some(&"general-abc12"));
    assert_eq!(tags.get("team"), Some(&"platform"), "NodeClass tags too");
    // What Kubernetes' AWS integrations read: without the cluster tag the cloud provider
    // never makes the node a load balancer backend.
    assert_eq!(
        tags.get(format!("kubernetes.io/cluster/{CLUSTER}").as_str()),
        Some(&"owned")
    );
    assert_eq!(tags.get("eks:eks-cluster-name"), Some(&CLUSTER));
    assert!(
        !tags.contains_key("karpenter.sh/nodepool"),
        "a Karpenter beside joiner would take the instance for its own"
    );
    // The volumes' tags are checked in the request below: the emulator does not apply a
    // fleet's volume tag specification to the volumes it creates.

    // The request: instant fleet, Spot with price-capacity-optimized, one instance,
    // overrides over the candidates × both zones, a client token, volume tags.
    let fleets = w.proxy.requests_for("CreateFleet");
    assert_eq!(fleets.len(), 1);
    let f = &fleets[0];
    assert_eq!(f.param("Type"), Some("instant"));
    assert_eq!(
        f.param("SpotOptions.AllocationStrategy"),
        Some("price-capacity-optimized")
    );
    assert_eq!(
        f.param("TargetCapacitySpecification.TotalTargetCapacity"),
        Some("1")
    );
    assert_eq!(
        f.param("TargetCapacitySpecification.DefaultTargetCapacityType"),
        Some("spot")
    );
    assert!(f.param("ClientToken").unwrap().starts_with("joiner-"));
    assert_eq!(f.fleet_overrides().len(), TYPES.len() * 2);
    let resource_types: BTreeSet<&str> = f
        .params_with_prefix("TagSpecification.")
        .into_iter()
        .filter(|(k, _)| k.ends_with(".ResourceType"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        resource_types,
        BTreeSet::from(["instance", "volume", "fleet"])
    );
    // Every tag key the NodeClass validation refuses as "set by the agent" is one the launch
    // request sets, on the instance and on its volumes.
    for kind in ["instance", "volume"] {
        let keys = requested_tag_keys(f, kind);
        for pattern in joiner_agent::api::tags::SET_BY_AGENT {
            assert!(
                keys.iter()
                    .any(|k| joiner_agent::api::tags::matches(pattern, k)),
                "the {kind} tags of the launch request set no {pattern}: {keys:?}"
            );
        }
    }

    // The launch template, read back.
    let lts = w
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name(format!("tag:{TAG_CLUSTER}"))
                .values(CLUSTER)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(lts.launch_templates().len(), 1);
    let lt = &lts.launch_templates()[0];
    assert!(lt
        .launch_template_name()
        .unwrap()
        .starts_with("joiner/cloud-test/default/"));
    assert!(lt
        .tags()
        .iter()
        .any(|t| t.key() == Some("joiner.dev/nodeclass") && t.value() == Some("default")));
    let versions = w
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(lt.launch_template_id().unwrap())
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    let md = data.metadata_options().unwrap();
    assert_eq!(md.http_tokens().unwrap().as_str(), "required");
    assert_eq!(
        md.instance_metadata_tags().map(|t| t.as_str()),
        Some("disabled"),
        "tags in IMDS pinned off, whatever the account's default"
    );
    assert_eq!(md.http_put_response_hop_limit(), Some(1));
    assert_eq!(md.http_endpoint().unwrap().as_str(), "enabled");
    let bdm = &data.block_device_mappings()[0];
    assert_eq!(bdm.device_name(), Some("/dev/xvda"));
    let ebs = bdm.ebs().unwrap();
    assert_eq!(ebs.encrypted(), Some(true));
    assert_eq!(ebs.volume_type().unwrap().as_str(), "gp3");
    assert_eq!(ebs.volume_size(), Some(20));
    assert_eq!(data.image_id(), Some(w.image_id.as_str()));
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("cloud-test-node")
    );
    assert_eq!(data.security_group_ids().len(), 1);
    let eni_tags = data
        .tag_specifications()
        .iter()
        .find(|t| t.resource_type().map(|r| r.as_str()) == Some("network-interface"))
        .expect("network interfaces are tagged through the template");
    for pattern in joiner_agent::api::tags::SET_BY_AGENT {
        assert!(
            eni_tags
                .tags()
                .iter()
                .filter_map(|t| t.key())
                .any(|k| joiner_agent::api::tags::matches(pattern, k)),
            "network interfaces are not tagged {pattern}"
        );
    }
    assert!(eni_tags
        .tags()
        .iter()
        .any(|t| t.key() == Some(TAG_CLUSTER) && t.value() == Some(CLUSTER)));
    // A Spot launch is authorized on its Spot request too, which only the template can tag.
    let spot_tags = data
        .tag_specifications()
        .iter()
        .find(|t| t.resource_type().map(|r| r.as_str()) == Some("spot-instances-request"))
        .expect("a Spot launch's template tags the Spot request");
    assert!(spot_tags
        .tags()
        .iter()
        .any(|t| t.key() == Some(TAG_CLUSTER) && t.value() == Some(CLUSTER)));
    let ud = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().unwrap())
        .unwrap();
    let parts = parse_mime(&String::from_utf8(ud).unwrap()).unwrap();
    let cfg: serde_yaml::Value = serde_yaml::from_str(&parts.last().unwrap().1).unwrap();
    assert_eq!(cfg["kind"], "NodeConfig");
    assert_eq!(cfg["spec"]["cluster"]["name"], CLUSTER);
    assert_eq!(cfg["spec"]["cluster"]["cidr"], "10.100.0.0/16");
    assert_eq!(cfg["spec"]["kubelet"]["config"]["maxPods"], 58);
    let flags: Vec<&str> = cfg["spec"]["kubelet"]["flags"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(
        flags,
        [
            "--node-labels=karpenter.sh/nodepool=general,team=platform",
            "--register-with-taints=dedicated=batch:NoSchedule,joiner.dev/agent-not-ready:NoExecute",
        ]
    );

    // Idempotent: the same NodeClaim again finds its instance and launches nothing.
    let again = w.cloud.launch(&req).await.unwrap();
    assert_eq!(again.instance_id, l.instance_id);
    assert_eq!(w.proxy.count("CreateFleet"), 1);
    assert_eq!(tagged(&w, "general-abc12").await.len(), 1);
    let mine = w
        .cloud
        .instance_for("general-abc12")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mine.instance_id, l.instance_id);
    assert_eq!(mine.capacity_type, CapacityType::Spot);
    assert!(w
        .cloud
        .instances()
        .await
        .unwrap()
        .iter()
        .any(|i| i.instance_id == l.instance_id));

    // A second claim of the same NodePool reuses the template.
    w.cloud
        .launch(&request(&w, "general-def34", &TYPES, &BOTH).await)
        .await
        .unwrap();
    assert_eq!(w.proxy.count("CreateLaunchTemplate"), 1);
}

#[tokio::test]
async fn spot_insufficient_capacity_lands_elsewhere_and_is_cached() {
    let w = world().await;
    let req = request(&w, "general-ice01", &TYPES, &BOTH).await;
    let cheapest = req.candidates[0].instance_type.clone();
    let second = req.candidates[1].instance_type.clone();
    w.proxy.insufficient_capacity(&cheapest, "spot");
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(l.instance_type, second);
    assert_eq!(l.capacity_type, CapacityType::Spot);
    let cached = w.cloud.unavailable();
    for zone in ["us-east-1a", "us-east-1b"] {
        assert!(
            cached.contains(CapacityType::Spot, &cheapest, zone),
            "{cached:?}"
        );
    }
    assert!(!cached.contains(CapacityType::OnDemand, &cheapest, "us-east-1a"));

    // The next claim does not even ask for the cached offerings.
    let req2 = request(&w, "general-ice02", &TYPES, &BOTH).await;
    w.cloud.launch(&req2).await.unwrap();
    let last = w.proxy.requests_for("CreateFleet").pop().unwrap();
    let types: BTreeSet<String> = last
        .fleet_overrides()
        .iter()
        .map(|o| o.instance_type().to_string())
        .collect();
    assert!(!types.contains(&cheapest), "{types:?}");
    assert_eq!(last.fault, None);
}

#[tokio::test]
async fn all_spot_gone_falls_back_to_on_demand() {
    let w = world().await;
    w.proxy.insufficient_capacity("*", "spot");
    let req = request(&w, "general-od001", &TYPES, &BOTH).await;
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(l.capacity_type, CapacityType::OnDemand);
    let fleets = w.proxy.requests_for("CreateFleet");
    assert_eq!(fleets.len(), 2);
    assert_eq!(
        fleets[0].param("TargetCapacitySpecification.DefaultTargetCapacityType"),
        Some("spot")
    );
    assert_eq!(
        fleets[1].param("TargetCapacitySpecification.DefaultTargetCapacityType"),
        Some("on-demand")
    );
    assert_eq!(
        fleets[1].param("OnDemandOptions.AllocationStrategy"),
        Some("lowest-price")
    );
    assert_ne!(
        fleets[0].param("ClientToken"),
        fleets[1].param("ClientToken")
    );
    assert_eq!(w.cloud.unavailable().len(), TYPES.len() * 2);
    // Each capacity type launches from templates of its own: only the Spot one tags the
    // Spot request, since EC2 fails a launch whose template tags a resource type the
    // instance does not have, and an on-demand instance has no Spot request.
    let template = |i: usize| {
        fleets[i]
            .param("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId")
            .expect("a launch template")
            .to_string()
    };
    assert_ne!(template(0), template(1));
    assert_eq!(
        template_tag_kinds(&w, &template(0)).await,
        BTreeSet::from(["network-interface".into(), "spot-instances-request".into()])
    );
    assert_eq!(
        template_tag_kinds(&w, &template(1)).await,
        BTreeSet::from(["network-interface".into()])
    );
    let i = w
        .cloud
        .instance_for("general-od001")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(i.capacity_type, CapacityType::OnDemand);
}

/// `Unsupported` names one offering: that offering goes into the cache and the launch
/// takes the next one; the same type in another zone, or on-demand, is not affected.
#[tokio::test]
async fn an_unsupported_offering_is_cached_and_the_next_one_launched() {
    let w = world().await;
    let req = request(&w, "general-uns01", &TYPES, &BOTH).await;
    let cheapest = req.candidates[0].instance_type.clone();
    w.proxy
        .fleet_error("Unsupported", &cheapest, "us-east-1a", "spot");
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(
        (l.instance_type.as_str(), l.zone.as_str(), l.capacity_type),
        (cheapest.as_str(), "us-east-1b", CapacityType::Spot)
    );
    let cached = w.cloud.unavailable();
    assert!(
        cached.contains(CapacityType::Spot, &cheapest, "us-east-1a"),
        "{cached:?}"
    );
    assert!(!cached.contains(CapacityType::Spot, &cheapest, "us-east-1b"));
    assert!(!cached.contains(CapacityType::OnDemand, &cheapest, "us-east-1a"));
    // The next claim does not ask for it.
    w.cloud
        .launch(&request(&w, "general-uns02", &TYPES, &BOTH).await)
        .await
        .unwrap();
    let last = w.proxy.requests_for("CreateFleet").pop().unwrap();
    assert!(
        !last
            .fleet_overrides()
            .iter()
            .any(|o| o.instance_type() == cheapest
                && o.fields.get("AvailabilityZone").map(String::as_str) == Some("us-east-1a")),
        "{:?}",
        last.fleet_overrides()
    );
}

/// A vCPU quota refuses every Spot override: the quota's family group is out for Spot (in
/// every zone, types the request did not name included), and the launch falls back to
/// on-demand at once rather than failing. Another group's Spot and on-demand are untouched;
/// the next claim does not ask Spot at all.
#[tokio::test]
async fn a_spot_vcpu_quota_falls_back_to_on_demand() {
    let w = world().await;
    w.proxy.fleet_error("VcpuLimitExceeded", "*", "*", "spot");
    let req = request(&w, "general-vcpu1", &TYPES, &BOTH).await;
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(l.capacity_type, CapacityType::OnDemand);
    let fleets = w.proxy.requests_for("CreateFleet");
    assert_eq!(
        fleets
            .iter()
            .map(|f| f
                .param("TargetCapacitySpecification.DefaultTargetCapacityType")
                .unwrap_or_default())
            .collect::<Vec<_>>(),
        ["spot", "on-demand"]
    );
    let cached = w.cloud.unavailable();
    for t in TYPES.iter().chain(&["r5.large", "t3.micro"]) {
        for zone in ["us-east-1a", "us-east-1b"] {
            assert!(cached.contains(CapacityType::Spot, t, zone), "{t} {zone}");
            assert!(
                !cached.contains(CapacityType::OnDemand, t, zone),
                "{t} {zone}"
            );
        }
    }
    assert!(!cached.contains(CapacityType::Spot, "g4dn.xlarge", "us-east-1a"));

    let before = w.proxy.count("CreateFleet");
    let l = w
        .cloud
        .launch(&request(&w, "general-vcpu2", &TYPES, &BOTH).await)
        .await
        .unwrap();
    assert_eq!(l.capacity_type, CapacityType::OnDemand);
    let fleets = w.proxy.requests_for("CreateFleet");
    assert_eq!(fleets.len(), before + 1, "Spot is not asked again");
    assert_eq!(
        fleets[before].param("TargetCapacitySpecification.DefaultTargetCapacityType"),
        Some("on-demand")
    );
}

/// EC2 could not create the Spot service-linked role: Spot as a whole is out (every group),
/// and the launch goes on-demand. Authorization refused per override
/// (`UnauthorizedOperation`) is not capacity: the launch fails with it, nothing cached.
#[tokio::test]
async fn a_refused_spot_service_linked_role_leaves_spot_out() {
    let w = world().await;
    w.proxy.fleet_error(
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
        "*",
        "*",
        "spot",
    );
    let l = w
        .cloud
        .launch(&request(&w, "general-slr01", &TYPES, &BOTH).await)
        .await
        .unwrap();
    assert_eq!(l.capacity_type, CapacityType::OnDemand);
    let cached = w.cloud.unavailable();
    for t in ["c5.large", "g4dn.xlarge", "p3.2xlarge", "inf2.xlarge"] {
        assert!(cached.contains(CapacityType::Spot, t, "us-east-1a"), "{t}");
        assert!(
            !cached.contains(CapacityType::OnDemand, t, "us-east-1a"),
            "{t}"
        );
    }

    w.proxy.clear();
    w.proxy
        .fleet_error("UnauthorizedOperation", "*", "*", "on-demand");
    let e = w
        .cloud
        .launch(&request(&w, "ondemand-deny1", &TYPES, &[CapacityType::OnDemand]).await)
        .await
        .unwrap_err();
    assert_eq!(e.code, "UnauthorizedOperation", "{e}");
    assert!(!e.is_insufficient_capacity());
    assert!(!w
        .cloud
        .unavailable()
        .contains(CapacityType::OnDemand, "c5.large", "us-east-1a"));
}

/// A subnet out of addresses: the offering EC2 named and the subnet are marked, the launch
/// lands in the other zone, and the zone (its only subnet marked) leaves the catalogue, so
/// nothing is planned or asked there until the mark expires.
#[tokio::test]
async fn a_subnet_without_free_addresses_is_passed_over() {
    let w = world().await;
    w.proxy.fleet_error(
        "InsufficientFreeAddressesInSubnet",
        "*",
        "us-east-1a",
        "spot",
    );
    let l = w
        .cloud
        .launch(&request(&w, "general-ip0001", &TYPES, &BOTH).await)
        .await
        .unwrap();
    assert_eq!(
        (l.zone.as_str(), l.capacity_type),
        ("us-east-1b", CapacityType::Spot)
    );
    assert_eq!(
        w.cloud.catalog(&node_class()).await.unwrap().zones(),
        BTreeSet::from(["us-east-1b".to_string()])
    );
    w.proxy.clear();
    w.cloud
        .launch(&request(&w, "general-ip0002", &TYPES, &[CapacityType::OnDemand]).await)
        .await
        .unwrap();
    let last = w.proxy.requests_for("CreateFleet").pop().unwrap();
    let zones: BTreeSet<String> = last
        .fleet_overrides()
        .iter()
        .filter_map(|o| o.fields.get("AvailabilityZone").cloned())
        .collect();
    assert_eq!(zones, BTreeSet::from(["us-east-1b".to_string()]));
}

#[tokio::test]
async fn nothing_left_is_no_candidates_left_with_what_was_tried() {
    let w = world().await;
    w.proxy.insufficient_capacity("*", "spot");
    let req = request(&w, "spotonly-001", &TYPES[..2], &[CapacityType::Spot]).await;
    let e = w.cloud.launch(&req).await.unwrap_err();
    assert_eq!(e.code, "NoCandidatesLeft");
    assert_eq!(e.operation, "ec2:CreateFleet");
    assert!(e.is_insufficient_capacity());
    assert!(e.message.contains("spotonly-001"), "{e}");
    assert!(e.message.contains("spot:c5.large:us-east-1a"), "{e}");
    assert!(e.message.contains("spot:m5.large:us-east-1b"), "{e}");
    assert!(tagged(&w, "spotonly-001").await.is_empty());

    // Again: the cache now excludes everything, so EC2 is not even asked.
    let before = w.proxy.count("CreateFleet");
    let e = w.cloud.launch(&req).await.unwrap_err();
    assert_eq!(e.code, "NoCandidatesLeft");
    assert!(e.message.contains("4 offerings excluded"), "{e}");
    assert_eq!(w.proxy.count("CreateFleet"), before);

    // On-demand allowed too, and out as well.
    w.proxy.insufficient_capacity("*", "on-demand");
    let e = w
        .cloud
        .launch(&request(&w, "both-001", &TYPES[..2], &BOTH).await)
        .await
        .unwrap_err();
    assert_eq!(e.code, "NoCandidatesLeft");
    assert!(e.message.contains("on-demand:c5.large:us-east-1a"), "{e}");
}

#[tokio::test]
async fn throttling_is_retried_and_a_lost_answer_launches_once() {
    let w = world().await;
    w.proxy.throttle("DescribeInstanceTypes", 2);
    let req = request(&w, "general-thr01", &TYPES, &BOTH).await;
    assert!(
        w.proxy.count("DescribeInstanceTypes") >= 3,
        "two throttled answers, then success"
    );

    w.proxy.throttle("CreateFleet", 2);
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(w.proxy.count("CreateFleet"), 3);
    assert_eq!(tagged(&w, "general-thr01").await.len(), 1);
    assert_eq!(l.instance_type, req.candidates[0].instance_type);

    // CreateFleet launches but the answer is lost: the retry finds the instance by its tag.
    w.proxy.half_succeed("CreateFleet", 1);
    let req = request(&w, "general-half1", &TYPES, &BOTH).await;
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(w.proxy.count("CreateFleet"), 4, "no second CreateFleet");
    let found = tagged(&w, "general-half1").await;
    assert_eq!(found.len(), 1, "exactly one instance");
    assert_eq!(found[0].instance_id(), Some(l.instance_id.as_str()));

    // A non-retryable error is reported with its operation and code.
    w.proxy.fail("CreateFleet", 1, 400, "UnauthorizedOperation");
    let e = w
        .cloud
        .launch(&request(&w, "general-deny1", &TYPES, &BOTH).await)
        .await
        .unwrap_err();
    assert_eq!(
        (e.operation.as_str(), e.code.as_str()),
        ("ec2:CreateFleet", "UnauthorizedOperation")
    );
}

#[tokio::test]
async fn terminate_and_prune_launch_templates() {
    let w = world().await;
    let l = w
        .cloud
        .launch(&request(&w, "general-term1", &TYPES, &BOTH).await)
        .await
        .unwrap();
    w.cloud
        .terminate(&[l.instance_id.clone(), "i-0123456789abcdef0".into()])
        .await
        .expect("an unknown ID is not an error");
    assert!(w
        .cloud
        .instance_for("general-term1")
        .await
        .unwrap()
        .is_none());
    let live: Vec<String> = w
        .cloud
        .instances()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state != "shutting-down")
        .map(|i| i.instance_id)
        .collect();
    assert!(!live.contains(&l.instance_id));
    w.cloud
        .terminate(std::slice::from_ref(&l.instance_id))
        .await
        .expect("terminating twice is fine");

    let count = |w: &World| {
        let ec2 = w.ec2.clone();
        async move {
            ec2.describe_launch_templates()
                .filters(
                    Filter::builder()
                        .name(format!("tag:{TAG_CLUSTER}"))
                        .values(CLUSTER)
                        .build(),
                )
                .send()
                .await
                .unwrap()
                .launch_templates()
                .len()
        }
    };
    assert_eq!(count(&w).await, 1);
    w.cloud
        .prune_launch_templates(&[node_class()])
        .await
        .unwrap();
    assert_eq!(count(&w).await, 1, "in use and unchanged: kept");
    let mut changed = node_class();
    changed.spec.kubelet = None;
    w.cloud.prune_launch_templates(&[changed]).await.unwrap();
    assert_eq!(count(&w).await, 0, "spec changed: the old template goes");

    // A launch after pruning makes a fresh template.
    w.cloud
        .launch(&request(&w, "general-term2", &TYPES, &BOTH).await)
        .await
        .unwrap();
    assert_eq!(count(&w).await, 1);
    w.cloud.prune_launch_templates(&[]).await.unwrap();
    assert_eq!(count(&w).await, 0, "NodeClass gone: deleted");
}

#[tokio::test]
async fn cluster_details_come_from_describe_cluster_when_not_given() {
    let w = world().await;
    let eks = create_cluster(&w, None).await;
    let described = eks.describe_cluster().name(CLUSTER).send().await.unwrap();
    let endpoint = described.cluster().unwrap().endpoint().unwrap().to_string();

    // No endpoint, CA or version given: one eks:DescribeCluster supplies them (the version
    // picks the AMI parameter, so a launch proves it was read).
    let mut options = Ec2Options::new(CLUSTER);
    options.public_parameter_root = PARAMETER_ROOT.into();
    let cloud = Ec2Cloud::new(&sdk_config(&w.proxy.endpoint()).await, options);
    let info = cloud.cluster_info().await.unwrap();
    assert_eq!(info.endpoint, endpoint);
    assert_eq!(info.version, "1.33");
    assert!(!info.certificate_authority.is_empty());
    let req = request(&w, "general-eks01", &TYPES, &BOTH).await;
    let l = cloud.launch(&req).await.unwrap();
    assert_eq!(l.image_id, w.image_id);
    cloud.cluster_info().await.unwrap();
    let cfg = node_config(&w).await;
    assert_eq!(
        cfg["spec"]["cluster"]["apiServerEndpoint"],
        endpoint.as_str()
    );
}

/// The cluster `CLUSTER` (Kubernetes 1.33) in two of the world's zones, straight to the
/// emulator; `service_cidr` as CreateCluster's `serviceIpv4Cidr`, else EKS's default.
async fn create_cluster(w: &World, service_cidr: Option<&str>) -> aws_sdk_eks::Client {
    let eks = aws_sdk_eks::Client::new(&sdk_config(&w._moto.endpoint()).await);
    eks.create_cluster()
        .name(CLUSTER)
        .version("1.33")
        .role_arn("arn:aws:iam::123456789012:role/cluster")
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .subnet_ids(&w.subnets["us-east-1a"])
                .subnet_ids(&w.subnets["us-east-1b"])
                .build(),
        )
        .set_kubernetes_network_config(service_cidr.map(|c| {
            aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr(c)
                .build()
        }))
        .send()
        .await
        .expect("eks:CreateCluster");
    eks
}

/// The NodeConfig of the cluster's first launch template, as nodeadm would read it.
async fn node_config(w: &World) -> serde_yaml::Value {
    let lts = w
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name(format!("tag:{TAG_CLUSTER}"))
                .values(CLUSTER)
                .build(),
        )
        .send()
        .await
        .unwrap();
    template_node_config(w, lts.launch_templates()[0].launch_template_id().unwrap()).await
}

/// Endpoint, CA and version given by flags still leave the service CIDR to
/// DescribeCluster: nodeadm refuses a NodeConfig without `cidr`.
#[tokio::test]
async fn the_service_cidr_is_read_even_when_the_endpoint_and_ca_are_given() {
    let w = world().await;
    create_cluster(&w, Some("10.100.0.0/16")).await;
    let mut options = Ec2Options::new(CLUSTER);
    options.public_parameter_root = PARAMETER_ROOT.into();
    options.cluster_endpoint = Some("https://flag.example".into());
    options.cluster_ca = Some("Q0E=".into());
    options.kubernetes_version = Some("1.33".into());
    let cloud = Ec2Cloud::new(&sdk_config(&w.proxy.endpoint()).await, options);
    let info = cloud.cluster_info().await.unwrap();
    assert_eq!(info.endpoint, "https://flag.example", "the flag wins");
    assert_eq!(info.service_cidr.as_deref(), Some("10.100.0.0/16"));
    let req = request(&w, "general-eks01", &TYPES, &BOTH).await;
    cloud.launch(&req).await.unwrap();
    let cfg = node_config(&w).await;
    assert_eq!(cfg["spec"]["cluster"]["cidr"], "10.100.0.0/16");
    assert_eq!(
        cfg["spec"]["cluster"]["apiServerEndpoint"],
        "https://flag.example"
    );
}

/// The NodeConfig of a launch template, as nodeadm would read it.
async fn template_node_config(w: &World, template_id: &str) -> serde_yaml::Value {
    let versions = w
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(template_id)
        .send()
        .await
        .unwrap();
    let ud = base64::engine::general_purpose::STANDARD
        .decode(
            versions.launch_template_versions()[0]
                .launch_template_data()
                .unwrap()
                .user_data()
                .unwrap(),
        )
        .unwrap();
    let parts = parse_mime(&String::from_utf8(ud).unwrap()).unwrap();
    serde_yaml::from_str(&parts.last().unwrap().1).unwrap()
}

/// A NodeClass that leaves max pods to the instance type: every override of the fleet goes
/// through a template whose NodeConfig sets exactly the pods the scheduler counted for that
/// type, so the kubelet never holds fewer pods than were packed onto it (Karpenter's
/// templates per max-pods value). Types with different ENI limits get different templates.
#[tokio::test]
async fn every_override_launches_with_the_max_pods_the_scheduler_counted() {
    let w = world().await;
    let mut nc = node_class();
    nc.spec.kubelet = None;
    let catalog = w.cloud.catalog(&nc).await.unwrap();
    let types = ["c5.large", "m5.large", "m5.xlarge", "m5.4xlarge"];
    let req = request_for(&w, nc, "general-pods1", &types, &BOTH).await;
    w.cloud.launch(&req).await.unwrap();

    let fleets = w.proxy.requests_for("CreateFleet");
    let f = &fleets[0];
    let mut seen = BTreeMap::new();
    for o in f.fleet_overrides() {
        let template = f
            .param(&format!(
                "LaunchTemplateConfigs.{}.LaunchTemplateSpecification.LaunchTemplateId",
                o.config
            ))
            .expect("each config names its template")
            .to_string();
        let cfg = template_node_config(&w, &template).await;
        let written = cfg["spec"]["kubelet"]["config"]["maxPods"]
            .as_i64()
            .unwrap_or_else(|| panic!("{template}: no maxPods in {cfg:?}"));
        let counted = catalog.get(o.instance_type()).unwrap().capacity.pods;
        assert_eq!(
            written,
            counted,
            "{}: the template's kubelet max pods against the scheduler's",
            o.instance_type()
        );
        seen.insert(o.instance_type().to_string(), written);
    }
    assert_eq!(
        seen,
        BTreeMap::from([
            ("c5.large".to_string(), 29),
            ("m5.large".to_string(), 29),
            ("m5.xlarge".to_string(), 58),
            ("m5.4xlarge".to_string(), 234),
        ]),
        "EKS's max-pods table"
    );
    assert_eq!(
        w.proxy.count("CreateLaunchTemplate"),
        3,
        "one template per max-pods value"
    );
}

/// An account whose instance-metadata defaults allow tags in IMDS: EC2 refuses a launch whose
/// instance has a tag key with `/` (the local world does, as the EC2 user guide says), and
/// all of ours have one. The agent's templates pin the setting off, so it still launches.
#[tokio::test]
async fn an_account_allowing_tags_in_instance_metadata_still_launches() {
    let w = world().await;
    w.ec2
        .modify_instance_metadata_defaults()
        .instance_metadata_tags(aws_sdk_ec2::types::DefaultInstanceMetadataTagsState::Enabled)
        .send()
        .await
        .unwrap();
    let req = request(&w, "general-imds1", &TYPES, &BOTH).await;
    let l = w.cloud.launch(&req).await.unwrap();
    assert_eq!(tagged(&w, "general-imds1").await.len(), 1, "{l:?}");

    // The refusal itself: the same account, a template that leaves the setting unset.
    let template = w
        .ec2
        .create_launch_template()
        .launch_template_name("unpinned")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(&w.image_id)
                .instance_type(aws_sdk_ec2::types::InstanceType::C5Large)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let refused = w
        .ec2
        .run_instances()
        .launch_template(
            aws_sdk_ec2::types::LaunchTemplateSpecification::builder()
                .launch_template_id(
                    template
                        .launch_template()
                        .unwrap()
                        .launch_template_id()
                        .unwrap(),
                )
                .build(),
        )
        .subnet_id(&w.subnets["us-east-1a"])
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(tag(TAG_CLUSTER, CLUSTER))
                .build(),
        )
        .send()
        .await
        .expect_err("a `/` in a tag key with tags in IMDS");
    let code = aws_sdk_ec2::error::ProvideErrorMetadata::code(&refused).map(str::to_string);
    assert_eq!(
        code.as_deref(),
        Some("InvalidParameterValue"),
        "{refused:?}"
    );
}

/// An image's name term without an owner must not reach another account's public image of
/// the same name: the emulator serves such a lookalike, newer, beside each image it
/// publishes for EKS, as any account can. Owner-less, the term picks Amazon's; naming the
/// other account as owner is how a user opts in to it.
#[tokio::test]
async fn a_name_term_without_an_owner_never_picks_another_accounts_lookalike() {
    let w = world().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk_config(&w._moto.endpoint()).await);
    let published = ssm
        .get_parameter()
        .name("/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id")
        .send()
        .await
        .expect("SSM GetParameter of a public Bottlerocket image");
    let amazons = published.parameter().unwrap().value().unwrap().to_string();
    let described = w
        .ec2
        .describe_images()
        .image_ids(&amazons)
        .send()
        .await
        .unwrap();
    let name = described.images()[0].name().unwrap().to_string();
    // Owner-less, EC2 answers both; the lookalike is the newer.
    let everyone = w
        .ec2
        .describe_images()
        .filters(Filter::builder().name("name").values(&name).build())
        .send()
        .await
        .unwrap();
    let mut found: Vec<(String, String, String)> = everyone
        .images()
        .iter()
        .map(|i| {
            (
                i.creation_date().unwrap().to_string(),
                i.image_id().unwrap().to_string(),
                i.owner_id().unwrap().to_string(),
            )
        })
        .collect();
    found.sort();
    assert_eq!(found.len(), 2, "Amazon's image and a lookalike: {found:?}");
    let (_, lookalike, lookalike_owner) = found.pop().unwrap();
    assert_ne!(lookalike, amazons, "the lookalike is the newer image");

    let resolve = |owner: Option<&str>| {
        let mut nc = node_class();
        nc.spec.ami_selector_terms = vec![AmiSelectorTerm {
            name: Some(name.clone()),
            owner: owner.map(str::to_string),
            ..Default::default()
        }];
        nc
    };
    let images = |amis: joiner_agent::cloud::ami::ResolvedAmis| -> Vec<String> {
        amis.images.into_iter().map(|i| i.id).collect()
    };
    let chosen = w.cloud.amis_for(&resolve(None)).await.unwrap();
    assert_eq!(images(chosen), [amazons]);
    let opted_in = w
        .cloud
        .amis_for(&resolve(Some(&lookalike_owner)))
        .await
        .unwrap();
    assert_eq!(images(opted_in), [lookalike]);
}

/// Templates whose inputs changed while their NodeClass did not (a NodePool's labels in the
/// user data, say) go once no launch has used them for the TTL, so EC2's per-Region quota,
/// which the emulator enforces, never fills up; a template made before the agent started
/// gets the TTL from when the agent first sees it.
#[tokio::test]
async fn unused_templates_expire_so_the_regions_quota_never_stops_launches() {
    let w = world().await;
    let (status, body) = w
        ._moto
        .request(
            "POST",
            "/moto-api/joiner-local/launch-template-quota",
            r#"{"quota": 2}"#,
        )
        .expect("reach the emulator");
    assert_eq!(status, 200, "{body}");
    let clock = ManualClock::default();
    let cloud = |clock: &ManualClock| {
        let clock = clock.clone();
        let endpoint = w.proxy.endpoint();
        async move {
            let mut o = options();
            o.clock = Arc::new(clock);
            Ec2Cloud::new(&sdk_config(&endpoint).await, o)
        }
    };
    let agent = cloud(&clock).await;
    agent
        .launch(&labelled(&w, "ttl-a", "a").await)
        .await
        .unwrap();
    agent
        .launch(&labelled(&w, "ttl-b", "b").await)
        .await
        .unwrap();
    let refused = agent
        .launch(&labelled(&w, "ttl-c", "c").await)
        .await
        .expect_err("a third template is past the quota");
    assert_eq!(
        (refused.operation.as_str(), refused.code.as_str()),
        ("ec2:CreateLaunchTemplate", "ResourceLimitExceeded"),
        "{refused}"
    );

    // Within the TTL both stay; past it, the one launched from again stays.
    agent.prune_launch_templates(&[node_class()]).await.unwrap();
    assert_eq!(cluster_templates(&w).await.len(), 2);
    clock.advance(TEMPLATE_TTL + Duration::from_secs(1));
    agent
        .launch(&labelled(&w, "ttl-a2", "a").await)
        .await
        .unwrap();
    agent.prune_launch_templates(&[node_class()]).await.unwrap();
    assert_eq!(
        cluster_templates(&w).await.len(),
        1,
        "team b's template expired"
    );
    agent
        .launch(&labelled(&w, "ttl-c2", "c").await)
        .await
        .unwrap();

    // A restarted agent finds two templates it never used: their TTL starts now.
    let restarted_clock = ManualClock::default();
    let restarted = cloud(&restarted_clock).await;
    restarted
        .prune_launch_templates(&[node_class()])
        .await
        .unwrap();
    assert_eq!(cluster_templates(&w).await.len(), 2, "kept for a TTL");
    restarted_clock.advance(TEMPLATE_TTL + Duration::from_secs(1));
    restarted
        .prune_launch_templates(&[node_class()])
        .await
        .unwrap();
    assert!(
        cluster_templates(&w).await.is_empty(),
        "unused for a TTL: gone"
    );
}

/// An on-demand launch request whose NodePool labels its nodes `team=<team>`: the label is
/// in the user data, so each team needs a template of its own.
async fn labelled(w: &World, claim: &str, team: &str) -> LaunchRequest {
    let mut r = request(w, claim, &TYPES, &[CapacityType::OnDemand]).await;
    r.labels.insert("team".into(), team.into());
    r
}

/// This cluster's launch templates, as EC2 lists them.
async fn cluster_templates(w: &World) -> Vec<String> {
    w.ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name(format!("tag:{TAG_CLUSTER}"))
                .values(CLUSTER)
                .build(),
        )
        .max_results(200)
        .send()
        .await
        .unwrap()
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect()
}
