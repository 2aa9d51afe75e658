//! What a NodePool change does to the price of what it launches, said at plan time.
//!
//! The launch policies (`min_values_policy`, `candidate_price_ratio`) never drift a live
//! node: they change which instance types the next NodeClaims list. A plan that changes
//! them says so in a warning of its own, which needs no cluster, so a reviewer sees it even
//! when the drift preview cannot be made.

use joiner_agent::api::launch_policy::{MinValuesPolicy, PriceRatio};
use joiner_agent::api::node_pool::NodePoolSpec;

use crate::protocol::prelude::*;

/// The plan warning for a change of the launch policies, if they change.
pub fn launch_policy_change(old: &NodePoolSpec, new: &NodePoolSpec) -> Option<Diagnostic> {
    let mut parts = Vec::new();
    let mut path = None;
    let (Ok(r0), Ok(r1)) = (
        PriceRatio::of(old.candidate_price_ratio.as_deref()),
        PriceRatio::of(new.candidate_price_ratio.as_deref()),
    ) else {
        return None;
    };
    if r0 != r1 {
        let effect = if r1.0 < r0.0 {
            "fewer fallback types when the cheapest are short; a pod no type within the bound fits still gets the cheapest type that fits it"
        } else {
            "more fallback types, up to the dearer bound, when the cheapest are short"
        };
        parts.push(format!(
            "candidate_price_ratio {r0} -> {r1}: new NodeClaims list instance types priced at \
             most {r1}x their cheapest candidate ({effect})"
        ));
        path = Some(AttributePath::new("candidate_price_ratio"));
    }
    let (Ok(p0), Ok(p1)) = (
        MinValuesPolicy::of(old.min_values_policy.as_deref()),
        MinValuesPolicy::of(new.min_values_policy.as_deref()),
    ) else {
        return None;
    };
    if p0 != p1 {
        let effect = match p1 {
            MinValuesPolicy::BestEffort => {
                "pods a minValues shortfall kept from this pool now launch with the values there are"
            }
            MinValuesPolicy::Strict => {
                "a launch that cannot meet every minValues is no longer made on this pool"
            }
        };
        parts.push(format!(
            "min_values_policy {} -> {}: {effect}",
            p0.as_str(),
            p1.as_str()
        ));
        path.get_or_insert(AttributePath::new("min_values_policy"));
    }
    let path = path?;
    let detail = format!(
        "{}. No live node drifts for this: the policies apply to NodeClaims created from now on.",
        parts.join("; ")
    );
    Some(Diagnostic::warning_at(
        path,
        "NodePool launch policy changes",
        detail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_changes_are_named_and_unchanged_ones_are_quiet() {
        let old = NodePoolSpec::default();
        assert!(launch_policy_change(&old, &old).is_none());
        // The default written out is no change.
        let same = NodePoolSpec {
            candidate_price_ratio: Some("2".into()),
            min_values_policy: Some("Strict".into()),
            ..Default::default()
        };
        assert!(launch_policy_change(&old, &same).is_none());
        let new = NodePoolSpec {
            candidate_price_ratio: Some("1.25".into()),
            min_values_policy: Some("BestEffort".into()),
            ..Default::default()
        };
        let d = launch_policy_change(&old, &new).unwrap();
        assert_eq!(d.path.clone().unwrap().to_string(), "candidate_price_ratio");
        assert!(
            d.detail.contains("candidate_price_ratio 2 -> 1.25"),
            "{}",
            d.detail
        );
        assert!(
            d.detail.contains("min_values_policy Strict -> BestEffort"),
            "{}",
            d.detail
        );
        assert!(d.detail.contains("No live node drifts"), "{}", d.detail);
    }
}
