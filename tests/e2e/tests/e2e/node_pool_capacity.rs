//! `joiner_node_pool`'s capacity and churn attributes through the real Terraform CLI against
//! kube-sim: static `replicas`, `headroom`, `repair`, and in `disruption` the `Balanced`
//! policy, `spot_to_spot_consolidation` and `consolidation_evictions_per_hour`. They reach
//! the NodePool object as Karpenter's (or joiner's) fields, read back and import with no
//! diff, are priced in the plan's capacity warning (on create, and when they change),
//! switching a pool between static and dynamic replaces it, and bad values are refused at
//! plan time naming their attribute.

use joiner_e2e::{MotoServer, Workspace};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

const CLUSTER: &str = "capacity";
const CAPACITY: &str = "Capacity this NodePool keeps whatever the pods";

fn provider_block(sim: &kube_sim::KubeSim) -> String {
    joiner_e2e::kubernetes_provider_block(&sim.url(), sim.ca_pem(), sim.token())
}

fn config(sim: &kube_sim::KubeSim, replicas: Option<u32>, cap: u32) -> String {
    let replicas = replicas
        .map(|r| format!("replicas = {r}"))
        .unwrap_or_default();
    format!(
        r#"{provider}
resource "joiner_node_pool" "web" {{
  cluster_name = "{CLUSTER}"
  name         = "web"
  node_class   = "default"
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["on-demand"]
  }}
  headroom {{
    cpu    = "1"
    memory = "2Gi"
    pods   = 4
  }}
  headroom {{
    nodes    = 2
    schedule = "0 8 * * mon-fri"
    duration = "10h"
  }}
  repair {{
    policy {{
      condition_type      = "Ready"
      condition_status    = "Unknown"
      toleration_duration = "10m"
    }}
  }}
  disruption {{
    consolidation_policy             = "Balanced"
    consolidate_after                = "1m"
    spot_to_spot_consolidation       = true
    consolidation_evictions_per_hour = {cap}
  }}
}}

resource "joiner_node_pool" "fixed" {{
  cluster_name = "{CLUSTER}"
  name         = "fixed"
  node_class   = "default"
  {replicas}
  limits       = {{ nodes = "5" }}
  requirement {{
    key      = "node.kubernetes.io/instance-type"
    operator = "In"
    values   = ["m5.large"]
  }}
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["on-demand"]
  }}
}}
"#,
        provider = provider_block(sim),
    )
}

fn pools(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("joiner.dev", "v1", "NodePool"),
        "nodepools",
    );
    Api::all_with(client.clone(), &ar)
}

