//! NodeOverlays applied to a catalogue: the prices the scheduler, consolidation and the
//! provider's plan-time price range compare, and the extended resources a type offers.
//!
//! Pure: a catalogue and the overlays in, a catalogue out. Types no overlay selects stay
//! shared with the input (see [`Catalog`]); a selected type is copied once.
//!
//! Precedence, as in Karpenter: overlays are taken highest weight first, then by name; an
//! offering's price is changed by the first overlay that selects it and sets a price;
//! capacity keys merge, the first overlay naming a key deciding its value. Reserved
//! offerings (priced near zero so that reservations fill first) are changed only by an
//! overlay that names `karpenter.sh/capacity-type` `reserved`: a blanket discount or a
//! fixed price must not make a paid-for reservation look dearer than the market.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{offering_allowed, CapacityType, Catalog, InstanceType};
use crate::labels;
use crate::requirements::Requirements;

/// How an overlay changes a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// Replaces the price.
    Set(f64),
    /// Adds to it (negative: a discount); the result is never below zero.
    Add(f64),
    /// Scales it by `1 + pct / 100`.
    Percent(f64),
}

impl PriceChange {
    pub fn apply(self, price: f64) -> f64 {
        match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => (price + d).max(0.0),
            PriceChange::Percent(p) => (price * (1.0 + p / 100.0)).max(0.0),
        }
    }
}

/// One overlay, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    pub name: String,
    pub weight: i32,
    pub selector: Requirements,
    pub price: Option<PriceChange>,
    pub capacity: BTreeMap<String, i64>,
}

impl Overlay {
    fn names_reserved(&self) -> bool {
        self.selector
            .get(labels::CAPACITY_TYPE)
            .and_then(|r| r.finite_values())
            .is_some_and(|v| v.contains(CapacityType::Reserved.as_str()))
    }

    /// Whether the overlay selects this offering of `it`.
    fn selects(&self, o: &super::Offering) -> bool {
        (o.capacity_type != CapacityType::Reserved || self.names_reserved())
            && offering_allowed(o, &self.selector)
    }
}

/// The overlays in the order they take precedence.
fn ordered(overlays: &[Overlay]) -> Vec<&Overlay> {
    let mut v: Vec<&Overlay> = overlays.iter().collect();
    v.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    v
}

/// `catalog` with `overlays` applied.
pub fn apply(catalog: &Catalog, overlays: &[Overlay]) -> Catalog {
    if overlays.is_empty() {
        return catalog.clone();
    }
    let ordered = ordered(overlays);
    let types = catalog
        .types
        .iter()
        .map(|t| {
            let matching: Vec<&Overlay> = ordered
                .iter()
                .copied()
                .filter(|o| t.labels_match(&o.selector))
                .collect();
            if matching.is_empty() {
                return t.clone();
            }
            let mut it: InstanceType = (**t).clone();
            let mut changed = false;
            for i in 0..it.offerings.len() {
                let o = &it.offerings[i];
                let by = matching
                    .iter()
                    .find(|ov| ov.price.is_some() && ov.selects(o))
                    .and_then(|ov| ov.price);
                if let Some(change) = by {
                    it.offerings[i].price = change.apply(it.offerings[i].price);
                    changed = true;
                }
            }
            let mut capacity: BTreeMap<&str, i64> = BTreeMap::new();
            for ov in &matching {
                for (k, v) in &ov.capacity {
                    capacity.entry(k.as_str()).or_insert(*v);
                }
            }
            for (k, v) in capacity {
                it.capacity.extended.insert(k.to_string(), v);
                it.allocatable.extended.insert(k.to_string(), v);
                changed = true;
            }
            if changed {
                Arc::new(it)
            } else {
                t.clone()
            }
        })
        .collect();
    catalog.derive(types)
}

