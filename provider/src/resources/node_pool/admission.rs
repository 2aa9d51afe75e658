//! Which instance types a NodePool admits, from the embedded catalogue and price table,
//! computed at plan time (no AWS call, no cluster needed).
//!
//! The catalogue is the emulator's DescribeInstanceTypes/Offerings dump for us-east-1
//! (`agent/fixtures/ec2-instance-types.json`, 1,395 real types), priced with the agent's
//! embedded on-demand table and its Spot model; it is parsed once per provider process.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use joiner_agent::api::launch_policy::{MinValuesPolicy, PriceRatio};
use joiner_agent::catalog::{CapacityType, Catalog, CatalogOptions, InstanceType};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};

use crate::model::node_pool::NodePoolModel;
use crate::protocol::prelude::*;

const DUMP: &str = include_str!("../../../../agent/fixtures/ec2-instance-types.json");
const SAMPLE: usize = 10;

pub fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        Catalog::from_dump_json(DUMP, &CatalogOptions::default())
            .expect("the embedded instance catalogue parses")
    })
}

/// What the pool admits.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    pub count: usize,
    pub sample: Vec<String>,
    pub cheapest_spot: Option<f64>,
    pub dearest_spot: Option<f64>,
    pub cheapest_on_demand: Option<f64>,
    pub dearest_on_demand: Option<f64>,
    /// The pool's candidate price bound in effect (`candidate_price_ratio`, default 2).
    pub candidate_price_ratio: String,
    /// Minimums a `BestEffort` pool cannot meet: not errors, but worth a plan warning
    /// (attribute, sentence).
    pub min_values_shortfalls: Vec<(AttributePath, String)>,
}

impl Admitted {
    pub fn to_value(&self) -> Value {
        // Prices are decimal strings ("0.0416"): a binary float does not survive Terraform's
        // JSON state round trip exactly, so a number would show as changed on every plan.
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
            ("cheapest_spot_price", p(self.cheapest_spot)),
            ("dearest_spot_price", p(self.dearest_spot)),
            ("cheapest_on_demand_price", p(self.cheapest_on_demand)),
            ("dearest_on_demand_price", p(self.dearest_on_demand)),
            (
                "candidate_price_ratio",
                Value::string(self.candidate_price_ratio.clone()),
            ),
        ])
    }

    pub fn value_type() -> Type {
        Type::object([
            ("count", Type::Number),
            ("sample", Type::list(Type::String)),
            ("cheapest_spot_price", Type::String),
            ("dearest_spot_price", Type::String),
            ("cheapest_on_demand_price", Type::String),
            ("dearest_on_demand_price", Type::String),
            ("candidate_price_ratio", Type::String),
        ])
    }
}

