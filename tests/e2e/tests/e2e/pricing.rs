//! The pricing attributes through the real Terraform CLI, against kube-sim (reached
//! through the provider's `kubernetes {}` block): `joiner_node_overlay` from plan to
//! destroy, a NodePool's launch policies (`min_values_policy`, `candidate_price_ratio`), a
//! NodeClass's `capacity_reservation_selector_term`, the plan warnings they bring, and bad
//! inputs refused at their attribute.

use joiner_e2e::{MotoServer, Workspace};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

const CLUSTER: &str = "pricing";

fn provider_block(sim: &kube_sim::KubeSim) -> String {
    joiner_e2e::kubernetes_provider_block(&sim.url(), sim.ca_pem(), sim.token())
}

/// A class selecting reservations, a pool with launch policies and an overlay; `ratio`,
/// `adjustment` and `reservation_tag` vary between steps.
fn config(sim: &kube_sim::KubeSim, ratio: &str, adjustment: &str, reservation_tag: &str) -> String {
    format!(
        r#"{provider}
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
  capacity_reservation_selector_term {{
    tags = {{ team = "{reservation_tag}" }}
  }}
  capacity_reservation_selector_term {{
    id = "cr-0123456789abcdef0"
  }}
}}

resource "joiner_node_pool" "general" {{
  cluster_name          = "{CLUSTER}"
  name                  = "general"
  node_class            = joiner_node_class.default.name
  min_values_policy     = "BestEffort"
  candidate_price_ratio = "{ratio}"
  requirement {{
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["reserved", "spot", "on-demand"]
  }}
  requirement {{
    key        = "karpenter.k8s.aws/instance-family"
    operator   = "In"
    values     = ["m5", "m6i", "m7i"]
    min_values = 3
  }}
}}

resource "joiner_node_overlay" "savings_plan" {{
  cluster_name     = "{CLUSTER}"
  name             = "savings-plan"
  weight           = 10
  price_adjustment = "{adjustment}"
  capacity         = {{ "example.com/fuse" = "1" }}
  requirement {{
    key      = "karpenter.k8s.aws/instance-family"
    operator = "In"
    values   = ["m5"]
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

fn api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("joiner.dev", "v1", kind), plural);
    Api::all_with(client.clone(), &ar)
}

fn price(v: &serde_json::Value) -> f64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

#[test]
fn overlays_launch_policies_and_reservation_terms_from_plan_to_destroy() {
    let moto = MotoServer::start();
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: CLUSTER.into(),
        ..Default::default()
    })
    .expect("kube-sim");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(sim.client()).unwrap();
    let tf = Workspace::new(&moto);
    tf.write_config(&config(&sim, "1.5", "-28%", "ml"));

    // Planned: what the overlay selects, and the pool's bound, before anything exists.
    let plan = tf.plan();
    let selected =
        plan.after("joiner_node_overlay.savings_plan").unwrap()["selected_instance_types"].clone();
    assert!(selected["count"].as_i64().unwrap() > 5, "{selected}");
    assert!(selected["sample"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.as_str().unwrap().starts_with("m5.")));
    let (before, after) = (
        price(&selected["cheapest_on_demand_price_before"]),
        price(&selected["cheapest_on_demand_price_after"]),
    );
    assert!((after - before * 0.72).abs() < 1e-6, "{selected}");
    let admitted =
        plan.after("joiner_node_pool.general").unwrap()["admitted_instance_types"].clone();
    assert_eq!(admitted["candidate_price_ratio"], "1.5", "{admitted}");

    tf.apply();
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();

    // The objects hold the requested spec.
    let overlay = rt
        .block_on(api(&client, "NodeOverlay", "nodeoverlays").get("savings-plan"))
        .unwrap();
    let spec = &overlay.data["spec"];
    assert_eq!(spec["priceAdjustment"], "-28%");
    assert_eq!(spec["weight"], 10);
    assert_eq!(spec["capacity"]["example.com/fuse"], "1");
    assert_eq!(spec["requirements"][1]["values"][0], "on-demand");
    let pool = rt
        .block_on(api(&client, "NodePool", "nodepools").get("general"))
        .unwrap();
    assert_eq!(pool.data["spec"]["minValuesPolicy"], "BestEffort");
    assert_eq!(pool.data["spec"]["candidatePriceRatio"], "1.5");
    let class = rt
        .block_on(api(&client, "NodeClass", "nodeclasses").get("default"))
        .unwrap();
    let terms = &class.data["spec"]["capacityReservationSelectorTerms"];
    assert_eq!(terms[0]["tags"]["team"], "ml");
    assert_eq!(terms[1]["id"], "cr-0123456789abcdef0");

    // Import reproduces the applied state.
    for (address, id) in [
        ("joiner_node_overlay.savings_plan", "savings-plan"),
        ("joiner_node_pool.general", "general"),
        ("joiner_node_class.default", "default"),
    ] {
        tf.import_verify(address, &format!("{CLUSTER}:{id}"), &["timeouts"]);
    }

    // A policy change warns at its attribute, saying no node drifts for it; the pool's
    // prices under the cluster's overlay come as a warning of their own.
    tf.write_config(&config(&sim, "1.2", "-28%", "ml"));
    let warnings = tf.plan_warnings(&[]);
    let policy = warnings
        .iter()
        .find(|w| w.summary == "NodePool launch policy changes")
        .unwrap_or_else(|| panic!("no policy warning: {warnings:?}"));
    assert_eq!(policy.address.as_deref(), Some("joiner_node_pool.general"));
    assert_eq!(
        policy.attribute().as_deref(),
        Some("candidate_price_ratio"),
        "{policy}"
    );
    assert!(
        policy.mentions("candidate_price_ratio 1.5 -> 1.2"),
        "{policy}"
    );
    assert!(policy.mentions("No live node drifts"), "{policy}");
    let prices = warnings
        .iter()
        .find(|w| w.summary == "NodePool general prices under NodeOverlays")
        .unwrap_or_else(|| panic!("no overlay price warning: {warnings:?}"));
    assert!(prices.mentions("(savings-plan)"), "{prices}");
    let list_cheapest = price(&admitted["cheapest_on_demand_price"]);
    assert!(
        prices.mentions(&format!("(price list {}", joiner_price(list_cheapest))),
        "{prices}"
    );
    tf.apply();

    // Selecting other reservations drifts nothing, and the plan says so.
    tf.write_config(&config(&sim, "1.2", "-28%", "batch"));
    let warnings = tf.plan_warnings(&[]);
    let terms = warnings
        .iter()
        .find(|w| w.summary == "NodeClass capacity reservation selection changes")
        .unwrap_or_else(|| panic!("no reservation warning: {warnings:?}"));
    assert!(terms.mentions("No live node drifts"), "{terms}");
    assert!(
        !warnings
            .iter()
            .any(|w| w.summary == "Impact of this NodeClass change on the live cluster"),
        "{warnings:?}"
    );
    tf.apply();
    tf.plan_is_empty();

    tf.destroy();
    let left = rt
        .block_on(api(&client, "NodeOverlay", "nodeoverlays").list(&Default::default()))
        .unwrap();
    assert!(left.items.is_empty());
}