#[test]
fn capacity_attributes_reach_the_cluster_and_are_priced_in_the_plan() {
    let moto = MotoServer::start();
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: CLUSTER.into(),
        ..Default::default()
    })
    .expect("kube-sim");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(sim.client()).unwrap();
    let tf = Workspace::new(&moto);
    tf.write_config(&config(&sim, Some(3), 30));

    // On create, each pool's capacity is said and priced, pointing at its attribute.
    let warnings = tf.plan_warnings(&[]);
    let of = |addr: &str| {
        warnings
            .iter()
            .find(|w| w.summary == CAPACITY && w.address.as_deref() == Some(addr))
            .unwrap_or_else(|| panic!("no capacity warning for {addr}: {warnings:?}"))
            .clone()
    };
    let web = of("joiner_node_pool.web");
    // Inside the first headroom block (Terraform cannot point at a block itself).
    assert!(
        web.code.as_deref().unwrap_or("").contains("cpu    = \"1\""),
        "{web}"
    );
    assert!(
        web.mentions("NodePool web headroom[0] keeps room for 4 pod(s) of 1 CPU / 2Gi: at most $"),
        "{web}"
    );
    assert!(
        web.mentions("on-demand, the cheapest admitted type that holds it all"),
        "{web}"
    );
    assert!(
        web.mentions("headroom[1] keeps 2 spare node(s) during 0 8 * * mon-fri for 10h (UTC): $"),
        "{web}"
    );
    assert!(
        web.mentions("consolidation evicts at most 30 pod(s) an hour from it (720 a day)"),
        "{web}"
    );
    let fixed = of("joiner_node_pool.fixed");
    assert_eq!(fixed.attribute().as_deref(), Some("replicas"), "{fixed}");
    assert!(
        fixed.mentions("NodePool fixed keeps 3 node(s) whatever the pods need (replicas): at least $0.288/h (3 × m5.large, on-demand"),
        "{fixed}"
    );

    tf.apply();
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
    let web = rt.block_on(pools(&client).get("web")).unwrap();
    let spec = &web.data["spec"];
    assert_eq!(spec["headroom"][0]["cpu"], "1");
    assert_eq!(spec["headroom"][0]["pods"], 4);
    assert_eq!(spec["headroom"][1]["nodes"], 2);
    assert_eq!(spec["headroom"][1]["schedule"], "0 8 * * mon-fri");
    assert_eq!(spec["repair"]["policies"][0]["conditionType"], "Ready");
    assert_eq!(spec["repair"]["policies"][0]["tolerationDuration"], "10m");
    assert_eq!(spec["disruption"]["consolidationPolicy"], "Balanced");
    assert_eq!(spec["disruption"]["spotToSpotConsolidation"], true);
    assert_eq!(spec["disruption"]["consolidationEvictionsPerHour"], 30);
    let fixed = rt.block_on(pools(&client).get("fixed")).unwrap();
    assert_eq!(fixed.data["spec"]["replicas"], 3);
    tf.import_verify(
        "joiner_node_pool.web",
        &format!("{CLUSTER}:web"),
        &["timeouts"],
    );
    tf.import_verify(
        "joiner_node_pool.fixed",
        &format!("{CLUSTER}:fixed"),
        &["timeouts"],
    );

    // Unchanged capacity is not said again; a changed cap and a smaller static pool are.
    tf.write_config(&config(&sim, Some(1), 10));
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_node_pool.fixed"), vec!["update"]);
    let warnings = tf.plan_warnings(&[]);
    let capacity: Vec<_> = warnings.iter().filter(|w| w.summary == CAPACITY).collect();
    assert_eq!(capacity.len(), 2, "{warnings:?}");
    let fixed = capacity
        .iter()
        .find(|w| w.address.as_deref() == Some("joiner_node_pool.fixed"))
        .unwrap();
    assert!(
        fixed.mentions("3 -> 1: 2 node(s) drained and removed, the least busy first"),
        "{fixed}"
    );
    let web = capacity
        .iter()
        .find(|w| w.address.as_deref() == Some("joiner_node_pool.web"))
        .unwrap();
    assert_eq!(
        web.attribute().as_deref(),
        Some("consolidation_evictions_per_hour"),
        "{web}"
    );
    assert!(!web.mentions("headroom[0]"), "headroom unchanged: {web}");
    tf.apply();
    let fixed = rt.block_on(pools(&client).get("fixed")).unwrap();
    assert_eq!(fixed.data["spec"]["replicas"], 1);

    // A static pool cannot become dynamic in place (Karpenter refuses the switch): replaced.
    tf.write_config(&config(&sim, None, 10));
    let plan = tf.plan();
    assert_eq!(
        plan.actions("joiner_node_pool.fixed"),
        vec!["delete", "create"],
        "removing replicas replaces the pool"
    );
    tf.apply();
    let fixed = rt.block_on(pools(&client).get("fixed")).unwrap();
    assert!(fixed.data["spec"]["replicas"].is_null());
    tf.plan_is_empty();
    tf.destroy();
}

#[test]
fn bad_capacity_inputs_name_their_attribute() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let cases: &[(&str, &str)] = &[
        (
            r#"headroom {
    cpu   = "1"
    nodes = 2
  }"#,
            "nodes",
        ),
        (
            r#"headroom {
    memory = "lots"
  }"#,
            "memory",
        ),
        (
            r#"headroom {
    cpu  = "1"
    pods = 0
  }"#,
            "pods",
        ),
        (
            r#"headroom {
    nodes    = 1
    schedule = "0 25 * * *"
    duration = "1h"
  }"#,
            "schedule",
        ),
        (
            r#"repair {
    policy {
      condition_type      = "Ready"
      condition_status    = "Maybe"
      toleration_duration = "10m"
    }
  }"#,
            "condition_status",
        ),
        (
            r#"repair {
    policy {
      condition_type      = "Ready"
      condition_status    = "False"
      toleration_duration = "ten minutes"
    }
  }"#,
            "toleration_duration",
        ),
        ("replicas = -1", "replicas"),
        (
            r#"replicas = 2
  weight   = 10"#,
            "weight",
        ),
        (
            r#"replicas = 2
  limits   = { cpu = "100" }"#,
            "limits",
        ),
        (
            r#"disruption {
    consolidation_evictions_per_hour = -5
  }"#,
            "consolidation_evictions_per_hour",
        ),
        (
            r#"disruption {
    consolidation_policy = "Frugal"
  }"#,
            "consolidation_policy",
        ),
    ];
    for (body, attr) in cases {
        tf.write_config(&format!(
            "resource \"joiner_node_pool\" \"x\" {{\n  cluster_name = \"c\"\n  name = \"x\"\n  node_class = \"d\"\n  {body}\n}}\n"
        ));
        let d = tf.plan_fails_with(attr, "");
        if *attr == "consolidation_policy" {
            assert!(
                d.mentions("must be one of WhenEmpty, WhenEmptyOrUnderutilized, Balanced"),
                "{d}"
            );
        }
    }
}