/// USD per hour with at most 6 decimals, trailing zeros dropped.
pub fn price_text(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Why a pool admits nothing: the attribute to point at and the sentence to show.
#[derive(Debug, Clone, PartialEq)]
pub struct Empty {
    pub path: AttributePath,
    pub detail: String,
}

/// The pool's requirements in the algebra's form: its requirement blocks plus its template
/// labels (a label is an `In [value]` requirement, as in Karpenter).
///
/// The catalogue is one region's (us-east-1). A region requirement, and a zone requirement
/// naming none of its zones, describe where the cluster runs rather than which types fit:
/// checked here they would refuse every pool outside us-east-1 (`zone In
/// [ap-southeast-1a]`), so they are left to the agent, which sees its own region's zones.
///
/// Capacity reservations are the account's, not the catalogue's: any type with on-demand
/// offerings may have one. So capacity type `reserved` admits what on-demand admits, and
/// the reservation labels (`capacity-reservation-id`, `-type`, `-interruptible`) are left
/// to the agent, which reads the reservations the node class selects.
fn steps(
    m: &NodePoolModel,
    catalog_zones: &BTreeSet<String>,
) -> Result<Vec<(AttributePath, String, Requirements)>, String> {
    let mut out = Vec::new();
    for (i, r) in m.requirements.iter().enumerate() {
        let op: Operator = r.operator.parse()?;
        let elsewhere = r.key == labels::REGION
            || (r.key == labels::ZONE
                && matches!(op, Operator::In)
                && !r.values.iter().any(|z| catalog_zones.contains(z)));
        if elsewhere || labels::is_reservation_label(&r.key) {
            continue;
        }
        let mut req = Requirement::new(op, &r.values)?
            .with_min_values(r.min_values.map(|v| v.max(0) as usize));
        if r.key == labels::CAPACITY_TYPE && req.has(labels::CAPACITY_TYPE_RESERVED) {
            let allowed: std::collections::BTreeSet<String> =
                [labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND]
                    .into_iter()
                    .filter(|ct| req.has(ct) || *ct == labels::CAPACITY_TYPE_ON_DEMAND)
                    .map(str::to_string)
                    .collect();
            req = Requirement::listed(allowed).with_min_values(req.min_values);
        }
        let mut one = Requirements::new();
        one.add(&r.key, req);
        out.push((
            AttributePath::new("requirement").index(i as i64),
            format!("requirement {} {} {:?}", r.key, r.operator, r.values),
            one,
        ));
    }
    for (k, v) in m.labels.iter() {
        let mut one = Requirements::new();
        one.add(k, Requirement::one(v));
        out.push((
            AttributePath::new("labels").key(k),
            format!("label {k}={v}"),
            one,
        ));
    }
    Ok(out)
}

fn price(t: &InstanceType, reqs: &Requirements, ct: CapacityType) -> Option<f64> {
    t.offerings
        .iter()
        .filter(|o| o.capacity_type == ct && joiner_agent::catalog::offering_allowed(o, reqs))
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

/// The cheapest admitted offering whose type holds `cpu_milli` and `memory_bytes` (its
/// allocatable before DaemonSets): name, $/h, capacity type. The plan prices headroom and
/// static replicas with it.
pub fn cheapest_fitting(
    catalog: &Catalog,
    m: &NodePoolModel,
    cpu_milli: i64,
    memory_bytes: i64,
) -> Option<(String, f64, CapacityType)> {
    let (reqs, found, _) = admitted_types(catalog, m).ok()?;
    found
        .iter()
        .filter(|t| {
            t.allocatable.cpu_milli >= cpu_milli && t.allocatable.memory_bytes >= memory_bytes
        })
        .flat_map(|t| {
            [CapacityType::Spot, CapacityType::OnDemand]
                .into_iter()
                .filter_map(|ct| price(t, &reqs, ct).map(|p| (t.name.clone(), p, ct)))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
}

/// Matches a (fully known) pool against the catalogue.
pub fn admitted(catalog: &Catalog, m: &NodePoolModel) -> Result<Admitted, Empty> {
    let (reqs, found, min_values_shortfalls) = admitted_types(catalog, m)?;
    let spot: Vec<f64> = found
        .iter()
        .filter_map(|t| price(t, &reqs, CapacityType::Spot))
        .collect();
    let od: Vec<f64> = found
        .iter()
        .filter_map(|t| price(t, &reqs, CapacityType::OnDemand))
        .collect();
    let min = |xs: &[f64]| xs.iter().copied().min_by(f64::total_cmp);
    let max = |xs: &[f64]| xs.iter().copied().max_by(f64::total_cmp);
    let mut ranked: Vec<(f64, &str)> = found
        .iter()
        .map(|t| (t.cheapest_price(&reqs).unwrap_or(f64::MAX), t.name.as_str()))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    Ok(Admitted {
        count: found.len(),
        sample: ranked
            .iter()
            .take(SAMPLE)
            .map(|(_, n)| n.to_string())
            .collect(),
        cheapest_spot: min(&spot),
        dearest_spot: max(&spot),
        cheapest_on_demand: min(&od),
        dearest_on_demand: max(&od),
        candidate_price_ratio: PriceRatio::of(m.candidate_price_ratio.as_deref())
            .unwrap_or_default()
            .to_string(),
        min_values_shortfalls,
    })
}

/// The pool's requirements, the types they admit and the `min_values` a `BestEffort` pool
/// falls short of (warnings, not errors).
type Admission<'c> = (
    Requirements,
    Vec<&'c InstanceType>,
    Vec<(AttributePath, String)>,
);

/// The pool's requirements and the types they admit, or why none.
fn admitted_types<'c>(catalog: &'c Catalog, m: &NodePoolModel) -> Result<Admission<'c>, Empty> {
    let steps = steps(m, &catalog.zones()).map_err(|e| Empty {
        path: AttributePath::new("requirement"),
        detail: e,
    })?;
    let mut reqs = Requirements::new();
    let mut found: Vec<&InstanceType> = catalog.types.iter().map(|t| &**t).collect();
    for (path, what, one) in &steps {
        reqs = reqs.intersect(one);
        let before = found.len();
        found.retain(|t| t.allowed_by(&reqs));
        if found.is_empty() {
            return Err(Empty {
                path: path.clone(),
                detail: format!(
                    "the NodePool admits no instance type: {what} leaves none of the {before} \
                     types the previous requirements allowed (of {} in the catalogue)",
                    catalog.len()
                ),
            });
        }
    }
    // minValues: enough distinct values of the key among what is left. A BestEffort pool
    // launches with fewer, so there it is a warning, not an error.
    let best_effort = MinValuesPolicy::of(m.min_values_policy.as_deref())
        .is_ok_and(|p| p == MinValuesPolicy::BestEffort);
    let mut min_values_shortfalls = Vec::new();
    for (path, what, one) in &steps {
        for (key, r) in one.iter() {
            if let Some(min) = r.min_values {
                let mut distinct: Vec<&str> = found
                    .iter()
                    .filter_map(|t| t.labels.get(key).map(String::as_str))
                    .collect();
                distinct.sort();
                distinct.dedup();
                if distinct.len() < min {
                    let detail = format!(
                        "{what} asks for at least {min} distinct values of {key}, but the \
                         admitted types have only {} ({})",
                        distinct.len(),
                        distinct.join(", ")
                    );
                    let path = path.clone().attr("min_values");
                    if best_effort {
                        min_values_shortfalls.push((
                            path,
                            format!(
                                "{detail}; with min_values_policy = \"BestEffort\" its \
                                 NodeClaims launch with {} and are annotated \
                                 karpenter.sh/nodeclaim-min-values-relaxed=true",
                                distinct.len()
                            ),
                        ));
                    } else {
                        return Err(Empty { path, detail });
                    }
                }
            }
        }
    }
    Ok((reqs, found, min_values_shortfalls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node_pool::RequirementModel;

    fn req(key: &str, op: &str, values: &[&str]) -> RequirementModel {
        RequirementModel {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn zones_and_regions_of_another_region_are_left_to_the_agent() {
        let m = |zone: &str| NodePoolModel {
            requirements: vec![
                req("node.kubernetes.io/instance-type", "In", &["m5.large"]),
                req("topology.kubernetes.io/zone", "In", &[zone]),
                req("topology.kubernetes.io/region", "In", &["ap-southeast-1"]),
            ]
            .into(),
            ..Default::default()
        };
        // A pool for Singapore plans against the us-east-1 catalogue (seed manifest 003).
        assert_eq!(admitted(catalog(), &m("ap-southeast-1a")).unwrap().count, 1);
        // A zone of the catalogue's own region is still matched against the offerings.
        let zones = catalog().zones();
        let z = zones.iter().next().expect("the catalogue has zones");
        assert_eq!(admitted(catalog(), &m(z)).unwrap().count, 1);
    }

    #[test]
    fn spot_general_purpose() {
        let m = NodePoolModel {
            requirements: vec![
                req("karpenter.sh/capacity-type", "In", &["spot", "on-demand"]),
                req(
                    "karpenter.k8s.aws/instance-category",
                    "In",
                    &["c", "m", "r"],
                ),
            ]
            .into(),
            ..Default::default()
        };
        let a = admitted(catalog(), &m).unwrap();
        assert!(a.count > 100, "{a:?}");
        assert_eq!(a.sample.len(), 10);
        assert!(a.cheapest_spot.unwrap() < a.cheapest_on_demand.unwrap());
        assert!(a.dearest_on_demand.unwrap() > a.cheapest_on_demand.unwrap());
        assert_eq!(price_text(0.0416), "0.0416");
        assert_eq!(price_text(2.0), "2");
    }

    #[test]
    fn reserved_capacity_admits_what_on_demand_admits() {
        let m = |values: &[&str]| NodePoolModel {
            requirements: vec![
                req("karpenter.sh/capacity-type", "In", values),
                req(
                    "karpenter.k8s.aws/capacity-reservation-type",
                    "In",
                    &["capacity-block"],
                ),
                req("karpenter.k8s.aws/instance-family", "In", &["m5"]),
            ]
            .into(),
            ..Default::default()
        };
        let reserved = admitted(catalog(), &m(&["reserved"])).unwrap();
        let od = admitted(catalog(), &m(&["on-demand"])).unwrap();
        assert_eq!(reserved.count, od.count);
        assert!(reserved.cheapest_spot.is_none());
        let all = admitted(catalog(), &m(&["reserved", "spot"])).unwrap();
        assert!(all.cheapest_spot.is_some() && all.cheapest_on_demand.is_some());
    }

    #[test]
    fn names_the_requirement_that_empties_the_set() {
        let m = NodePoolModel {
            requirements: vec![
                req("kubernetes.io/arch", "In", &["arm64"]),
                req("karpenter.k8s.aws/instance-family", "In", &["c5"]),
            ]
            .into(),
            ..Default::default()
        };
        let e = admitted(catalog(), &m).unwrap_err();
        assert_eq!(e.path.to_string(), "requirement[1]");
        assert!(e.detail.contains("instance-family"), "{}", e.detail);
    }

    #[test]
    fn min_values_beyond_what_is_admitted() {
        let mut r = req("karpenter.k8s.aws/instance-family", "In", &["m5", "c5"]);
        r.min_values = Some(3);
        let m = NodePoolModel {
            requirements: vec![r].into(),
            ..Default::default()
        };
        let e = admitted(catalog(), &m).unwrap_err();
        assert_eq!(e.path.to_string(), "requirement[0].min_values");
    }
}
