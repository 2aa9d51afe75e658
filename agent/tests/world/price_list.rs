//! On-demand prices from the Region's price list: the agent, as its role under the policy
//! `joiner_agent_role` renders, reads `pricing:GetProducts` and prices its catalogue from
//! it, so a price AWS changes after the embedded table was taken is the one it weighs.
//! Without the grant (or any way to read the list) the embedded table stands and nothing
//! else changes.

use joiner_agent::api::NodeClass;
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_agent::cloud::Cloud;
use joiner_agent_world::{Opts, World};
use kube::api::Api;

/// Sets the price the local world's price list gives `instance_type` in `region`.
fn list_price(w: &World, region: &str, instance_type: &str, price: &str) {
    let (status, body) = w
        .moto
        .request(
            "POST",
            &format!("/moto-api/joiner-local/pricing/{region}"),
            &format!(r#"{{"{instance_type}": "{price}"}}"#),
        )
        .expect("reach the emulator");
    assert_eq!(status, 200, "{body}");
}

fn on_demand_price(catalog: &Catalog, instance_type: &str) -> f64 {
    let t = catalog
        .get(instance_type)
        .unwrap_or_else(|| panic!("{instance_type} in the catalogue"));
    t.offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .unwrap_or_else(|| panic!("an on-demand offering of {instance_type}"))
        .price
}

async fn catalog(w: &World) -> Catalog {
    w.node_class("default").await;
    let nc: NodeClass = Api::all(w.client.clone()).get("default").await.unwrap();
    w.cloud()
        .await
        .catalog(&nc)
        .await
        .expect("the agent's catalogue")
}

#[tokio::test]
async fn the_catalogue_prices_from_the_regions_price_list_under_the_rendered_policy() {
    let w = World::start(Opts::default()).await;
    let table = joiner_agent::catalog::prices::on_demand("us-east-1", "m5.large").unwrap();
    list_price(&w, "us-east-1", "m5.large", "0.5");
    let catalog = catalog(&w).await;
    assert_eq!(on_demand_price(&catalog, "m5.large"), 0.5);
    assert_ne!(table, 0.5);
    // A type whose listed price did not move keeps it: the list and the table agree.
    assert_eq!(
        on_demand_price(&catalog, "c5.large"),
        joiner_agent::catalog::prices::on_demand("us-east-1", "c5.large").unwrap()
    );
    let refused = w.iam_refused();
    assert!(refused.is_empty(), "refused: {refused:?}");
    let asked = w.iam_decisions()["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|d| d["action"] == "pricing:GetProducts" && d["allowed"] == true);
    assert!(asked, "the agent read the price list as its role");
}

#[tokio::test]
async fn without_the_grant_the_embedded_table_stands() {
    let w = World::start(Opts::default()).await;
    w.remove_agent_statement("PriceList").await;
    list_price(&w, "us-east-1", "m5.large", "0.5");
    let catalog = catalog(&w).await;
    assert_eq!(
        on_demand_price(&catalog, "m5.large"),
        joiner_agent::catalog::prices::on_demand("us-east-1", "m5.large").unwrap()
    );
    let refused = w.iam_refused();
    assert!(
        refused.iter().any(|r| r.starts_with("pricing:GetProducts")),
        "refused: {refused:?}"
    );
}

/// The local price list answers and refuses as the Price List Query API does (products,
/// filters, pages, MaxResults and NextToken refusals, no endpoint outside its Regions,
/// `pricing:GetProducts` under enforced IAM), checked with boto3, AWS's Python SDK, by
/// `tests/aws-local/check_pricing.py`.
#[test]
fn the_local_price_list_answers_and_refuses_as_aws_does() {
    let out = std::process::Command::new(joiner_test_support::moto_python())
        .arg(joiner_test_support::workspace_root().join("tests/aws-local/check_pricing.py"))
        .current_dir(joiner_test_support::workspace_root())
        .output()
        .expect("run tests/aws-local/check_pricing.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
