//! The Kubernetes half through the real Terraform CLI: `joiner_agent`, `joiner_node_class`
//! and two `joiner_node_pool`s applied from nothing to kube-sim (reached through the
//! provider's `kubernetes {}` block; the AWS half is the emulator's), then: objects hold the
//! requested spec, the agent Running on Fargate, empty plans, import of each resource,
//! drift after an out-of-band patch, the plan-time catalogue match, the change preview as
//! a plan warning (and a note instead when the cluster cannot be asked), a pool that admits
//! nothing, bad inputs with attribute paths, an unreachable cluster, and destroy leaving
//! nothing.
//!
//! The agent lands on Fargate as in a real groupless cluster: a `joiner_fargate_profile`
//! selects its namespace, and kube-sim (reading the profiles from the emulator) gives each
//! agent pod a Fargate node. kube-sim's process runner is not used: the container is
//! simulated, while the provider's rollout wait is exercised for real.

use crate::common;

use common::{eks_with_fargate_role, EksFixture};
use joiner_e2e::{Aws, MotoServer, Workspace};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const CLUSTER: &str = "k8s-half";
/// The agent's image as a private mirror holds it, pinned by digest.
const AGENT_REPOSITORY: &str = "123456789012.dkr.ecr.us-east-1.amazonaws.com/joiner/joiner-agent";
const AGENT_DIGEST: &str =
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn provider_block(sim: &kube_sim::KubeSim) -> String {
    joiner_e2e::kubernetes_provider_block(&sim.url(), sim.ca_pem(), sim.token())
}

fn config(
    sim: &kube_sim::KubeSim,
    fargate: &EksFixture,
    general_capacity: &str,
    extra: &str,
) -> String {
    format!(
        r#"{provider}
resource "joiner_fargate_profile" "agent" {{
  cluster_name           = "{CLUSTER}"
  name                   = "joiner"
  pod_execution_role_arn = "{role}"
  subnet_ids             = [{subnets}]
  selector {{
    namespace = "joiner"
  }}
}}

resource "joiner_agent" "this" {{
  cluster_name = "{CLUSTER}"
  queue_url    = "https://sqs.us-east-1.amazonaws.com/123456789012/{CLUSTER}"
  role_arn     = "arn:aws:iam::123456789012:role/{CLUSTER}-agent"
  image        = "{AGENT_REPOSITORY}:0.1.0"
  image_digest = "{AGENT_DIGEST}"
  log_level    = "debug"
  depends_on   = [joiner_fargate_profile.agent]
}}

resource "joiner_node_class" "default" {{
  cluster_name = "{CLUSTER}"
  name         = "default"
  role         = "{CLUSTER}-node"
  ami_selector_term {{
    alias = "al2023@latest"
  }}
  subnet_selector_term {{
    tags = {{ "joiner.dev/discovery" = "{CLUSTER}" }}
  }}
  security_group_selector_term {{
    tags = {{ "joiner.dev/discovery" = "{CLUSTER}" }}
  }}
  block_device_mapping {{
    device_name = "/dev/xvda"
    root_volume = true
    volume_size = "20Gi"
    volume_type = "gp3"
  }}
  tags = {{ team = "platform" }}
  depends_on = [joiner_agent.this]
}}

resource "joiner_node_pool" "general" {{
  cluster_name = "{CLUSTER}"
  name         = "general"
  node_class   = joiner_node_class.default.name
  weight       = 10
  labels       = {{ team = "platform" }}
  rebalance    = "replace"
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = [{general_capacity}]
  }}
  requirement {{
    key        = "karpenter.k8s.aws/instance-category"
    operator   = "In"
    values     = ["c", "m", "r"]
    min_values = 2
  }}
  limits = {{ cpu = "1000", memory = "1000Gi" }}
  disruption {{
    consolidation_policy = "WhenEmptyOrUnderutilized"
    consolidate_after    = "30s"
    budget {{
      nodes = "10%"
    }}
    budget {{
      nodes    = "0"
      schedule = "0 9 * * mon-fri"
      duration = "8h"
      reasons  = ["Underutilized"]
    }}
  }}
}}

resource "joiner_node_pool" "critical" {{
  cluster_name = "{CLUSTER}"
  name         = "critical"
  node_class   = joiner_node_class.default.name
  weight       = 50
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["on-demand"]
  }}
  taint {{
    key    = "critical"
    value  = "true"
    effect = "NoSchedule"
  }}
}}
{extra}
"#,
        provider = provider_block(sim),
        role = fargate.role_arn,
        subnets = fargate
            .subnets
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn price(v: &serde_json::Value) -> f64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

