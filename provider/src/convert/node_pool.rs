//! Karpenter `NodePool` (v1, v1beta1) and `Provisioner` (v1alpha5) to `joiner_node_pool`.

use super::hcl::{identifier, Block, Expr};
use super::{at, inline, scalar, seconds_to_duration, str_at, string_map, text, text_map, Options};
use joiner_agent::labels;
use serde_yaml::Value;
use std::collections::BTreeSet;

#[derive(Clone, Copy, PartialEq)]
enum Generation {
    V1,
    V1beta1,
    V1alpha5,
}

fn generation(doc: &Value) -> Option<Generation> {
    match (str_at(doc, &["apiVersion"])?, str_at(doc, &["kind"])?) {
        ("karpenter.sh/v1", "NodePool") => Some(Generation::V1),
        ("karpenter.sh/v1beta1", "NodePool") => Some(Generation::V1beta1),
        ("karpenter.sh/v1alpha5", "Provisioner") => Some(Generation::V1alpha5),
        _ => None,
    }
}

pub fn is_node_pool(doc: &Value) -> bool {
    generation(doc).is_some()
}

/// Operators joiner's requirement algebra has (Karpenter's, Gte/Lte of v1.9 included).
const OPERATORS: &[&str] = &[
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "Gte",
    "Lte",
];

/// The pool, and for a v1alpha5 `Provisioner` with an inline `provider` block, the class
/// made from it.
pub fn convert(
    doc: &Value,
    name: &str,
    classes: &BTreeSet<String>,
    opts: &Options,
) -> Result<(Block, Option<Block>), String> {
    let generation = generation(doc).expect("checked by is_node_pool");
    let spec = doc.get("spec").ok_or("spec is missing")?;
    // Where the node template lives: v1alpha5 kept it flat in the spec.
    let (template_meta, template) = match generation {
        Generation::V1alpha5 => (spec, spec),
        _ => (
            at(spec, &["template", "metadata"]).unwrap_or(&Value::Null),
            at(spec, &["template", "spec"]).ok_or("spec.template.spec is missing")?,
        ),
    };
    let id = identifier(name);
    let mut b = Block::new("resource", &["joiner_node_pool", &id]);
    b.attr("cluster_name", Expr::Raw(opts.cluster_name.clone()))
        .attr("name", Expr::Str(name.to_string()));

    let inline_class = node_class_ref(&mut b, generation, spec, template, name, classes, opts)?;
    if let Some(w) = spec.get("weight").and_then(Value::as_i64) {
        b.attr("weight", Expr::Int(w));
    }
    // A static NodePool (Karpenter v1.8): same field, same meaning.
    if let Some(r) = spec.get("replicas").and_then(Value::as_i64) {
        b.attr("replicas", Expr::Int(r));
    }
    template_metadata(&mut b, template_meta, opts);
    requirements_and_taints(&mut b, template, opts);
    let limits = match generation {
        Generation::V1alpha5 => string_map(at(spec, &["limits", "resources"])),
        _ => string_map(spec.get("limits")),
    };
    if !limits.is_empty() {
        b.attr("limits", text_map(&limits, opts));
    }

    expire_after(&mut b, generation, spec, template);
    if let Some(t) = template.get("terminationGracePeriod").and_then(scalar) {
        b.attr("termination_grace_period", Expr::Str(t));
    }
    for field in ["kubelet", "kubeletConfiguration"] {
        if let Some(k) = template.get(field) {
            b.comment(&format!(
                "not converted: {field} moved to the node class in Karpenter v1; set it in the class's kubelet block: {}",
                inline(k)
            ));
        }
    }

    let d = disruption(generation, spec, opts);
    if !d.is_empty() {
        b.block(d);
    }
    unconverted(&mut b, generation, spec);
    Ok((b, inline_class))
}

