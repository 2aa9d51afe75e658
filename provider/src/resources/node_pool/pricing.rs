//! What a NodePool change does to the price of what it launches, said at plan time.
//!
//! The launch policies (`min_values_policy`, `candidate_price_ratio`) never drift a live
//! node: they change which instance types the next NodeClaims list. A plan that changes
//! them says so in a warning of its own, which needs no cluster, so a reviewer sees it even
//! when the drift preview cannot be made.

use joiner_agent::api::launch_policy::{MinValuesPolicy, PriceRatio};
use joiner_agent::api::node_overlay::{validate, NodeOverlaySpec};
use joiner_agent::api::node_pool::NodePoolSpec;
use joiner_agent::catalog::overlay::{self, Overlay};

use super::admission::{self, price_text, Admitted};
use crate::context::ProviderContext;
use crate::kubernetes::kinds;
use crate::model::node_pool::NodePoolModel;
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

/// The valid NodeOverlays of the cluster, parsed; `None` when the cluster cannot be asked
/// (before it exists, or unreachable: the drift preview already says so on updates).
async fn cluster_overlays(ctx: &ProviderContext, cluster: &str) -> Option<Vec<Overlay>> {
    let kube = super::preview::client(ctx, cluster).await.ok()?;
    let list = super::preview::bounded(
        "listing NodeOverlays",
        kube.list(kinds::NODE_OVERLAY, None, None),
    )
    .await
    .ok()?;
    Some(
        list.iter()
            .filter_map(|o| {
                let name = o["metadata"]["name"].as_str()?;
                let spec: NodeOverlaySpec = serde_json::from_value(o["spec"].clone()).ok()?;
                validate(&spec, "spec")
                    .is_empty()
                    .then(|| Overlay::from_spec(name, &spec))
            })
            .collect(),
    )
}

/// The sentence comparing a pool's price range with and without overlays, if they differ.
pub fn overlay_difference(
    names: &[String],
    list: &Admitted,
    overlaid: &Admitted,
) -> Option<String> {
    let range = |lo: Option<f64>, hi: Option<f64>| match (lo, hi) {
        (Some(a), Some(b)) => format!("{}-{}", price_text(a), price_text(b)),
        _ => "none".to_string(),
    };
    let spot =
        (list.cheapest_spot, list.dearest_spot) != (overlaid.cheapest_spot, overlaid.dearest_spot);
    let od = (list.cheapest_on_demand, list.dearest_on_demand)
        != (overlaid.cheapest_on_demand, overlaid.dearest_on_demand);
    if !spot && !od {
        return None;
    }
    Some(format!(
        "With the cluster's NodeOverlays ({}), this pool's prices in USD/h are: Spot {} (price \
         list {}), on-demand {} (price list {}). The agent plans, launches and consolidates \
         with the overlaid prices; admitted_instance_types shows the price list's.",
        names.join(", "),
        range(overlaid.cheapest_spot, overlaid.dearest_spot),
        range(list.cheapest_spot, list.dearest_spot),
        range(overlaid.cheapest_on_demand, overlaid.dearest_on_demand),
        range(list.cheapest_on_demand, list.dearest_on_demand),
    ))
}

/// The plan warning with the pool's price range under the cluster's NodeOverlays, when
/// they change it. Asked only when the pool is created or changed.
pub async fn overlay_prices(ctx: &ProviderContext, m: &NodePoolModel) -> Option<Diagnostic> {
    let cluster = m.cluster_name.as_deref()?;
    let overlays = cluster_overlays(ctx, cluster).await?;
    if overlays.is_empty() {
        return None;
    }
    let base = admission::catalog();
    let list = admission::admitted(base, m).ok()?;
    let overlaid = admission::admitted(&overlay::apply(base, &overlays), m).ok()?;
    let names: Vec<String> = overlays.iter().map(|o| o.name.clone()).collect();
    let text = overlay_difference(&names, &list, &overlaid)?;
    Some(Diagnostic::warning(
        format!(
            "NodePool {} prices under NodeOverlays",
            m.name.as_deref().unwrap_or("")
        ),
        text,
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

    #[test]
    fn an_on_demand_discount_shows_both_ranges() {
        use crate::model::node_pool::RequirementModel;
        let m = NodePoolModel {
            requirements: vec![RequirementModel {
                key: "karpenter.k8s.aws/instance-family".into(),
                operator: "In".into(),
                values: vec!["m5".into()],
                min_values: None,
            }]
            .into(),
            ..Default::default()
        };
        let spec: NodeOverlaySpec = serde_json::from_value(serde_json::json!({
            "priceAdjustment": "-50%",
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        }))
        .unwrap();
        let base = admission::catalog();
        let list = admission::admitted(base, &m).unwrap();
        let ov = Overlay::from_spec("half", &spec);
        let overlaid = admission::admitted(&overlay::apply(base, &[ov]), &m).unwrap();
        let text = overlay_difference(&["half".into()], &list, &overlaid).unwrap();
        let od = list.cheapest_on_demand.unwrap();
        assert!(
            text.contains(&format!("on-demand {}", price_text(od / 2.0))),
            "{text}"
        );
        assert!(
            text.contains(&format!("(price list {}", price_text(od))),
            "{text}"
        );
        assert!(overlay_difference(&[], &list, &list).is_none());
    }
}