#[test]
fn kubernetes_half_lifecycle() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let fargate = eks_with_fargate_role(&aws, CLUSTER, &format!("{CLUSTER}-fargate"), 40);
    // kube-sim reads the cluster's Fargate profiles from the emulator.
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: CLUSTER.into(),
        aws_endpoint: Some(moto.endpoint()),
        ..Default::default()
    })
    .expect("kube-sim");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(sim.client()).unwrap();

    let tf = Workspace::new(&moto);
    tf.write_config(&config(&sim, &fargate, r#""spot", "on-demand""#, ""));

    // Planned without touching the cluster: the catalogue match is in the plan.
    let plan = tf.plan();
    let admitted =
        plan.after("joiner_node_pool.general").unwrap()["admitted_instance_types"].clone();
    assert!(admitted["count"].as_i64().unwrap() > 50, "{admitted}");
    assert!(
        price(&admitted["cheapest_spot_price"]) < price(&admitted["cheapest_on_demand_price"]),
        "{admitted}"
    );
    assert_eq!(admitted["sample"].as_array().unwrap().len(), 10);

    tf.apply();
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // The objects hold the requested spec.
    let pools = api(&client, "joiner.dev", "v1", "NodePool", "nodepools", None);
    let general = rt.block_on(pools.get("general")).unwrap();
    let spec = &general.data["spec"];
    assert_eq!(spec["weight"], 10);
    // The rebalance opt-in is the pool object's annotation (what the agent reads), not the
    // node template's.
    assert_eq!(
        general.metadata.annotations.clone().unwrap_or_default()["joiner.dev/rebalance"],
        "replace"
    );
    assert!(spec["template"]["metadata"]["annotations"]["joiner.dev/rebalance"].is_null());
    assert_eq!(spec["template"]["spec"]["nodeClassRef"]["name"], "default");
    assert_eq!(spec["template"]["spec"]["requirements"][1]["minValues"], 2);
    assert_eq!(
        spec["disruption"]["budgets"][1]["schedule"],
        "0 9 * * mon-fri"
    );
    assert_eq!(spec["limits"]["memory"], "1000Gi");
    let managers: Vec<String> = general
        .metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(managers.contains(&"joiner".to_string()), "{managers:?}");
    let critical = rt.block_on(pools.get("critical")).unwrap();
    assert_eq!(
        critical.data["spec"]["template"]["spec"]["taints"][0]["key"],
        "critical"
    );
    let classes = api(
        &client,
        "joiner.dev",
        "v1",
        "NodeClass",
        "nodeclasses",
        None,
    );
    let class = rt.block_on(classes.get("default")).unwrap();
    assert_eq!(
        class.data["spec"]["metadataOptions"]["httpTokens"],
        "required"
    );
    assert_eq!(
        class.data["spec"]["metadataOptions"]["httpPutResponseHopLimit"],
        1
    );
    assert_eq!(class.data["spec"]["role"], format!("{CLUSTER}-node"));
    let deployments = api(
        &client,
        "apps",
        "v1",
        "Deployment",
        "deployments",
        Some("joiner"),
    );
    let d = rt.block_on(deployments.get("joiner-agent")).unwrap();
    assert_eq!(d.data["spec"]["replicas"], 2);
    assert_eq!(
        d.data["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("{AGENT_REPOSITORY}@{AGENT_DIGEST}"),
        "the pinned image runs by digest"
    );
    assert_eq!(d.data["status"]["readyReplicas"], 2, "{}", d.data["status"]);
    // The agent runs on Fargate: each of its pods is Running on a Fargate node.
    let pods = api(&client, "", "v1", "Pod", "pods", Some("joiner"));
    let nodes = api(&client, "", "v1", "Node", "nodes", None);
    let agent_pods = rt.block_on(pods.list(&Default::default())).unwrap().items;
    let running: Vec<&DynamicObject> = agent_pods
        .iter()
        .filter(|p| p.data["status"]["phase"] == "Running")
        .collect();
    assert_eq!(running.len(), 2, "{agent_pods:?}");
    for p in running {
        assert_eq!(
            p.data["spec"]["schedulerName"], "fargate-scheduler",
            "{:?}",
            p.data
        );
        let node_name = p.data["spec"]["nodeName"].as_str().unwrap();
        let node = rt.block_on(nodes.get(node_name)).unwrap();
        assert_eq!(
            node.metadata.labels.as_ref().unwrap()["eks.amazonaws.com/compute-type"],
            "fargate",
            "agent pod {:?} is on {node_name}, not a Fargate node",
            p.metadata.name
        );
    }
    let priority_classes = api(
        &client,
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        None,
    );
    let pc = rt
        .block_on(priority_classes.get("joiner-agent-critical"))
        .unwrap();
    assert_eq!(
        d.data["spec"]["template"]["spec"]["priorityClassName"],
        "joiner-agent-critical"
    );
    assert!(pc.data["value"].as_i64().unwrap() > 0, "{}", pc.data);
    let sas = api(
        &client,
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        Some("joiner"),
    );
    let sa = rt.block_on(sas.get("joiner-agent")).unwrap();
    assert_eq!(
        sa.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"],
        format!("arn:aws:iam::123456789012:role/{CLUSTER}-agent")
    );

    // Import of each resource reproduces the applied state.
    tf.import_verify(
        "joiner_node_pool.general",
        &format!("{CLUSTER}:general"),
        &["timeouts"],
    );
    tf.import_verify(
        "joiner_node_pool.critical",
        &format!("{CLUSTER}:critical"),
        &["timeouts"],
    );
    tf.import_verify(
        "joiner_node_class.default",
        &format!("{CLUSTER}:default"),
        &["timeouts"],
    );
    tf.import_verify(
        "joiner_agent.this",
        &format!("{CLUSTER}:joiner"),
        &["timeouts"],
    );

    // Drift: an out-of-band edit shows in the next plan and apply restores it.
    rt.block_on(pools.patch(
        "general",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"weight": 99}})),
    ))
    .unwrap();
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_node_pool.general"), vec!["update"]);
    assert_eq!(
        plan.after("joiner_node_pool.general").unwrap()["weight"],
        10
    );
    tf.apply();
    let general = rt.block_on(pools.get("general")).unwrap();
    assert_eq!(general.data["spec"]["weight"], 10);
    tf.refresh_plan_is_empty();

    // Plan review: with live nodes in the pool, a requirement change previews its impact
    // as a plan warning. Each node carries the labels a node launched for this pool has
    // (its capacity type and an admitted instance category): a node whose labels no
    // longer satisfy the requirements counts as drifted.
    let nodes = api(&client, "", "v1", "Node", "nodes", None);
    for (i, ct) in ["spot", "spot", "on-demand"].iter().enumerate() {
        let node: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("ip-10-1-0-{i}"), "labels": {"karpenter.sh/nodepool": "general", "karpenter.sh/capacity-type": ct, "karpenter.k8s.aws/instance-category": "m"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })).unwrap();
        rt.block_on(nodes.create(&PostParams::default(), &node))
            .unwrap();
    }
    // A pod pinned to spot capacity, on a node that drifts: no node of the new pool fits it.
    let pods = api(&client, "", "v1", "Pod", "pods", Some("default"));
    let pinned: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "batch", "namespace": "default"},
        "spec": {"nodeName": "ip-10-1-0-0",
                 "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                 "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    rt.block_on(pods.create(&PostParams::default(), &pinned))
        .unwrap();
    tf.write_config(&config(&sim, &fargate, r#""on-demand""#, ""));
    const IMPACT: &str = "Impact of this NodePool change on the live cluster";
    // What a reviewer reads: Terraform prints the provider's warning under the plan.
    let shown = tf.terraform(&["plan", "-no-color", "-input=false"]);
    assert!(shown.success(), "{shown}");
    let text = shown
        .stdout
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(text.contains(&format!("Warning: {IMPACT}")), "{shown}");
    assert!(
        text.contains("NodePool general: 2 of 3 live nodes become drifted"),
        "{shown}"
    );
    // The same warning, machine-readable: its resource, the attribute it points at, and
    // the drift count, budget pacing and stranded pod.
    let warnings = tf.plan_warnings(&[]);
    let impact: Vec<_> = warnings.iter().filter(|w| w.summary == IMPACT).collect();
    assert_eq!(impact.len(), 1, "only the changed pool warns: {warnings:?}");
    let w = impact[0];
    assert_eq!(
        w.address.as_deref(),
        Some("joiner_node_pool.general"),
        "{w}"
    );
    assert_eq!(w.attribute().as_deref(), Some("values"), "{w}");
    assert!(
        w.code.as_deref().unwrap_or("").contains("\"on-demand\""),
        "{w}"
    );
    assert!(
        w.mentions(
            "2 of 3 live nodes become drifted (karpenter.sh/capacity-type=spot no longer satisfies"
        ),
        "{w}"
    );
    assert!(
        w.mentions("replaced 1 at a time (budget nodes=10%): 2 round(s)"),
        "{w}"
    );
    assert!(
        w.mentions("1 pod(s) would become unschedulable: default/batch (nodeSelector karpenter.sh/capacity-type=spot is excluded"),
        "{w}"
    );
    // The preview is not state: the planned values carry no trace of it.
    let plan = tf.plan();
    let after = plan.after("joiner_node_pool.general").unwrap();
    assert!(after.get("change_preview").is_none(), "{after}");
    assert!(
        after["admitted_instance_types"]["cheapest_spot_price"].is_null(),
        "{after}"
    );
    // An unreachable cluster at plan time is a note, not an error: the plan still succeeds.
    let dead =
        config(&sim, &fargate, r#""on-demand""#, "").replace(&sim.url(), "https://127.0.0.1:9");
    tf.write_config(&dead);
    let warnings = tf.plan_warnings(&["-refresh=false"]);
    let note = warnings
        .iter()
        .find(|w| w.summary == "NodePool change impact not previewed")
        .unwrap_or_else(|| panic!("no skipped-preview note: {warnings:?}"));
    assert_eq!(
        note.address.as_deref(),
        Some("joiner_node_pool.general"),
        "{note}"
    );
    assert!(note.mentions("could not be asked at plan time"), "{note}");
    assert!(note.mentions("127.0.0.1:9"), "{note}");
    assert!(
        !warnings.iter().any(|w| w.summary == IMPACT),
        "{warnings:?}"
    );

    // A pool that admits nothing fails at plan, naming the requirement.
    tf.write_config(&config(
        &sim,
        &fargate,
        r#""spot""#,
        r#"
resource "joiner_node_pool" "nothing" {
  cluster_name = "k8s-half"
  name         = "nothing"
  node_class   = "default"
  requirement {
    key      = "kubernetes.io/arch"
    operator = "In"
    values   = ["arm64"]
  }
  requirement {
    key      = "karpenter.k8s.aws/instance-family"
    operator = "In"
    values   = ["c5"]
  }
}
"#,
    ));
    let r = tf.terraform(&["plan", "-no-color", "-input=false"]);
    assert!(!r.success(), "{r}");
    let out = r.output();
    assert!(out.contains("NodePool admits no instance type"), "{out}");
    assert!(
        out.contains("karpenter.k8s.aws/instance-family In [\"c5\"]"),
        "{out}"
    );

    // Destroy honours the agent's finalizer: the pool's delete waits until it is released
    // (here by a stand-in for the agent, once the pool is marked for deletion).
    rt.block_on(pools.patch(
        "critical",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["joiner.dev/termination"]}})),
    ))
    .unwrap();
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let agent = {
        let pools = pools.clone();
        let released = released.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                for _ in 0..600 {
                    if let Ok(Some(p)) = pools.get_opt("critical").await {
                        if p.metadata.deletion_timestamp.is_some() {
                            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                            pools
                                .patch(
                                    "critical",
                                    &PatchParams::default(),
                                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                                )
                                .await
                                .unwrap();
                            released.store(true, std::sync::atomic::Ordering::SeqCst);
                            return;
                        }
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            })
        })
    };

    // Destroy leaves nothing.
    tf.write_config(&config(&sim, &fargate, r#""spot", "on-demand""#, ""));
    tf.destroy();
    // Read before joining the stand-in: destroy must not have returned until it released.
    let released_before_destroy_returned = released.load(std::sync::atomic::Ordering::SeqCst);
    agent.join().unwrap();
    assert!(
        released_before_destroy_returned,
        "destroy returned before the finalizer was released"
    );
    assert!(rt.block_on(pools.get_opt("general")).unwrap().is_none());
    assert!(rt.block_on(pools.get_opt("critical")).unwrap().is_none());
    assert!(rt.block_on(classes.get_opt("default")).unwrap().is_none());
    assert!(rt
        .block_on(deployments.get_opt("joiner-agent"))
        .unwrap()
        .is_none());
    assert!(rt
        .block_on(priority_classes.get_opt("joiner-agent-critical"))
        .unwrap()
        .is_none());
}

/// Bad inputs are refused at plan time, each error pointing at its attribute.
#[test]
fn bad_inputs_name_their_attribute() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let cases: &[(&str, &str, &str)] = &[
        (
            "joiner_node_pool",
            r#"node_class = "d"
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "Maybe"
    values   = ["spot"]
  }"#,
            "operator",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  weight = 500"#,
            "weight",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  expire_after = "10d""#,
            "expire_after",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  taint {
    key    = "k"
    effect = "Sometimes"
  }"#,
            "effect",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  limits = { cpu = "lots" }"#,
            "limits",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  disruption {
    consolidation_policy = "Always"
  }"#,
            "consolidation_policy",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  disruption {
    consolidation_policy = "WhenUnderutilized"
  }"#,
            "consolidation_policy",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  disruption {
    expire_after = "720h"
  }"#,
            "expire_after",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  requirement {
    key      = "karpenter.k8s.aws/instance-gpu-memry"
    operator = "Gt"
    values   = ["16000"]
  }"#,
            "key",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  rebalance       = "replace"
  rebalance_limit = "often""#,
            "rebalance_limit",
        ),
        (
            "joiner_node_class",
            r#"role = "r"
  ami_selector_term {
    alias = "windows@latest"
  }
  subnet_selector_term {
    id = "subnet-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }"#,
            "alias",
        ),
        (
            "joiner_node_class",
            r#"role = "r"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    id = "vpc-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }"#,
            "id",
        ),
        (
            "joiner_node_class",
            r#"role = "r"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    id = "subnet-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }
  metadata_options {
    http_tokens = "sometimes"
  }"#,
            "http_tokens",
        ),
        (
            "joiner_node_class",
            r#"role = "r"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    id = "subnet-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }
  block_device_mapping {
    device_name = "/dev/xvda"
    volume_type = "gp9"
  }"#,
            "volume_type",
        ),
        (
            "joiner_node_class",
            r#"role = "r"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    id = "subnet-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }
  kubelet {
    max_pods = 0
  }"#,
            "max_pods",
        ),
        ("joiner_agent", r#"replicas = 0"#, "replicas"),
        ("joiner_agent", r#"log_level = "loud""#, "log_level"),
        ("joiner_agent", r#"namespace = "Joiner_NS""#, "namespace"),
        ("joiner_agent", r#"role_arn = "not-an-arn""#, "role_arn"),
        ("joiner_agent", r#"env = { "1BAD" = "x" }"#, "env"),
        (
            "joiner_agent",
            r#"image_digest = "sha256:abc""#,
            "image_digest",
        ),
        (
            "joiner_agent",
            r#"image = "r@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  image_digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef""#,
            "image_digest",
        ),
    ];
    for (ty, body, attr) in cases {
        let name = if *ty == "joiner_agent" {
            ""
        } else {
            "name = \"x\""
        };
        tf.write_config(&format!(
            "resource \"{ty}\" \"x\" {{\n  cluster_name = \"c\"\n  {name}\n  {body}\n}}\n"
        ));
        tf.plan_fails_with(attr, "");
    }
    // An AL2 alias, which Karpenter still accepts: refused with the reason (no image exists
    // for a supported Kubernetes version), not launched and left failing.
    tf.write_config(
        r#"resource "joiner_node_class" "x" {
  cluster_name = "c"
  name         = "x"
  role         = "r"
  ami_selector_term {
    alias = "al2@latest"
  }
  subnet_selector_term {
    id = "subnet-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }
}
"#,
    );
    tf.plan_fails_with("alias", "stopped publishing Amazon Linux 2 node images");
}

/// An unreachable cluster: a clear error naming the endpoint and the cause, nothing in state.
#[test]
fn unreachable_cluster_is_a_clear_error() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    tf.write_config(
        r#"provider "joiner" {
  region = "us-east-1"
  kubernetes {
    host  = "https://127.0.0.1:9"
    token = "t"
  }
}
resource "joiner_node_pool" "p" {
  cluster_name = "c"
  name         = "p"
  node_class   = "d"
}
"#,
    );
    let d = tf.apply_fails_with("https://127.0.0.1:9");
    assert!(d.mentions("Kubernetes API unreachable"), "{d}");
    assert!(
        d.mentions("onnection refused") || d.mentions("connect"),
        "{d}"
    );
    assert!(
        tf.state().addresses().is_empty(),
        "{:?}",
        tf.state().addresses()
    );
}
