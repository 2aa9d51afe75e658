//! Which instance types a NodePool admits: its requirements and template labels met against
//! a catalogue, one at a time, so that a pool admitting nothing can be told which of its
//! own lines emptied the set, and `minValues` counted the way the scheduler counts it.
//!
//! The provider calls this at plan time, before the cluster exists, against the one
//! region's catalogue it embeds ([`Scope::AnyRegion`]); a line of the spec is named by its
//! [`Source`], which the provider turns into an attribute path.

use crate::api::launch_policy::MinValuesPolicy;
use crate::api::NodePoolSpec;
use crate::catalog::{Catalog, InstanceType};
use crate::labels;
use crate::requirements::{Operator, Requirement, Requirements};

/// What the catalogue stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The cluster's own region and account: every requirement is judged.
    Region,
    /// One region's catalogue standing in for any region and account (a plan).
    ///
    /// A region requirement, and a zone requirement naming none of the catalogue's zones,
    /// say where the cluster runs rather than which types fit: judged here they would
    /// refuse every pool outside the catalogue's region, so they are left to the agent,
    /// which sees its own region's zones. Capacity reservations are the account's, not
    /// the catalogue's: any type with on-demand offerings may have one, so capacity type
    /// `reserved` admits what on-demand admits and the reservation labels are left to the
    /// agent, which reads the reservations its NodeClass selects.
    AnyRegion,
}

/// The line of a NodePool spec an admission step comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `spec.template.spec.requirements[i]`.
    Requirement(usize),
    /// `spec.template.metadata.labels[key]`: a label is an `In [value]` requirement.
    Label(String),
}

/// A `minValues` the admitted types do not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub source: Source,
    pub key: String,
    pub min: usize,
    /// The distinct values the admitted types do show, sorted.
    pub values: Vec<String>,
}

/// What a pool admits.
#[derive(Debug, Clone)]
pub struct Admission<'c> {
    /// Every step intersected: what prices the admitted offerings.
    pub requirements: Requirements,
    /// In catalogue order (by name).
    pub types: Vec<&'c InstanceType>,
    /// Minimums a `BestEffort` pool falls short of: it launches with fewer values.
    pub relaxed: Vec<Shortfall>,
}

/// Why a pool admits nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A requirement that does not parse.
    Invalid(String),
    /// This step left none of the `before` types the steps ahead of it allowed.
    Emptied { source: Source, before: usize },
    /// A `Strict` pool's `minValues` is not met by what the steps left.
    MinValues(Shortfall),
}

/// One step: where it comes from and the single-key requirement it adds.
fn steps(
    spec: &NodePoolSpec,
    catalog: &Catalog,
    scope: Scope,
) -> Result<Vec<(Source, Requirements)>, String> {
    let zones = match scope {
        Scope::AnyRegion => catalog.zones(),
        Scope::Region => Default::default(),
    };
    let mut out = Vec::new();
    for (i, r) in spec.template.spec.requirements.iter().enumerate() {
        let op: Operator = r.operator.parse()?;
        if scope == Scope::AnyRegion {
            let elsewhere = r.key == labels::REGION
                || (r.key == labels::ZONE
                    && matches!(op, Operator::In)
                    && !r.values.iter().any(|z| zones.contains(z)));
            if elsewhere || labels::is_reservation_label(&r.key) {
                continue;
            }
        }
        let mut req = Requirement::new(op, &r.values)?
            .with_min_values(r.min_values.map(|v| v.max(0) as usize));
        if scope == Scope::AnyRegion
            && r.key == labels::CAPACITY_TYPE
            && req.has(labels::CAPACITY_TYPE_RESERVED)
        {
            let allowed = [labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND]
                .into_iter()
                .filter(|ct| req.has(ct) || *ct == labels::CAPACITY_TYPE_ON_DEMAND)
                .map(str::to_string)
                .collect();
            req = Requirement::listed(allowed).with_min_values(req.min_values);
        }
        let mut one = Requirements::new();
        one.add(&r.key, req);
        out.push((Source::Requirement(i), one));
    }
    for (k, v) in &spec.template.metadata.labels {
        let mut one = Requirements::new();
        one.add(k, Requirement::one(v));
        out.push((Source::Label(k.clone()), one));
    }
    Ok(out)
}

/// The types `spec` admits from `catalog`, or the first line of the spec that leaves none.
pub fn admit<'c>(
    catalog: &'c Catalog,
    spec: &NodePoolSpec,
    scope: Scope,
) -> Result<Admission<'c>, Refusal> {
    let steps = steps(spec, catalog, scope).map_err(Refusal::Invalid)?;
    let mut reqs = Requirements::new();
    let mut found: Vec<&InstanceType> = catalog.types.iter().map(|t| &**t).collect();
    for (source, one) in &steps {
        reqs = reqs.intersect(one);
        let before = found.len();
        found.retain(|t| t.allowed_by(&reqs));
        if found.is_empty() {
            return Err(Refusal::Emptied {
                source: source.clone(),
                before,
            });
        }
    }
    // A BestEffort pool launches with fewer values than its minimum (and says so on the
    // NodeClaim), so there a shortfall is a note, not a refusal.
    let best_effort = MinValuesPolicy::of(spec.min_values_policy.as_deref())
        .is_ok_and(|p| p == MinValuesPolicy::BestEffort);
    let mut relaxed = Vec::new();
    for (source, one) in &steps {
        for s in one.min_values_shortfalls(found.iter().map(|t| &t.labels)) {
            let shortfall = Shortfall {
                source: source.clone(),
                key: s.key.to_string(),
                min: s.min,
                values: s.values.iter().map(|v| v.to_string()).collect(),
            };
            if !best_effort {
                return Err(Refusal::MinValues(shortfall));
            }
            relaxed.push(shortfall);
        }
    }
    Ok(Admission {
        requirements: reqs,
        types: found,
        relaxed,
    })
}
