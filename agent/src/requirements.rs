//! The algebra of node requirements: In, NotIn, Exists, DoesNotExist, Gt, Lt, and
//! Karpenter's Gte and Lte (v1.9), which are Gt/Lt one step out on the integers.
//!
//! A requirement is kept as a set of allowed label values that is either listed
//! (`In`, `DoesNotExist`) or complemented (`NotIn`, `Exists`, `Gt`, `Lt`), plus optional
//! integer bounds and whether the label may be absent. With that shape, intersecting a
//! NodePool's requirements with a pod's node affinity and an instance type's labels is a
//! set operation, and "is anything left?" is a cheap check.
//!
//! Entry points: [`Requirement::new`], [`Requirements::intersect`],
//! [`Requirements::compatible`] (may a node with these requirements run a pod with those?),
//! [`Requirements::matches_labels`] (does a concrete node satisfy them?) and
//! [`Requirements::check_min_values`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use crate::labels;

/// A node selector operator, as in `NodeSelectorRequirement.operator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    /// `>=`: a NodePool operator only (Karpenter v1.9); Kubernetes' own selectors lack it.
    Gte,
    /// `<=`, likewise.
    Lte,
}

pub const OPERATORS: &str = "In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte";

#[cfg(test)]
thread_local! {
    /// How many times [`Requirement::new`] ran on this thread: tests hold a round's
    /// parsing of NodePools to once per requirement by it.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Operator {
    /// Whether the operator compares integers.
    pub fn is_bound(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }
}

impl FromStr for Operator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return Err(format!("must be one of {OPERATORS}")),
        })
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        })
    }
}

/// The allowed values of one label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// When true, `values` lists the *excluded* values and every other value is allowed.
    complement: bool,
    values: BTreeSet<String>,
    /// Exclusive integer bounds from `Gt` / `Lt`.
    greater_than: Option<i64>,
    less_than: Option<i64>,
    /// Whether a node without this label satisfies the requirement.
    allows_absent: bool,
    /// Karpenter's `minValues`: the launch must keep at least this many distinct values
    /// among its candidate instance types.
    pub min_values: Option<usize>,
}

impl Requirement {
    /// Builds a requirement from an operator and its values, checking the values the
    /// operator needs (none for Exists/DoesNotExist, one integer for Gt/Lt, some for In).
    pub fn new<S: AsRef<str>>(op: Operator, values: &[S]) -> Result<Requirement, String> {
        #[cfg(test)]
        PARSES.with(|n| n.set(n.get() + 1));
        let set: BTreeSet<String> = values.iter().map(|v| v.as_ref().to_string()).collect();
        let bound = || -> Result<i64, String> {
            if values.len() != 1 {
                return Err(format!("operator {op} needs exactly one integer value"));
            }
            values[0].as_ref().parse::<i64>().map_err(|_| {
                format!(
                    "operator {op} needs an integer value, got {:?}",
                    values[0].as_ref()
                )
            })
        };
        let r = match op {
            Operator::In => {
                if set.is_empty() {
                    return Err("operator In needs at least one value".into());
                }
                Requirement::listed(set)
            }
            Operator::NotIn => Requirement {
                complement: true,
                values: set,
                greater_than: None,
                less_than: None,
                allows_absent: true,
                min_values: None,
            },
            Operator::Exists | Operator::DoesNotExist => {
                if !set.is_empty() {
                    return Err(format!("operator {op} takes no values"));
                }
                if op == Operator::Exists {
                    Requirement::exists()
                } else {
                    Requirement::does_not_exist()
                }
            }
            Operator::Gt => Requirement {
                greater_than: Some(bound()?),
                ..Requirement::exists()
            },
            Operator::Lt => Requirement {
                less_than: Some(bound()?),
                ..Requirement::exists()
            },
            // Integer labels only: `>= n` is `> n-1`, `<= n` is `< n+1`.
            Operator::Gte => Requirement {
                greater_than: Some(
                    bound()?
                        .checked_sub(1)
                        .ok_or_else(|| format!("operator {op}: value out of range"))?,
                ),
                ..Requirement::exists()
            },
            Operator::Lte => Requirement {
                less_than: Some(
                    bound()?
                        .checked_add(1)
                        .ok_or_else(|| format!("operator {op}: value out of range"))?,
                ),
                ..Requirement::exists()
            },
        };
        Ok(r)
    }

