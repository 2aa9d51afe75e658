//! Karpenter `NodeOverlay` (`karpenter.sh/v1alpha1`, v1.7) to `joiner_node_overlay`.
//!
//! The fields are the same; what differs is what an overlay may select. Karpenter prices
//! instance types per NodePool, so its overlays may name `karpenter.sh/nodepool` and a
//! pool's template labels; joiner plans every pool against one catalogue, so those
//! requirements are left out with a comment (the overlay then applies to every pool).

use super::hcl::{identifier, Block, Expr};
use super::{scalar, str_at, string_map, text, text_map, Options};
use serde_yaml::Value;

pub fn is_node_overlay(doc: &Value) -> bool {
    matches!(
        (str_at(doc, &["apiVersion"]), str_at(doc, &["kind"])),
        (Some("karpenter.sh/v1alpha1"), Some("NodeOverlay"))
    )
}

pub fn convert(doc: &Value, name: &str, opts: &Options) -> Result<Block, String> {
    let spec = doc.get("spec").ok_or("spec is missing")?;
    let mut b = Block::new("resource", &["joiner_node_overlay", &identifier(name)]);
    b.attr("cluster_name", Expr::Raw(opts.cluster_name.clone()))
        .attr("name", Expr::Str(name.to_string()));
    if let Some(w) = spec.get("weight").and_then(Value::as_i64) {
        b.attr("weight", Expr::Int(w));
    }
    for (field, attr) in [("price", "price"), ("priceAdjustment", "price_adjustment")] {
        if let Some(v) = spec.get(field).and_then(scalar) {
            b.attr(attr, text(&v, opts));
        }
    }
    let capacity = string_map(spec.get("capacity"));
    if !capacity.is_empty() {
        b.attr("capacity", text_map(&capacity, opts));
    }
    for r in spec
        .get("requirements")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        let key = str_at(r, &["key"]).unwrap_or("");
        let op = str_at(r, &["operator"]).unwrap_or("");
        let values: Vec<String> = r
            .get("values")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(scalar)
            .collect();
        if !joiner_agent::api::node_overlay::selectable(key) {
            b.comment(&format!(
                "not converted: requirement {key} {op} {values:?}: joiner prices one catalogue for every NodePool, so an overlay selects by instance type labels, zone and capacity type only."
            ));
            continue;
        }
        let mut rb = Block::new("requirement", &[]);
        rb.attr("key", Expr::Str(key.to_string()))
            .attr("operator", Expr::Str(op.to_string()));
        if !values.is_empty() {
            rb.attr(
                "values",
                Expr::List(values.iter().map(|v| text(v, opts)).collect()),
            );
        }
        b.block(rb);
    }
    Ok(b)
}