/// The pool's `node_class`, from its `nodeClassRef` (or a v1alpha5 `providerRef`); for an
/// inline v1alpha5 `provider` block, the class made from it.
fn node_class_ref(
    b: &mut Block,
    generation: Generation,
    spec: &Value,
    template: &Value,
    name: &str,
    classes: &BTreeSet<String>,
    opts: &Options,
) -> Result<Option<Block>, String> {
    let id = identifier(name);
    let mut inline_class = None;
    let class_ref = match generation {
        Generation::V1alpha5 => {
            if let Some(provider) = spec.get("provider") {
                b.comment(&format!(
                    "changed: the Provisioner's inline `provider` block is joiner_node_class.{id}."
                ));
                inline_class = Some(super::node_class::from_alpha_provider(
                    provider, name, opts,
                )?);
                Some(name.to_string())
            } else {
                str_at(spec, &["providerRef", "name"]).map(str::to_string)
            }
        }
        // The v1beta1 seed manifest writes the reference as a bare name.
        _ => str_at(template, &["nodeClassRef", "name"])
            .or_else(|| str_at(template, &["nodeClassRef"]))
            .map(str::to_string),
    };
    match class_ref {
        Some(class) if classes.contains(&class) || inline_class.is_some() => {
            b.attr(
                "node_class",
                Expr::Raw(format!("joiner_node_class.{}.name", identifier(&class))),
            );
        }
        Some(class) => {
            b.comment(
                "changed: the EC2NodeClass was not among the converted manifests; convert it too.",
            );
            b.attr("node_class", Expr::Str(class));
        }
        None => return Err("no nodeClassRef (or providerRef/provider) names a node class".into()),
    }
    if let Some(kind) = str_at(template, &["nodeClassRef", "kind"]) {
        if kind != "EC2NodeClass" {
            b.comment(&format!(
                "changed: nodeClassRef.kind {kind} is read as a joiner NodeClass."
            ));
        }
    }
    Ok(inline_class)
}

/// The template's labels (but those the agent sets) and annotations.
fn template_metadata(b: &mut Block, template_meta: &Value, opts: &Options) {
    let template_labels = string_map(template_meta.get("labels"));
    let (kept, refused): (Vec<_>, Vec<_>) = template_labels
        .into_iter()
        .partition(|(k, _)| !labels::RESTRICTED.contains(&k.as_str()));
    for (k, _) in &refused {
        b.comment(&format!(
            "not converted: label {k} is set by the agent on every node."
        ));
    }
    if !kept.is_empty() {
        b.attr("labels", text_map(&kept, opts));
    }
    let annotations = string_map(template_meta.get("annotations"));
    if !annotations.is_empty() {
        b.attr("annotations", text_map(&annotations, opts));
    }
}

/// The template's requirements and taints, as blocks.
fn requirements_and_taints(b: &mut Block, template: &Value, opts: &Options) {
    for r in template
        .get("requirements")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        requirement(b, r, opts);
    }
    for (field, block) in [("taints", "taint"), ("startupTaints", "startup_taint")] {
        for t in template
            .get(field)
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let mut tb = Block::new(block, &[]);
            for (k, hk) in [("key", "key"), ("value", "value"), ("effect", "effect")] {
                if let Some(v) = t.get(k).and_then(scalar) {
                    tb.attr(hk, text(&v, opts));
                }
            }
            b.block(tb);
        }
    }
}

/// `expire_after`, from wherever the pool's generation kept it; not written when it is
/// joiner's default.
fn expire_after(b: &mut Block, generation: Generation, spec: &Value, template: &Value) {
    let expire = match generation {
        Generation::V1 => template.get("expireAfter").and_then(scalar),
        Generation::V1beta1 => {
            let e = at(spec, &["disruption", "expireAfter"]).and_then(scalar);
            if e.is_some() {
                b.comment("changed: disruption.expireAfter (v1beta1) is the pool's expire_after since Karpenter v1.");
            }
            e
        }
        Generation::V1alpha5 => spec
            .get("ttlSecondsUntilExpired")
            .and_then(Value::as_i64)
            .map(|s| {
                b.comment(&format!(
                    "changed: ttlSecondsUntilExpired {s} is expire_after."
                ));
                seconds_to_duration(s)
            }),
    };
    // 720h is joiner's default, read back as unset: written out it would show as a change
    // after `terraform import`.
    match expire {
        Some(e) if e == "720h" => {
            b.comment("expire_after 720h is joiner's default, so it is not written.");
        }
        Some(e) => {
            b.attr("expire_after", Expr::Str(e));
        }
        None => {}
    }
}

/// A comment for each spec field with no joiner equivalent.
fn unconverted(b: &mut Block, generation: Generation, spec: &Value) {
    let handled: &[&str] = match generation {
        Generation::V1alpha5 => &[
            "labels",
            "annotations",
            "requirements",
            "taints",
            "startupTaints",
            "limits",
            "weight",
            "provider",
            "providerRef",
            "ttlSecondsUntilExpired",
            "ttlSecondsAfterEmpty",
            "consolidation",
            "kubeletConfiguration",
        ],
        _ => &["template", "limits", "weight", "disruption", "replicas"],
    };
    for k in spec.as_mapping().into_iter().flat_map(|m| m.keys()) {
        if let Some(k) = k.as_str() {
            if !handled.contains(&k) {
                b.comment(&format!(
                    "not converted: spec.{k} has no joiner equivalent."
                ));
            }
        }
    }
}