    pub fn listed(values: BTreeSet<String>) -> Requirement {
        Requirement {
            complement: false,
            values,
            greater_than: None,
            less_than: None,
            allows_absent: false,
            min_values: None,
        }
    }

    pub fn one(value: &str) -> Requirement {
        Requirement::listed(BTreeSet::from([value.to_string()]))
    }

    pub fn exists() -> Requirement {
        Requirement {
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            allows_absent: false,
            min_values: None,
        }
    }

    pub fn does_not_exist() -> Requirement {
        Requirement {
            complement: false,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            allows_absent: true,
            min_values: None,
        }
    }

    pub fn with_min_values(mut self, min: Option<usize>) -> Requirement {
        self.min_values = min;
        self
    }

    fn within_bounds(&self, v: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = v.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    /// Whether a node whose label has value `v` satisfies this requirement.
    pub fn has(&self, v: &str) -> bool {
        let listed = self.values.contains(v);
        (listed != self.complement) && self.within_bounds(v)
    }

    /// Whether a node whose label is `value` (or absent) satisfies this requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => self.has(v),
            None => self.allows_absent,
        }
    }

    /// True when some label value, or the label's absence, satisfies the requirement.
    pub fn is_satisfiable(&self) -> bool {
        if self.allows_absent {
            return true;
        }
        if self.complement {
            match (self.greater_than, self.less_than) {
                (Some(g), Some(l)) => l.saturating_sub(g) > 1,
                _ => true,
            }
        } else {
            !self.values.is_empty()
        }
    }

    /// True when the label must be present with some value.
    pub fn requires_presence(&self) -> bool {
        !self.allows_absent
    }

    /// The listed values when the set is finite, for example the zones a NodeClaim may use.
    pub fn finite_values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// The single allowed value, when there is exactly one.
    pub fn single_value(&self) -> Option<&str> {
        match self.finite_values() {
            Some(v) if v.len() == 1 => v.iter().next().map(String::as_str),
            _ => None,
        }
    }

    /// Set intersection: values allowed by both.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let greater_than = match (self.greater_than, other.greater_than) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min_values = match (self.min_values, other.min_values) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let allows_absent = self.allows_absent && other.allows_absent;
        let (complement, values) = match (self.complement, other.complement) {
            (true, true) => (true, self.values.union(&other.values).cloned().collect()),
            (true, false) => (
                false,
                other
                    .values
                    .iter()
                    .filter(|v| self.has(v))
                    .cloned()
                    .collect(),
            ),
            (false, true) => (
                false,
                self.values
                    .iter()
                    .filter(|v| other.has(v))
                    .cloned()
                    .collect(),
            ),
            (false, false) => (
                false,
                self.values.intersection(&other.values).cloned().collect(),
            ),
        };
        let mut r = Requirement {
            complement,
            values,
            greater_than,
            less_than,
            allows_absent,
            min_values,
        };
        if !r.complement && (r.greater_than.is_some() || r.less_than.is_some()) {
            let kept = r
                .values
                .iter()
                .filter(|v| r.within_bounds(v))
                .cloned()
                .collect();
            r.values = kept;
            r.greater_than = None;
            r.less_than = None;
        }
        r
    }

    /// The closest single operator, for writing requirements back out.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.allows_absent) {
            (false, true) if self.values.is_empty() => Operator::DoesNotExist,
            (false, _) => Operator::In,
            (true, _) if self.greater_than.is_some() => Operator::Gt,
            (true, _) if self.less_than.is_some() => Operator::Lt,
            (true, true) => Operator::NotIn,
            (true, false) if self.values.is_empty() => Operator::Exists,
            (true, false) => Operator::NotIn,
        }
    }

    /// Operator and values in Kubernetes' `NodeSelectorRequirement` form. A requirement
    /// that needs two operators (for example `Exists` ∩ `NotIn`) gives several.
    pub fn to_selector_terms(&self) -> Vec<(Operator, Vec<String>)> {
        let mut out = Vec::new();
        if !self.complement {
            if self.values.is_empty() && self.allows_absent {
                out.push((Operator::DoesNotExist, vec![]));
            } else {
                out.push((Operator::In, self.values.iter().cloned().collect()));
            }
            return out;
        }
        if let Some(g) = self.greater_than {
            out.push((Operator::Gt, vec![g.to_string()]));
        }
        if let Some(l) = self.less_than {
            out.push((Operator::Lt, vec![l.to_string()]));
        }
        if !self.values.is_empty() {
            out.push((Operator::NotIn, self.values.iter().cloned().collect()));
        }
        if out.is_empty()
            || (!self.allows_absent && self.greater_than.is_none() && self.less_than.is_none())
        {
            out.insert(0, (Operator::Exists, vec![]));
        }
        out
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms = self.to_selector_terms();
        for (i, (op, values)) in terms.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            if values.is_empty() {
                write!(f, "{op}")?;
            } else {
                write!(f, "{op} [{}]", values.join(", "))?;
            }
        }
        Ok(())
    }
}

