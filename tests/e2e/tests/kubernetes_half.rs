//! The Kubernetes half through the real Terraform CLI: `joiner_agent`, `joiner_node_class`
//! and two `joiner_node_pool`s applied from nothing to kube-sim (reached through the
//! provider's `kubernetes {}` block; the AWS half is the emulator's), then: objects hold the
//! requested spec, empty plans, import of each resource, drift after an out-of-band patch,
//! the plan-time catalogue match and change preview, a pool that admits nothing, bad inputs
//! with attribute paths, an unreachable cluster, and destroy leaving nothing.
//!
//! kube-sim's Fargate simulation and process runner are not used here yet: the agent's pods
//! run on a Ready node the test registers, so the rollout wait is exercised for real while
//! the container is only simulated.

use joiner_e2e::{MotoServer, Workspace};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const CLUSTER: &str = "k8s-half";

fn provider_block(sim: &kube_sim::KubeSim) -> String {
    format!(
        r#"provider "joiner" {{
  region = "us-east-1"
  kubernetes {{
    host                   = "{}"
    cluster_ca_certificate = <<-PEM
{}
PEM
    token = "{}"
  }}
}}
"#,
        sim.url(),
        sim.ca_pem().trim_end(),
        sim.token()
    )
}

fn config(sim: &kube_sim::KubeSim, general_capacity: &str, extra: &str) -> String {
    format!(
        r#"{provider}
resource "joiner_agent" "this" {{
  cluster_name = "{CLUSTER}"
  queue_url    = "https://sqs.us-east-1.amazonaws.com/123456789012/{CLUSTER}"
  role_arn     = "arn:aws:iam::123456789012:role/{CLUSTER}-agent"
  log_level    = "debug"
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
        provider = provider_block(sim)
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

/// A Ready node with room for the agent's pods (stands in for the Fargate node).
async fn register_node(client: &kube::Client) {
    let nodes = api(client, "", "v1", "Node", "nodes", None);
    let node: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "fargate-ip-10-0-0-1", "labels": {
            "kubernetes.io/hostname": "fargate-ip-10-0-0-1",
            "topology.kubernetes.io/zone": "us-east-1a",
            "eks.amazonaws.com/compute-type": "fargate",
        }},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

fn price(v: &serde_json::Value) -> f64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

#[test]
fn kubernetes_half_lifecycle() {
    let moto = MotoServer::start();
    let sim = kube_sim::KubeSim::start(kube_sim::Options::default()).expect("kube-sim");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(sim.client()).unwrap();
    rt.block_on(register_node(&client));

    let tf = Workspace::new(&moto);
    tf.write_config(&config(&sim, r#""spot", "on-demand""#, ""));

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
    assert_eq!(d.data["status"]["readyReplicas"], 2, "{}", d.data["status"]);
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

    // Plan review: with live nodes in the pool, a requirement change previews the drift.
    // Each node carries the labels a node launched for this pool has (its capacity type and
    // an admitted instance category): a node missing a required label counts as drifted.
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
    tf.write_config(&config(&sim, r#""on-demand""#, ""));
    let plan = tf.plan();
    let after = plan.after("joiner_node_pool.general").unwrap();
    let preview = after["change_preview"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        preview.contains("2 of 3 live nodes become drifted"),
        "{preview}"
    );
    assert!(preview.contains("1 at a time"), "{preview}");
    assert!(
        after["admitted_instance_types"]["cheapest_spot_price"].is_null(),
        "{after}"
    );

    // A pool that admits nothing fails at plan, naming the requirement.
    tf.write_config(&config(
        &sim,
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
    tf.write_config(&config(&sim, r#""spot", "on-demand""#, ""));
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