/// The provider's own price text (decimal, trailing zeros dropped).
fn joiner_price(v: f64) -> String {
    let s = format!("{v:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Bad inputs are refused at plan time, each error pointing at its attribute.
#[test]
fn pricing_bad_inputs_name_their_attribute() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let class_base = r#"role = "r"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    id = "subnet-1"
  }
  security_group_selector_term {
    id = "sg-1"
  }"#;
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "joiner_node_pool",
            r#"node_class = "d"
  min_values_policy = "Lenient""#
                .into(),
            "min_values_policy",
            "Strict, BestEffort",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  candidate_price_ratio = "0.5""#
                .into(),
            "candidate_price_ratio",
            "from 1",
        ),
        (
            "joiner_node_pool",
            r#"node_class = "d"
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["reserved", "dedicated"]
  }"#
            .into(),
            "values",
            "spot, on-demand, reserved",
        ),
        (
            "joiner_node_class",
            format!(
                r#"{class_base}
  capacity_reservation_selector_term {{
    id = "odcr-1"
  }}"#
            ),
            "id",
            "cr-",
        ),
        (
            "joiner_node_class",
            format!(
                r#"{class_base}
  capacity_reservation_selector_term {{
    owner_id = "me"
  }}"#
            ),
            "owner_id",
            "12-digit",
        ),
        (
            "joiner_node_overlay",
            r#"price_adjustment = "-150%""#.into(),
            "price_adjustment",
            "more than 100 %",
        ),
        (
            "joiner_node_overlay",
            r#"price = "1"
  price_adjustment = "-10%""#
                .into(),
            "price_adjustment",
            "mutually exclusive",
        ),
        (
            "joiner_node_overlay",
            r#"price = "1"
  requirement {
    key      = "karpenter.sh/nodepool"
    operator = "In"
    values   = ["general"]
  }"#
            .into(),
            "key",
            "one catalogue",
        ),
        (
            "joiner_node_overlay",
            r#"capacity = { cpu = "1" }"#.into(),
            "capacity",
            "extended resources only",
        ),
        (
            "joiner_node_overlay",
            r#"price = "1"
  weight = 0"#
                .into(),
            "weight",
            "10000",
        ),
    ];
    for (ty, body, attr, message) in cases {
        tf.write_config(&format!(
            "resource \"{ty}\" \"x\" {{\n  cluster_name = \"c\"\n  name = \"x\"\n  {body}\n}}\n"
        ));
        let d = tf.plan_fails_with(attr, message);
        assert!(d.mentions(message), "{ty} {attr}: {d}");
    }
}
