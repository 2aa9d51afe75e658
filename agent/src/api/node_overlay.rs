//! `NodeOverlay`: a price change or extra extended resources for the instance types (and
//! offerings) its requirements select, applied to the catalogue before the scheduler,
//! consolidation and the provider's plan-time price range see it. Follows Karpenter v1.7's
//! `NodeOverlay` (`karpenter.sh/v1alpha1`): Savings Plans, Reserved Instances and enterprise
//! discounts the EC2 price list does not know (aws/karpenter-provider-aws #2259, #4136,
//! #8173), and devices a type has that EC2 does not report.
//!
//! One difference: Karpenter's overlays may select on `karpenter.sh/nodepool` and on a
//! NodePool's template labels, because its instance types are computed per NodePool. joiner
//! plans every pool against one catalogue, so an overlay selects instance types by their
//! own labels, zones and capacity types, and [`validate`] refuses other keys by name.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validate::{Errors, FieldError};
use super::Condition;
use crate::catalog::overlay::{Overlay, PriceChange};
use crate::labels;
use crate::requirements::{Operator, Requirement, Requirements};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.dev",
    version = "v1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    status = "NodeOverlayStatus",
    shortname = "overlays",
    category = "joiner",
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#,
    printcolumn = r#"{"name":"Price","type":"string","jsonPath":".spec.price"}"#,
    printcolumn = r#"{"name":"Adjustment","type":"string","jsonPath":".spec.priceAdjustment"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which offerings the overlay applies to: instance type labels
    /// (`node.kubernetes.io/instance-type`, `karpenter.k8s.aws/instance-family`, ...),
    /// `topology.kubernetes.io/zone` and `karpenter.sh/capacity-type`. Empty: every one.
    #[serde(default)]
    pub requirements: Vec<OverlayRequirement>,
    /// An absolute price in USD per hour (`"0.05"`), replacing the offering's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// A change to the offering's price: `"-0.01"`/`"+0.5"` (USD per hour) or
    /// `"-30%"`/`"+10%"`. Mutually exclusive with `price`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_adjustment: Option<String>,
    /// Extended resources the selected types have on top of what EC2 reports
    /// (`smarter-devices/fuse: "1"`); never cpu, memory, pods or ephemeral-storage.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "super::quantity_map"
    )]
    pub capacity: BTreeMap<String, String>,
    /// Precedence when overlays select the same offering (1-10000, default 0): the
    /// highest weight's price wins, ties go to the name first in alphabetical order;
    /// capacity keys merge, the higher weight winning per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// A node selector requirement (no `minValues`: an overlay selects, it does not launch).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    pub key: String,
    /// One of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Decimal digits with at most one point, neither first nor last (what Karpenter's CRD
/// pattern `^\d+(\.\d+)?$` admits).
fn decimal(s: &str) -> Option<f64> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let digits = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f)) {
        return None;
    }
    s.parse().ok().filter(|v: &f64| v.is_finite())
}

/// `price`: a non-negative decimal.
pub fn parse_price(s: &str) -> Result<PriceChange, String> {
    decimal(s)
        .map(PriceChange::Set)
        .ok_or_else(|| format!("must be a price in USD per hour such as \"0.05\", got {s:?}"))
}

/// `priceAdjustment`: `+N`, `-N`, `+N%` or `-N%` (a discount of at most 100 %).
pub fn parse_adjustment(s: &str) -> Result<PriceChange, String> {
    let bad = || {
        format!(
            "must be a signed amount (\"-0.01\", \"+0.5\") or percentage (\"-30%\", \"+10%\"), \
             got {s:?}"
        )
    };
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1.0, &s[1..]),
        Some(b'-') => (-1.0, &s[1..]),
        _ => return Err(bad()),
    };
    match rest.strip_suffix('%') {
        Some(pct) => {
            let v = decimal(pct).ok_or_else(bad)?;
            if sign < 0.0 && v > 100.0 {
                return Err(format!(
                    "a discount of more than 100 % ({s}) is not a price"
                ));
            }
            Ok(PriceChange::Percent(sign * v))
        }
        None => Ok(PriceChange::Add(sign * decimal(rest).ok_or_else(bad)?)),
    }
}

