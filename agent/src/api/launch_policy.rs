//! A NodePool's launch policies: how far a NodeClaim's candidate list may be cut or
//! stretched. Two fields, read here once so the scheduler, the agent's validation and the
//! provider's plan agree on their meaning and defaults.
//!
//! - `minValuesPolicy`: Karpenter v1.6's `--min-values-policy` (`Strict` or `BestEffort`).
//!   Karpenter makes it one global flag; here it is per NodePool, because pools differ in
//!   what a missed minimum costs: a Spot pool that asks for five families would rather not
//!   launch than launch undiversified, while a batch pool would rather run. A global flag is
//!   the same setting on every pool, and the pool is where Terraform reviews it.
//! - `candidatePriceRatio`: the dearest candidate a claim may list, as a multiple of its
//!   cheapest of the same capacity type (default 2). Karpenter has no such bound: its claims
//!   keep up to 60 types up to the dearest that fits, and when the cheap ones are short
//!   CreateFleet takes whatever is left. Compared within a capacity type, so a Spot claim's
//!   on-demand fallback (about three times the Spot price) is not cut.

use std::fmt;

/// What a launch does when a `minValues` requirement cannot be met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MinValuesPolicy {
    /// The pool does not plan the pod (another pool, or none, takes it).
    #[default]
    Strict,
    /// The pool launches with as many values as there are, and says so on the NodeClaim.
    BestEffort,
}

impl MinValuesPolicy {
    pub const VALUES: &'static str = "Strict, BestEffort";

    pub fn parse(s: &str) -> Result<MinValuesPolicy, String> {
        match s {
            "Strict" => Ok(MinValuesPolicy::Strict),
            "BestEffort" => Ok(MinValuesPolicy::BestEffort),
            _ => Err(format!("must be one of {}", Self::VALUES)),
        }
    }

    /// The policy a spec's field asks for (unset: `Strict`, Karpenter's default).
    pub fn of(field: Option<&str>) -> Result<MinValuesPolicy, String> {
        field.map_or(Ok(MinValuesPolicy::Strict), MinValuesPolicy::parse)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MinValuesPolicy::Strict => "Strict",
            MinValuesPolicy::BestEffort => "BestEffort",
        }
    }
}

/// The NodeClaim annotation Karpenter sets when the scheduler relaxed a requirement's
/// `minValues` to launch it (`"true"`), or kept every one (`"false"`).
pub const MIN_VALUES_RELAXED_ANNOTATION: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// The candidate price bound: a claim lists types priced at most this many times its
/// cheapest candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriceRatio(pub f64);

impl Default for PriceRatio {
    /// Twice the cheapest: room for the next size or family when the cheapest is short, but
    /// no GPU or `metal` node for CPU pods at many times the price.
    fn default() -> Self {
        PriceRatio(2.0)
    }
}

impl fmt::Display for PriceRatio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = format!("{:.3}", self.0);
        f.write_str(s.trim_end_matches('0').trim_end_matches('.'))
    }
}

impl PriceRatio {
    /// Largest ratio accepted: beyond it the bound would keep everything anyway (the
    /// catalogue's prices span about 10^5).
    pub const MAX: f64 = 100_000.0;

    /// A decimal string of at least 1 (`"2"`, `"1.5"`).
    pub fn parse(s: &str) -> Result<PriceRatio, String> {
        let ok = !s.is_empty()
            && s.chars().all(|c| c.is_ascii_digit() || c == '.')
            && s.chars().filter(|c| *c == '.').count() <= 1
            && !s.starts_with('.')
            && !s.ends_with('.');
        let v: f64 = if ok {
            s.parse().unwrap_or(f64::NAN)
        } else {
            f64::NAN
        };
        if !(1.0..=Self::MAX).contains(&v) {
            return Err(format!(
                "must be a decimal number from 1 to {} (e.g. \"2\": candidates priced at most \
                 twice the cheapest), got {s:?}",
                Self::MAX
            ));
        }
        Ok(PriceRatio(v))
    }

    /// The ratio a spec's field asks for (unset: the default, 2).
    pub fn of(field: Option<&str>) -> Result<PriceRatio, String> {
        field.map_or(Ok(PriceRatio::default()), PriceRatio::parse)
    }

    /// The highest price a candidate may have next to a cheapest one at `cheapest`.
    pub fn ceiling(self, cheapest: f64) -> f64 {
        cheapest * self.0 * (1.0 + 1e-9)
    }
}

/// The launch-policy fields of a NodePool spec, checked; errors carry their field path.
pub fn check(spec: &super::NodePoolSpec, path: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Err(m) = MinValuesPolicy::of(spec.min_values_policy.as_deref()) {
        out.push((format!("{path}.minValuesPolicy"), m));
    }
    if let Err(m) = PriceRatio::of(spec.candidate_price_ratio.as_deref()) {
        out.push((format!("{path}.candidatePriceRatio"), m));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_and_ratios_parse_with_their_defaults() {
        assert_eq!(MinValuesPolicy::of(None), Ok(MinValuesPolicy::Strict));
        assert_eq!(
            MinValuesPolicy::of(Some("BestEffort")),
            Ok(MinValuesPolicy::BestEffort)
        );
        assert!(MinValuesPolicy::of(Some("bestEffort"))
            .unwrap_err()
            .contains("Strict, BestEffort"));
        assert_eq!(PriceRatio::of(None), Ok(PriceRatio(2.0)));
        assert_eq!(PriceRatio::of(Some("1.5")), Ok(PriceRatio(1.5)));
        assert_eq!(PriceRatio::of(Some("1")), Ok(PriceRatio(1.0)));
        for bad in ["0.5", "-2", "2x", "", ".5", "1e3", "NaN", "inf", "1000000"] {
            assert!(PriceRatio::of(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(PriceRatio(2.0).to_string(), "2");
        assert_eq!(PriceRatio(1.25).to_string(), "1.25");
        assert!(PriceRatio(2.0).ceiling(0.1) >= 0.2);
    }
}
