//! `joiner_node_overlay`: a `joiner.dev/v1` NodeOverlay, a price change or extra extended
//! resources for the instance types it selects (Karpenter v1.7's NodeOverlay: Savings
//! Plans, Reserved Instances, enterprise discounts, devices EC2 does not report).
//!
//! - Validation: the agent's own `api::node_overlay::validate`, its field paths translated
//!   to attribute paths.
//! - Plan: `selected_instance_types`, the types of the embedded catalogue it selects and
//!   the cheapest on-demand price among them before and after it; an overlay selecting
//!   nothing is a warning (it changes nothing, which may be what a shared config means).
//! - Written with server-side apply; no finalizer (the agent only reads overlays).

use std::time::Duration;

use joiner_agent::api::node_overlay::NodeOverlaySpec;
use joiner_agent::api::validate::FieldError;
use joiner_agent::catalog::overlay::{self, Overlay};
use joiner_agent::catalog::{CapacityType, Catalog};
use serde_json::Value as Json;

use super::custom_object::CustomObject;
use super::node_pool::admission::{self, price_text};
use crate::context::ProviderContext;
use crate::kubernetes::{kinds, Kind};
use crate::model::node_overlay::NodeOverlayModel;
use crate::model::paths::PathMap;
use crate::protocol::prelude::*;

const SAMPLE: usize = 10;

/// The resource, a [`CustomObject`]: its lifecycle is shared, the rest of this module is the
/// NodeOverlay's own.
pub struct NodeOverlay;

pub const PATHS: PathMap = PathMap {
    dropped: &["spec"],
    renamed: &[("requirements", "requirement")],
};

/// What the overlay selects in `catalog`, as the computed attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Selected {
    pub count: usize,
    pub sample: Vec<String>,
    pub cheapest_on_demand_before: Option<f64>,
    pub cheapest_on_demand_after: Option<f64>,
}

impl Selected {
    pub fn value_type() -> Type {
        Type::object([
            ("count", Type::Number),
            ("sample", Type::list(Type::String)),
            ("cheapest_on_demand_price_before", Type::String),
            ("cheapest_on_demand_price_after", Type::String),
        ])
    }

    pub fn to_value(&self) -> Value {
        let p = |x: Option<f64>| {
            x.map(|v| Value::string(price_text(v)))
                .unwrap_or(Value::Null)
        };
        Value::object([
            ("count", Value::int(self.count as i64)),
            (
                "sample",
                Value::List(
                    self.sample
                        .iter()
                        .map(|s| Value::string(s.clone()))
                        .collect(),
                ),
            ),
            (
                "cheapest_on_demand_price_before",
                p(self.cheapest_on_demand_before),
            ),
            (
                "cheapest_on_demand_price_after",
                p(self.cheapest_on_demand_after),
            ),
        ])
    }
}

/// The types `spec` selects (by their labels, zones and capacity types) and the cheapest
/// on-demand price among them, before and after it applies.
pub fn selected(catalog: &Catalog, name: &str, spec: &NodeOverlaySpec) -> Selected {
    let ov = Overlay::from_spec(name, spec);
    let after = overlay::apply(catalog, std::slice::from_ref(&ov));
    let reqs = spec.selector();
    let od = |c: &Catalog, t: &str| c.get(t).and_then(|it| it.on_demand_price());
    let mut chosen: Vec<(f64, String)> = catalog
        .types
        .iter()
        .filter(|t| {
            t.labels_match(&reqs)
                && t.offerings
                    .iter()
                    .any(|o| joiner_agent::catalog::offering_allowed(o, &reqs))
        })
        .map(|t| (od(&after, &t.name).unwrap_or(f64::MAX), t.name.clone()))
        .collect();
    chosen.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    let min = |c: &Catalog| {
        chosen
            .iter()
            .filter_map(|(_, n)| {
                let it = c.get(n)?;
                it.offerings
                    .iter()
                    .filter(|o| {
                        o.capacity_type == CapacityType::OnDemand
                            && joiner_agent::catalog::offering_allowed(o, &reqs)
                    })
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)
            })
            .min_by(f64::total_cmp)
    };
    Selected {
        count: chosen.len(),
        sample: chosen.iter().take(SAMPLE).map(|(_, n)| n.clone()).collect(),
        cheapest_on_demand_before: min(catalog),
        cheapest_on_demand_after: min(&after),
    }
}

#[async_trait]
impl CustomObject for NodeOverlay {
    const TYPE_NAME: &'static str = "joiner_node_overlay";
    const DESCRIPTION: &'static str = "A joiner.dev/v1 NodeOverlay: a price change (Savings Plans, Reserved Instances, discounts) or extra extended resources for the instance types it selects, used by the agent's scheduler, consolidation and NodePools' plan-time prices (Karpenter v1.7 NodeOverlay).";
    const KIND: Kind = kinds::NODE_OVERLAY;
    const PATHS: &'static PathMap = &PATHS;
    const DELETE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

    type Model = NodeOverlayModel;
    type Spec = NodeOverlaySpec;

