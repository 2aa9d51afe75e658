//! On-demand prices per Region, through the catalogue and the scheduler: Spot history and the
//! on-demand list are compared in the Region's own currency, and a type priced only outside
//! us-east-1 is offered where it is sold.
//!
//! Each test also builds the catalogue the agent built before it knew Regions (us-east-1's
//! USD list whatever the Region) and shows the choice it made then.

use joiner_agent::catalog::prices::{Currency, OnDemandPrices};
use joiner_agent::catalog::{
    CapacityType, Catalog, CatalogOptions, Ec2Dump, OfferingRecord, SpotPrices, SpotPricing,
};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::scheduler::{schedule, Candidate, Input, Pod};
use joiner_workloads::node_pool;

const GI: i64 = 1 << 30;

/// The fixture's records of `types`, offered in `zones` (the fixture's own offerings are in
/// us-east-1; EC2 describes a type alike in every Region).
fn catalog_in(types: &[&str], zones: &[&str], spot: SpotPricing, region: &str) -> Catalog {
    let dump: Ec2Dump =
        serde_json::from_str(include_str!("../../fixtures/ec2-instance-types.json"))
            .expect("fixture parses");
    let records = dump
        .instance_types
        .into_iter()
        .filter(|r| types.contains(&r.name.as_str()))
        .collect();
    let offerings: Vec<OfferingRecord> = types
        .iter()
        .flat_map(|t| {
            zones.iter().map(|z| OfferingRecord {
                instance_type: t.to_string(),
                zone: z.to_string(),
            })
        })
        .collect();
    let options = CatalogOptions {
        spot,
        on_demand: OnDemandPrices::for_region(region),
        ..Default::default()
    };
    Catalog::from_records(records, &offerings, &options)
}

/// The cheapest candidate of the one claim a 1-vCPU pod gets from a pool that allows Spot
/// and on-demand.
fn choice(catalog: &Catalog) -> Candidate {
    let mut r = Requirements::new();
    r.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["spot", "on-demand"]).unwrap(),
    );
    let input = Input {
        pods: vec![Pod::new("default", "web-0", 1000, GI)],
        node_pools: vec![node_pool("general", r)],
        ..Default::default()
    };
    let plan = schedule(catalog, &input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.new_claims.len(), 1, "{:?}", plan.new_claims);
    plan.new_claims[0].instance_types[0].clone()
}

#[test]
fn in_beijing_spot_history_in_cny_is_weighed_against_the_cny_list() {
    // DescribeSpotPriceHistory in cn-north-1 answers in CNY. m5.large has a Spot market
    // (about 35 % of its 1.013 CNY list price); c5.large has none there, so it is on-demand
    // only, at 0.739 CNY (0.085 USD in us-east-1).
    let mut history = SpotPrices::default();
    history.insert("m5.large", "cn-north-1a", 0.3546, 1);
    history.insert("m5.large", "cn-north-1b", 0.3581, 1);
    let zones = ["cn-north-1a", "cn-north-1b"];
    let types = ["m5.large", "c5.large"];
    let spot = SpotPricing::Observed(history);

    let beijing = catalog_in(&types, &zones, spot.clone(), "cn-north-1");
    assert_eq!(beijing.on_demand.currency(), Currency::Cny);
    let c = choice(&beijing);
    assert_eq!(
        (c.instance_type.as_str(), c.capacity_type),
        ("m5.large", CapacityType::Spot),
        "Spot at 0.3546 CNY beats on-demand at 0.739 CNY: {c:?}"
    );
    assert!((c.price - 0.3546).abs() < 1e-9, "{c:?}");

    // Before: the USD list of us-east-1 against the CNY history made on-demand look four
    // times cheaper than Spot, and the agent bought c5.large on demand at 0.739 CNY.
    let before = catalog_in(&types, &zones, spot, "us-east-1");
    let c = choice(&before);
    assert_eq!(
        (c.instance_type.as_str(), c.capacity_type),
        ("c5.large", CapacityType::OnDemand),
        "{c:?}"
    );
}

#[test]
fn ningxia_has_no_table_yet_is_never_priced_in_usd() {
    // cn-northwest-1 has no embedded table: Beijing's CNY list stands in, so its CNY Spot
    // history is still compared in one currency.
    let mut history = SpotPrices::default();
    history.insert("m5.large", "cn-northwest-1a", 0.33, 1);
    let ningxia = catalog_in(
        &["m5.large", "c5.large"],
        &["cn-northwest-1a"],
        SpotPricing::Observed(history),
        "cn-northwest-1",
    );
    assert!(ningxia.on_demand.is_estimate());
    assert_eq!(ningxia.on_demand.currency(), Currency::Cny);
    let c = choice(&ningxia);
    assert_eq!(
        (c.instance_type.as_str(), c.capacity_type),
        ("m5.large", CapacityType::Spot),
        "{c:?}"
    );
    // A node of a type the catalogue lacks is priced from the same CNY list.
    assert_eq!(
        ningxia.price_of("m5.xlarge", "cn-northwest-1a", Some(CapacityType::OnDemand)),
        2.026
    );
}

#[test]
fn a_type_sold_in_govcloud_only_gets_an_offering_there() {
    // hpc7a.96xlarge is in GovCloud (US-West)'s price list and not in us-east-1's.
    let zones = ["us-gov-west-1a"];
    let gov = catalog_in(
        &["hpc7a.96xlarge"],
        &zones,
        SpotPricing::None,
        "us-gov-west-1",
    );
    let it = gov.get("hpc7a.96xlarge").expect("priced, so offered");
    assert_eq!(it.on_demand_price(), Some(8.6674));
    assert_eq!(it.offerings.len(), 1);
    assert_eq!(it.offerings[0].capacity_type, CapacityType::OnDemand);

    // Before: no us-east-1 price, no offering.
    let before = catalog_in(&["hpc7a.96xlarge"], &zones, SpotPricing::None, "us-east-1");
    assert!(before.get("hpc7a.96xlarge").is_none());
}
