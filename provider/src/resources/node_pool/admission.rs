//! Which instance types a NodePool admits, from the embedded catalogue and price table,
//! computed at plan time (no AWS call, no cluster needed).
//!
//! The catalogue is the emulator's DescribeInstanceTypes/Offerings dump for us-east-1
//! (`agent/fixtures/ec2-instance-types.json`, 1,395 real types), priced with the agent's
//! embedded on-demand table and its Spot model; it is parsed once per provider process.
//!
//! Which types a pool admits, which line of it empties the set and whether `min_values`
//! holds is the agent's own answer ([`joiner_agent::admission::admit`]): this module only
//! puts it in attribute paths, sentences and the `admitted_instance_types` value.

use std::sync::OnceLock;

use joiner_agent::admission::{admit, Refusal, Scope, Shortfall, Source};
use joiner_agent::api::launch_policy::PriceRatio;
use joiner_agent::catalog::{CapacityType, Catalog, CatalogOptions, InstanceType};
use joiner_agent::requirements::Requirements;

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

/// The attribute a line of the spec came from, and how the plan names it.
fn source(m: &NodePoolModel, source: &Source) -> (AttributePath, String) {
    match source {
        Source::Requirement(i) => {
            let r = &m.requirements[*i];
            (
                AttributePath::new("requirement").index(*i as i64),
                format!("requirement {} {} {:?}", r.key, r.operator, r.values),
            )
        }
        Source::Label(k) => (
            AttributePath::new("labels").key(k),
            format!(
                "label {k}={}",
                m.labels.get(k).map(String::as_str).unwrap_or("")
            ),
        ),
    }
}

fn shortfall_detail(m: &NodePoolModel, s: &Shortfall) -> (AttributePath, String) {
    let (path, what) = source(m, &s.source);
    (
        path.attr("min_values"),
        format!(
            "{what} asks for at least {} distinct values of {}, but the admitted types have \
             only {} ({})",
            s.min,
            s.key,
            s.values.len(),
            s.values.join(", ")
        ),
    )
}

/// The agent's admission of the pool against the plan's catalogue, in attribute paths.
fn admitted_types<'c>(catalog: &'c Catalog, m: &NodePoolModel) -> Result<Admission<'c>, Empty> {
    match admit(catalog, &m.spec(), Scope::AnyRegion) {
        Ok(a) => {
            let relaxed = a
                .relaxed
                .iter()
                .map(|s| {
                    let (path, detail) = shortfall_detail(m, s);
                    (
                        path,
                        format!(
                            "{detail}; with min_values_policy = \"BestEffort\" its \
                             NodeClaims launch with {} and are annotated \
                             karpenter.sh/nodeclaim-min-values-relaxed=true",
                            s.values.len()
                        ),
                    )
                })
                .collect();
            Ok((a.requirements, a.types, relaxed))
        }
        Err(Refusal::Invalid(detail)) => Err(Empty {
            path: AttributePath::new("requirement"),
            detail,
        }),
        Err(Refusal::Emptied { source: s, before }) => {
            let (path, what) = source(m, &s);
            Err(Empty {
                path,
                detail: format!(
                    "the NodePool admits no instance type: {what} leaves none of the {before} \
                     types the previous requirements allowed (of {} in the catalogue)",
                    catalog.len()
                ),
            })
        }
        Err(Refusal::MinValues(s)) => {
            let (path, detail) = shortfall_detail(m, &s);
            Err(Empty { path, detail })
        }
    }
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