    fn attributes(schema: Schema) -> Schema {
        schema
            .attribute(Attribute::number("weight").optional().description(
                "1-10000: when overlays select the same offering the highest weight's price wins (ties: name order); capacity keys merge.",
            ))
            .attribute(Attribute::string("price").optional().description(
                "An absolute price in USD per hour (\"0.05\"); not with price_adjustment.",
            ))
            .attribute(Attribute::string("price_adjustment").optional().description(
                "A change to the price: \"-0.01\", \"+0.5\" (USD per hour) or \"-30%\", \"+10%\".",
            ))
            .attribute(Attribute::string_map("capacity").optional().description(
                "Extended resources the selected types have on top of what EC2 reports (\"example.com/fuse\" = \"1\").",
            ))
            .attribute(
                Attribute::new("selected_instance_types", Selected::value_type())
                    .computed()
                    .description("The embedded catalogue's instance types the overlay selects, and the cheapest on-demand price among them before and after it."),
            )
            .block(NestedBlock::list(
                "requirement",
                Block::new()
                    .attribute(Attribute::string("key").required().description(
                        "An instance type label, topology.kubernetes.io/zone or karpenter.sh/capacity-type.",
                    ))
                    .attribute(Attribute::string("operator").required())
                    .attribute(Attribute::string_list("values").optional()),
            ))
    }

    fn spec(m: &NodeOverlayModel) -> NodeOverlaySpec {
        m.spec()
    }

    fn from_live(
        cluster: &str,
        name: &str,
        spec: &NodeOverlaySpec,
        _obj: &Json,
    ) -> NodeOverlayModel {
        let mut m = NodeOverlayModel::from_spec(cluster, name, spec);
        m.selected_instance_types = selected(admission::catalog(), name, spec).to_value();
        m
    }

    fn in_sync(state: &NodeOverlayModel, _obj: &Json) -> bool {
        !state.selected_instance_types.is_null()
    }

    fn agent_errors(spec: &NodeOverlaySpec) -> Vec<FieldError> {
        joiner_agent::api::node_overlay::validate(spec, "spec")
    }

    /// "sets nothing" is about the whole spec; it points at price once that is known.
    fn whole_spec_at(m: &NodeOverlayModel) -> Option<(&'static str, bool)> {
        Some(("price", m.price.is_known() && m.price_adjustment.is_known()))
    }

    async fn plan(
        _ctx: &ProviderContext,
        plan: &mut Plan,
        m: &NodeOverlayModel,
    ) -> Result<(), Diagnostics> {
        if !(m.requirements.is_known() && m.price.is_known() && m.price_adjustment.is_known()) {
            plan.set_unknown("selected_instance_types");
            return Ok(());
        }
        let name = m.name.clone().unwrap_or_default();
        let s = selected(admission::catalog(), &name, &m.spec());
        if s.count == 0 {
            plan.warn(Diagnostic::warning_at(
                "requirement",
                "NodeOverlay selects no instance type",
                format!(
                    "NodeOverlay {name}: its requirements select none of the {} instance types \
                     of the catalogue, so it changes no price and adds no capacity.",
                    admission::catalog().len()
                ),
            ));
        }
        plan.planned
            .set_attr("selected_instance_types", s.to_value());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node_overlay::*;
    use crate::model::{conforms, Model};

    fn full() -> NodeOverlayModel {
        NodeOverlayModel {
            id: Some("c:sp".into()),
            cluster_name: Some("c".into()),
            name: Some("sp".into()),
            weight: Some(10),
            price: None.into(),
            price_adjustment: Some("-28%".into()).into(),
            capacity: [("example.com/fuse".to_string(), "1".to_string())].into(),
            requirements: vec![
                OverlayRequirementModel {
                    key: "karpenter.k8s.aws/instance-family".into(),
                    operator: "In".into(),
                    values: vec!["m5".into()],
                },
                OverlayRequirementModel {
                    key: "karpenter.sh/capacity-type".into(),
                    operator: "In".into(),
                    values: vec!["on-demand".into()],
                },
            ]
            .into(),
            selected_instance_types: Value::Null,
            timeouts: Value::Null,
        }
    }

    #[test]
    fn model_matches_schema_and_round_trips() {
        let r = NodeOverlay;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(NodeOverlayModel::from_value(&full().to_value()), full());
        let back = NodeOverlayModel::from_spec("c", "sp", &full().spec());
        assert_eq!(back.spec(), full().spec());
    }

    #[test]
    fn a_savings_plan_discount_shows_before_and_after() {
        let s = selected(admission::catalog(), "sp", &full().spec());
        assert!(s.count > 5, "{s:?}");
        assert!(s.sample.iter().all(|t| t.starts_with("m5.")), "{s:?}");
        let (before, after) = (
            s.cheapest_on_demand_before.unwrap(),
            s.cheapest_on_demand_after.unwrap(),
        );
        assert!((after - before * 0.72).abs() < 1e-9, "{before} -> {after}");
    }

    #[test]
    fn errors_name_their_attribute() {
        let mut m = full();
        m.price = Some("1".into()).into();
        m.requirements[0].key = "karpenter.sh/nodepool".into();
        m.capacity.insert("cpu".into(), "1".into());
        m.weight = Some(0);
        let d = NodeOverlay.validate(&m.to_value());
        let paths: Vec<String> = d
            .iter()
            .map(|d| d.path.clone().unwrap().to_string())
            .collect();
        for want in [
            "price_adjustment",
            "requirement[0].key",
            "capacity[\"cpu\"]",
            "weight",
        ] {
            assert!(paths.contains(&want.to_string()), "{want}: {paths:?}");
        }
        let mut empty = full();
        empty.price_adjustment = None.into();
        empty.capacity.clear();
        let d = NodeOverlay.validate(&empty.to_value());
        let first = d.iter().next().expect("an error");
        assert_eq!(first.path.clone().unwrap().to_string(), "price", "{d:?}");
    }
}