/// Keys an overlay may select on: what the catalogue knows of every offering.
pub fn selectable(key: &str) -> bool {
    labels::is_offering_label(key) && key != labels::REGION
}

/// Checks a NodeOverlay spec; every problem with its field path.
pub fn validate(spec: &NodeOverlaySpec, path: &str) -> Vec<FieldError> {
    let mut e = Errors::default();
    requirements(&mut e, &spec.requirements, path);
    price(&mut e, spec, path);
    capacity(&mut e, &spec.capacity, path);
    if spec.price.is_none() && spec.price_adjustment.is_none() && spec.capacity.is_empty() {
        e.push(
            path,
            "sets nothing: give price, priceAdjustment or capacity",
        );
    }
    if let Some(w) = spec.weight {
        if !(1..=10_000).contains(&w) {
            e.push(format!("{path}.weight"), "must be between 1 and 10000");
        }
    }
    e.0
}

/// The selector: a bounded list of requirements, each on a key the catalogue knows for
/// every offering, with an operator and values the algebra accepts.
fn requirements(e: &mut Errors, requirements: &[OverlayRequirement], path: &str) {
    if requirements.len() > 100 {
        e.push(format!("{path}.requirements"), "at most 100 requirements");
    }
    for (i, r) in requirements.iter().enumerate() {
        let p = format!("{path}.requirements[{i}]");
        if r.values.len() > super::validate::MAX_VALUES {
            e.push(
                format!("{p}.values"),
                format!("at most {} values", super::validate::MAX_VALUES),
            );
        }
        if !selectable(&r.key) {
            e.push(
                format!("{p}.key"),
                format!(
                    "{:?} is not a label the instance catalogue knows for every offering: an \
                     overlay selects by instance type labels, {} and {} (NodePool names and \
                     template labels are per pool, and joiner prices one catalogue for all \
                     pools)",
                    r.key,
                    labels::ZONE,
                    labels::CAPACITY_TYPE
                ),
            );
        }
        match r.operator.parse::<Operator>() {
            Ok(op) => {
                if let Err(m) = Requirement::new(op, &r.values) {
                    e.push(format!("{p}.values"), m);
                }
            }
            Err(_) => e.push(
                format!("{p}.operator"),
                format!("must be one of {}", crate::requirements::OPERATORS),
            ),
        }
    }
}

/// At most one of `price` and `priceAdjustment`, and whichever is set parses.
fn price(e: &mut Errors, spec: &NodeOverlaySpec, path: &str) {
    match (&spec.price, &spec.price_adjustment) {
        (Some(_), Some(_)) => e.push(
            format!("{path}.priceAdjustment"),
            "price and priceAdjustment are mutually exclusive",
        ),
        (Some(p), None) => {
            if let Err(m) = parse_price(p) {
                e.push(format!("{path}.price"), m);
            }
        }
        (None, Some(a)) => {
            if let Err(m) = parse_adjustment(a) {
                e.push(format!("{path}.priceAdjustment"), m);
            }
        }
        (None, None) => {}
    }
}

/// Extended resources only: the measured resources (cpu, memory, pods, ephemeral-storage)
/// come from the instance type and an overlay may not restate them.
fn capacity(e: &mut Errors, capacity: &BTreeMap<String, String>, path: &str) {
    if capacity.len() > 50 {
        e.push(format!("{path}.capacity"), "at most 50 extended resources");
    }
    for (k, q) in capacity {
        let p = format!("{path}.capacity[{k:?}]");
        if ["cpu", "memory", "pods", "ephemeral-storage"].contains(&k.as_str()) {
            e.push(
                p.clone(),
                format!(
                    "{k} is measured from the instance type; capacity adds extended resources only"
                ),
            );
        } else if !k.contains('/') && !k.starts_with("hugepages-") {
            e.push(
                p.clone(),
                "an extended resource name is domain-qualified (example.com/device), or \
                 hugepages-<size>",
            );
        }
        match crate::resources::parse_quantity(q) {
            Ok(v) if v >= 0.0 => {}
            Ok(_) => e.push(p, "must not be negative"),
            Err(m) => e.push(p, m),
        }
    }
}