/// Whether any overlay changes a price of `name` in `catalog` (the launch then asks
/// CreateFleet to follow the overlaid order, not EC2's own prices).
pub fn reprices(catalog: &Catalog, overlays: &[Overlay], name: &str) -> bool {
    let Some(t) = catalog.get(name) else {
        return false;
    };
    overlays.iter().any(|ov| {
        ov.price.is_some()
            && t.labels_match(&ov.selector)
            && t.offerings.iter().any(|o| ov.selects(o))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node_overlay::NodeOverlaySpec;
    use crate::catalog::{InstanceTypeRecord, KubeletSettings, Offering};

    fn t(name: &str, family: &str, prices: &[(CapacityType, f64)]) -> InstanceType {
        let record = InstanceTypeRecord {
            name: name.into(),
            vcpus: 2,
            memory_mib: 8192,
            architectures: vec!["x86_64".into()],
            hypervisor: "nitro".into(),
            bare_metal: false,
            current_generation: true,
            burstable: false,
            max_enis: 3,
            ipv4_per_eni: 10,
            gpu_count: 0,
            gpu_manufacturer: String::new(),
            gpu_name: String::new(),
            local_storage_gb: 0,
            max_pods: None,
            ..Default::default()
        };
        let mut it = InstanceType::new(
            record,
            prices
                .iter()
                .map(|(ct, p)| Offering {
                    zone: "us-east-1a".into(),
                    capacity_type: *ct,
                    price: *p,
                    reservation: None,
                })
                .collect(),
            &KubeletSettings::default(),
        );
        it.labels
            .insert(labels::INSTANCE_FAMILY.into(), family.into());
        it
    }

    fn overlay(name: &str, json: serde_json::Value) -> Overlay {
        let spec: NodeOverlaySpec = serde_json::from_value(json).unwrap();
        assert_eq!(crate::api::node_overlay::validate(&spec, "spec"), vec![]);
        Overlay::from_spec(name, &spec)
    }

    fn price(c: &Catalog, name: &str, ct: CapacityType) -> f64 {
        c.get(name)
            .unwrap()
            .offerings
            .iter()
            .find(|o| o.capacity_type == ct)
            .unwrap()
            .price
    }

    #[test]
    fn higher_weight_wins_the_price_and_capacity_merges() {
        use CapacityType::*;
        let c = Catalog::from_types(vec![
            t("m5.large", "m5", &[(Spot, 0.04), (OnDemand, 0.096)]),
            t("c5.large", "c5", &[(Spot, 0.03), (OnDemand, 0.085)]),
        ]);
        let savings_plan = overlay(
            "savings-plan",
            serde_json::json!({"weight": 10, "priceAdjustment": "-25%",
                "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "capacity": {"example.com/fuse": "1"}}),
        );
        let everything = overlay(
            "a-everything",
            serde_json::json!({"weight": 1, "priceAdjustment": "+10%",
                "capacity": {"example.com/fuse": "5", "hugepages-2Mi": "100Mi"}}),
        );
        let out = apply(&c, &[everything.clone(), savings_plan.clone()]);
        // m5 on-demand: the weight-10 overlay's -25 %, not the weight-1 overlay's +10 %.
        assert!((price(&out, "m5.large", OnDemand) - 0.072).abs() < 1e-12);
        // m5 Spot: only the blanket overlay selects it.
        assert!((price(&out, "m5.large", Spot) - 0.044).abs() < 1e-12);
        assert!((price(&out, "c5.large", OnDemand) - 0.0935).abs() < 1e-12);
        let m5 = out.get("m5.large").unwrap();
        assert_eq!(
            m5.capacity.extended["example.com/fuse"], 1,
            "weight 10 wins the key"
        );
        assert_eq!(
            m5.allocatable.extended["hugepages-2Mi"],
            100 << 20,
            "keys merge"
        );
        assert_eq!(
            out.get("c5.large").unwrap().capacity.extended["example.com/fuse"],
            5
        );
        assert!(reprices(
            &c,
            std::slice::from_ref(&savings_plan),
            "m5.large"
        ));
        assert!(!reprices(&c, &[savings_plan], "c5.large"));
        // No overlay: the very same types, shared.
        let same = apply(&c, &[]);
        assert!(Arc::ptr_eq(&same.types[0], &c.types[0]));
    }

    #[test]
    fn equal_weights_go_by_name_and_reserved_offerings_need_naming() {
        use CapacityType::*;
        let c = Catalog::from_types(vec![t(
            "m5.large",
            "m5",
            &[(Reserved, 0.0000001), (OnDemand, 0.096)],
        )]);
        let b = overlay("b", serde_json::json!({"price": "0.5"}));
        let a = overlay("a", serde_json::json!({"price": "0.2"}));
        let out = apply(&c, &[b, a]);
        assert_eq!(price(&out, "m5.large", OnDemand), 0.2, "a before b");
        assert_eq!(
            price(&out, "m5.large", Reserved),
            0.0000001,
            "reserved untouched"
        );
        let r = overlay(
            "r",
            serde_json::json!({"price": "0.01", "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]}]}),
        );
        let out = apply(&c, &[r]);
        assert_eq!(price(&out, "m5.large", Reserved), 0.01);
        assert_eq!(price(&out, "m5.large", OnDemand), 0.096);
    }
}