fn requirement(b: &mut Block, r: &Value, opts: &Options) {
    let key = str_at(r, &["key"]).unwrap_or("");
    let op = str_at(r, &["operator"]).unwrap_or("");
    let values: Vec<String> = r
        .get("values")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(scalar)
        .collect();
    let mut rb = Block::new("requirement", &[]);
    rb.attr("key", Expr::Str(key.to_string()))
        .attr("operator", Expr::Str(op.to_string()));
    if !values.is_empty() {
        rb.attr(
            "values",
            Expr::List(values.iter().map(|v| text(v, opts)).collect()),
        );
    }
    if let Some(m) = r.get("minValues").and_then(Value::as_i64) {
        rb.attr("min_values", Expr::Int(m));
    }
    if let Some((_, why)) = labels::NOT_MODELLED.iter().find(|(k, _)| *k == key) {
        b.comment(&format!(
            "not converted: requirement {key} {op} {values:?}: {why}."
        ));
    } else if !labels::is_requirable(key) {
        // Kept out of the configuration: as a custom label it would admit every instance
        // type, and joiner refuses it at plan rather than guess.
        b.comment(&format!(
            "not converted: requirement {key} {op} {values:?}: joiner does not model this key yet and refuses it."
        ));
    } else if !OPERATORS.contains(&op) {
        b.comment(&format!(
            "not converted: requirement {key}: unknown operator {op:?}."
        ));
    } else {
        b.block(rb);
    }
}

fn disruption(generation: Generation, spec: &Value, opts: &Options) -> Block {
    let mut d = Block::new("disruption", &[]);
    match generation {
        Generation::V1alpha5 => {
            let empty = spec.get("ttlSecondsAfterEmpty").and_then(Value::as_i64);
            let consolidation = at(spec, &["consolidation", "enabled"]).and_then(Value::as_bool);
            match (consolidation, empty) {
                (Some(true), _) => {
                    d.comment("changed: consolidation.enabled is consolidation_policy WhenEmptyOrUnderutilized.");
                    d.attr(
                        "consolidation_policy",
                        Expr::Str("WhenEmptyOrUnderutilized".into()),
                    );
                }
                (_, Some(s)) => {
                    d.comment(&format!(
                        "changed: ttlSecondsAfterEmpty {s} is consolidation_policy WhenEmpty after {s}s."
                    ));
                    d.attr("consolidation_policy", Expr::Str("WhenEmpty".into()))
                        .attr("consolidate_after", Expr::Str(format!("{s}s")));
                }
                _ => {
                    d.comment("changed: without ttlSecondsAfterEmpty or consolidation a Provisioner never removed nodes.");
                    d.attr("consolidation_policy", Expr::Str("WhenEmpty".into()))
                        .attr("consolidate_after", Expr::Str("Never".into()));
                }
            }
        }
        _ => {
            let src = spec.get("disruption").unwrap_or(&Value::Null);
            if let Some(p) = str_at(src, &["consolidationPolicy"]) {
                let p = if p == "WhenUnderutilized" {
                    d.comment("changed: WhenUnderutilized (v1beta1) was renamed WhenEmptyOrUnderutilized in Karpenter v1.");
                    "WhenEmptyOrUnderutilized"
                } else {
                    p
                };
                d.attr("consolidation_policy", Expr::Str(p.to_string()));
            }
            if let Some(a) = src.get("consolidateAfter").and_then(scalar) {
                d.attr("consolidate_after", Expr::Str(a));
            }
            for budget in src
                .get("budgets")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
            {
                let mut bb = Block::new("budget", &[]);
                for (k, hk) in [
                    ("nodes", "nodes"),
                    ("schedule", "schedule"),
                    ("duration", "duration"),
                ] {
                    if let Some(v) = budget.get(k).and_then(scalar) {
                        bb.attr(hk, text(&v, opts));
                    }
                }
                let reasons: Vec<Expr> = budget
                    .get("reasons")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .filter_map(scalar)
                    .map(Expr::Str)
                    .collect();
                if !reasons.is_empty() {
                    bb.attr("reasons", Expr::List(reasons));
                }
                d.block(bb);
            }
        }
    }
    d
}