/// Requirements on several labels, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    pub fn new() -> Self {
        Requirements::default()
    }

    /// Every label pinned to its value, as a node's (or a template's) labels imply.
    pub fn from_labels<'a, I: IntoIterator<Item = (&'a String, &'a String)>>(labels: I) -> Self {
        let mut r = Requirements::new();
        for (k, v) in labels {
            r.add(k, Requirement::one(v));
        }
        r
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, key: &str, req: Requirement) {
        match self.0.get_mut(key) {
            Some(existing) => *existing = existing.intersect(&req),
            None => {
                self.0.insert(key.to_string(), req);
            }
        }
    }

    /// Sets the requirement on `key`, dropping the one there (where `add` intersects).
    pub fn replace(&mut self, key: &str, req: Requirement) {
        self.0.insert(key.to_string(), req);
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Requirement)> {
        self.0.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut r = self.clone();
        for (k, v) in &other.0 {
            r.add(k, v.clone());
        }
        r
    }

    /// The first key whose requirement can no longer be met, if any.
    pub fn unsatisfiable_key(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, r)| !r.is_satisfiable())
            .map(|(k, _)| k.as_str())
    }

    /// Whether a node built from `self` (a NodePool template, a NodeClaim) can run a pod
    /// that requires `pod`.
    ///
    /// A key the pod requires but `self` does not define is only acceptable when the pod
    /// tolerates the label's absence, or when the key is a well-known label whose values
    /// come from the instance type and offering. Otherwise the error says which key and why.
    pub fn compatible(&self, pod: &Requirements) -> Result<(), String> {
        match self.conflict(pod) {
            Some(c) => Err(c.to_string()),
            None => Ok(()),
        }
    }

    /// The first key on which [`Requirements::compatible`] fails, with both sides.
    pub fn conflict<'s, 'p>(&'s self, pod: &'p Requirements) -> Option<Conflict<'s, 'p>> {
        pod.0.iter().find_map(|(key, want)| {
            let have = self.0.get(key);
            let refused = match have {
                Some(have) => !have.intersect(want).is_satisfiable(),
                None => want.requires_presence() && !labels::is_well_known(key),
            };
            refused.then_some(Conflict { key, want, have })
        })
    }

    /// Whether some node described by `self` can satisfy `other`, where `self` describes the
    /// node completely: a key `self` does not mention is a label the node will not have.
    pub fn could_satisfy(&self, other: &Requirements) -> bool {
        other.0.iter().all(|(k, want)| match self.0.get(k) {
            Some(have) => have.intersect(want).is_satisfiable(),
            None => want.matches(None),
        })
    }

    /// Whether a node with exactly these labels satisfies every requirement.
    pub fn matches_labels(&self, node_labels: &BTreeMap<String, String>) -> bool {
        self.0
            .iter()
            .all(|(k, r)| r.matches(node_labels.get(k).map(String::as_str)))
    }

    /// The first requirement a node with these labels violates, for messages.
    pub fn first_mismatch(&self, node_labels: &BTreeMap<String, String>) -> Option<String> {
        self.0
            .iter()
            .find(|(k, r)| !r.matches(node_labels.get(*k).map(String::as_str)))
            .map(|(k, r)| format!("{k} {r}"))
    }

    /// Checks `minValues`: for every key that sets it, the candidates (given as label maps,
    /// one per instance type) must show at least that many distinct values.
    pub fn check_min_values<'a, I>(&self, candidates: I) -> Result<(), String>
    where
        I: IntoIterator<Item = &'a BTreeMap<String, String>> + Clone,
    {
        match self.min_values_shortfalls(candidates).next() {
            None => Ok(()),
            Some(s) => Err(format!(
                "minValues {} for {} not met: only {} value(s) available",
                s.min,
                s.key,
                s.values.len()
            )),
        }
    }

    /// Every `minValues` the candidates fall short of, lazily: the scheduler stops at the
    /// first, the plan names them all, and both count the same way.
    pub fn min_values_shortfalls<'r, 'a, I>(
        &'r self,
        candidates: I,
    ) -> impl Iterator<Item = MinValuesShortfall<'r, 'a>> + 'r
    where
        I: IntoIterator<Item = &'a BTreeMap<String, String>> + Clone + 'r,
    {
        self.0.iter().filter_map(move |(key, req)| {
            let min = req.min_values?;
            let values: BTreeSet<&'a str> = candidates
                .clone()
                .into_iter()
                .filter_map(|l| l.get(key).map(String::as_str))
                .filter(|v| req.has(v))
                .collect();
            (values.len() < min).then_some(MinValuesShortfall {
                key: key.as_str(),
                min,
                values,
            })
        })
    }
}