impl NodeOverlaySpec {
    /// The requirements in the algebra's form (after [`validate`]; a bad one selects nothing).
    pub fn selector(&self) -> Requirements {
        let mut r = Requirements::new();
        for req in &self.requirements {
            let parsed = req
                .operator
                .parse::<Operator>()
                .ok()
                .and_then(|op| Requirement::new(op, &req.values).ok())
                .unwrap_or_else(|| Requirement::listed(Default::default()));
            r.add(&req.key, parsed);
        }
        r
    }

    /// The price change, if the spec sets a valid one.
    pub fn price_change(&self) -> Option<PriceChange> {
        match (&self.price, &self.price_adjustment) {
            (Some(p), None) => parse_price(p).ok(),
            (None, Some(a)) => parse_adjustment(a).ok(),
            _ => None,
        }
    }

    /// The extended resources it adds, as whole units (after [`validate`]).
    pub fn added_capacity(&self) -> BTreeMap<String, i64> {
        self.capacity
            .iter()
            .filter_map(|(k, q)| Some((k.clone(), crate::resources::parse_bytes(q).ok()?)))
            .collect()
    }
}

/// The overlay the catalogue applies, from its spec: here rather than in the catalogue, which
/// knows nothing of the API's shapes.
impl Overlay {
    /// From a spec that passed [`validate`].
    pub fn from_spec(name: &str, spec: &NodeOverlaySpec) -> Overlay {
        Overlay {
            name: name.to_string(),
            weight: spec.weight.unwrap_or(0),
            selector: spec.selector(),
            price: spec.price_change(),
            capacity: spec.added_capacity(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> NodeOverlaySpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn prices_and_adjustments_read_as_karpenter_writes_them() {
        assert_eq!(parse_price("5.00"), Ok(PriceChange::Set(5.0)));
        assert_eq!(parse_adjustment("-0.5"), Ok(PriceChange::Add(-0.5)));
        assert_eq!(parse_adjustment("+15%"), Ok(PriceChange::Percent(15.0)));
        assert_eq!(parse_adjustment("-100%"), Ok(PriceChange::Percent(-100.0)));
        for bad in ["5", "10%", "-101%", "+", "-.5", "+1e3", "--1", "+NaN%"] {
            assert!(parse_adjustment(bad).is_err(), "{bad}");
        }
        for bad in ["-1", "1.", ".5", "abc", "1e3", ""] {
            assert!(parse_price(bad).is_err(), "{bad}");
        }
        assert!((PriceChange::Percent(-30.0).apply(0.1) - 0.07).abs() < 1e-12);
        assert_eq!(PriceChange::Add(-1.0).apply(0.1), 0.0);
        assert_eq!(PriceChange::Set(0.3).apply(0.1), 0.3);
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let s = spec(serde_json::json!({
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "Maybe"},
                {"key": "team", "operator": "Exists"},
            ],
            "price": "1", "priceAdjustment": "-10%",
            "capacity": {"cpu": "1", "fuse": "1", "example.com/dev": "lots"},
            "weight": 0,
        }));
        let paths: Vec<String> = validate(&s, "spec").into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "spec.requirements[0].key",
                "spec.requirements[1].operator",
                "spec.requirements[2].key",
                "spec.priceAdjustment",
                "spec.capacity[\"cpu\"]",
                "spec.capacity[\"example.com/dev\"]",
                "spec.capacity[\"fuse\"]",
                "spec.weight",
            ]
        );
        let ok = spec(serde_json::json!({
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "priceAdjustment": "-28%", "weight": 10,
        }));
        assert_eq!(validate(&ok, "spec"), vec![]);
        assert_eq!(ok.price_change(), Some(PriceChange::Percent(-28.0)));
        let empty = spec(serde_json::json!({}));
        assert_eq!(validate(&empty, "spec")[0].path, "spec");
    }
}