/// A key on which a node cannot satisfy a pod: what the pod wants, and what the node side
/// has (None: the label is not defined there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict<'s, 'p> {
    pub key: &'p str,
    pub want: &'p Requirement,
    pub have: Option<&'s Requirement>,
}

impl fmt::Display for Conflict<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Conflict { key, want, have } = self;
        match have {
            Some(have) => write!(f, "{key} {want} conflicts with {key} {have}"),
            None => write!(
                f,
                "{key} {want} is not offered: the label is not defined by the nodepool"
            ),
        }
    }
}

/// A `minValues` the candidates do not meet: its key, the minimum, and the distinct values
/// they do show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinValuesShortfall<'r, 'a> {
    pub key: &'r str,
    pub min: usize,
    pub values: BTreeSet<&'a str>,
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, r)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k} {r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: Operator, v: &[&str]) -> Requirement {
        Requirement::new(op, v).unwrap()
    }

    #[test]
    fn operators_parse_and_reject() {
        assert_eq!("Gt".parse::<Operator>().unwrap(), Operator::Gt);
        assert_eq!(
            "Equals".parse::<Operator>().unwrap_err(),
            "must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
        );
        assert!(Requirement::new(Operator::In, &[] as &[&str]).is_err());
        assert!(Requirement::new(Operator::Gt, &["x"]).is_err());
        assert_eq!("Gte".parse::<Operator>().unwrap(), Operator::Gte);
        // >= 5 is > 4; <= 5 is < 6; both written back as Gt/Lt.
        let ge = Requirement::new(Operator::Gte, &["5"]).unwrap();
        assert!(ge.has("5") && !ge.has("4"));
        assert_eq!(ge, Requirement::new(Operator::Gt, &["4"]).unwrap());
        let le = Requirement::new(Operator::Lte, &["5"]).unwrap();
        assert!(le.has("5") && !le.has("6"));
        assert!(Requirement::new(Operator::Gte, &[i64::MIN.to_string()]).is_err());
        assert!(Requirement::new(Operator::Exists, &["x"]).is_err());
    }

    #[test]
    fn membership() {
        let r = req(Operator::In, &["a", "b"]);
        assert!(r.has("a") && !r.has("c") && !r.matches(None));
        let r = req(Operator::NotIn, &["a"]);
        assert!(!r.has("a") && r.has("c") && r.matches(None));
        let r = req(Operator::Exists, &[]);
        assert!(r.has("anything") && !r.matches(None));
        let r = req(Operator::DoesNotExist, &[]);
        assert!(!r.has("x") && r.matches(None));
        let r = req(Operator::Gt, &["4"]);
        assert!(r.has("5") && !r.has("4") && !r.has("abc") && !r.matches(None));
        let r = req(Operator::Lt, &["4"]);
        assert!(r.has("3") && !r.has("4"));
    }

    #[test]
    fn intersections() {
        let i = req(Operator::In, &["a", "b", "c"]).intersect(&req(Operator::NotIn, &["b"]));
        assert_eq!(i.finite_values().unwrap().len(), 2);
        assert!(i.has("a") && !i.has("b"));
        let i = req(Operator::In, &["a"]).intersect(&req(Operator::In, &["b"]));
        assert!(!i.is_satisfiable());
        let i = req(Operator::NotIn, &["a"]).intersect(&req(Operator::DoesNotExist, &[]));
        assert!(i.is_satisfiable() && i.matches(None) && !i.has("z"));
        let i = req(Operator::Exists, &[]).intersect(&req(Operator::DoesNotExist, &[]));
        assert!(!i.is_satisfiable());
        let i = req(Operator::Gt, &["2"]).intersect(&req(Operator::Lt, &["4"]));
        assert!(i.has("3") && !i.has("4") && !i.has("2"));
        let i = req(Operator::Gt, &["3"]).intersect(&req(Operator::Lt, &["4"]));
        assert!(!i.is_satisfiable());
        let i = req(Operator::Gt, &["4"]).intersect(&req(Operator::In, &["3", "5", "6"]));
        assert_eq!(i.finite_values().unwrap().len(), 2);
        let i = req(Operator::Exists, &[]).intersect(&req(Operator::NotIn, &["a"]));
        assert!(!i.matches(None) && !i.has("a") && i.has("b"));
        assert_eq!(i.to_string(), "Exists and NotIn [a]");
        let m = req(Operator::In, &["a"]).with_min_values(Some(2));
        assert_eq!(m.intersect(&req(Operator::Exists, &[])).min_values, Some(2));
    }

    #[test]
    fn compatibility_and_undefined_keys() {
        let mut pool = Requirements::new();
        pool.add(labels::ARCH, req(Operator::In, &["amd64"]));
        let mut pod = Requirements::new();
        pod.add(labels::ARCH, req(Operator::In, &["arm64"]));
        assert!(pool
            .compatible(&pod)
            .unwrap_err()
            .contains("kubernetes.io/arch"));
        let mut pod = Requirements::new();
        pod.add("team", req(Operator::In, &["a"]));
        assert!(pool
            .compatible(&pod)
            .unwrap_err()
            .contains("not defined by the nodepool"));
        let mut pod = Requirements::new();
        pod.add("team", req(Operator::NotIn, &["a"]));
        assert!(pool.compatible(&pod).is_ok());
        let mut pod = Requirements::new();
        pod.add(labels::ZONE, req(Operator::In, &["us-east-1a"]));
        assert!(
            pool.compatible(&pod).is_ok(),
            "well-known keys come from the catalogue"
        );
    }

    #[test]
    fn labels_and_min_values() {
        let node: BTreeMap<String, String> =
            [("a".to_string(), "1".to_string())].into_iter().collect();
        let mut r = Requirements::new();
        r.add("a", req(Operator::Gt, &["0"]));
        r.add("b", req(Operator::DoesNotExist, &[]));
        assert!(r.matches_labels(&node));
        r.add("b", req(Operator::Exists, &[]));
        assert_eq!(r.unsatisfiable_key(), Some("b"));

        let mut r = Requirements::new();
        r.add(
            labels::INSTANCE_FAMILY,
            req(Operator::In, &["c5", "m5", "r5"]).with_min_values(Some(3)),
        );
        let fam = |f: &str| -> BTreeMap<String, String> {
            [(labels::INSTANCE_FAMILY.to_string(), f.to_string())]
                .into_iter()
                .collect()
        };
        let two = [fam("c5"), fam("m5"), fam("c5")];
        assert!(r
            .check_min_values(two.iter())
            .unwrap_err()
            .contains("only 2"));
        let three = [fam("c5"), fam("m5"), fam("r5")];
        assert!(r.check_min_values(three.iter()).is_ok());
    }
}
