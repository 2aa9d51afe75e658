//! The provider at plan against the table of bad objects the CRDs and the agent refuse
//! (`joiner_agent_world::crd_rules`): every bad NodePool, NodeClass and NodeOverlay that a
//! configuration can express is written as the resource a user would write, and one
//! `terraform plan` must refuse each of them at the attribute of the field the table names,
//! saying what the table says, while the good objects of the same table plan cleanly. The
//! kube-apiserver half of the table runs in the agent's `logic::crds::rules`; together they
//! fail when the API server and the plan disagree on any row.
//!
//! A row is written through the provider's own mapping (`Model::from_spec`, the one `import`
//! uses): when that mapping cannot carry a row's mistake (the spec the configuration makes
//! no longer has it), no configuration can make that object, and the row is listed in
//! [`NOT_EXPRESSIBLE`] with the reason, so that a new such row is a visible decision.

use std::collections::BTreeMap;

use joiner_agent::api::{NodeClassSpec, NodeOverlaySpec, NodePoolSpec};
use joiner_agent_world::crd_rules::{good, table, Kind};
use joiner_e2e::{Diagnostic, MotoServer, Workspace};
use joiner_provider::convert::hcl::quote;
use joiner_provider::model::node_class::NodeClassModel;
use joiner_provider::model::node_overlay::NodeOverlayModel;
use joiner_provider::model::node_pool::NodePoolModel;
use joiner_provider::model::paths::PathMap;
use joiner_provider::model::Model;
use joiner_provider::protocol::resource::Resource;
use joiner_provider::protocol::schema::{Block, Nesting};
use joiner_provider::protocol::value::Value;
use joiner_provider::resources::{node_class, node_overlay, node_pool};
use serde_json::Value as Json;

/// Rows no configuration can express, and why.
const NOT_EXPRESSIBLE: &[(&str, &str)] = &[
    (
        "NodePool Karpenter's EC2NodeClass kind",
        "`node_class` is a name: the provider writes group joiner.dev and kind NodeClass",
    ),
    (
        "NodePool Karpenter's group",
        "`node_class` is a name: the provider writes group joiner.dev and kind NodeClass",
    ),
];

/// One resource of the configuration: where it is, and where each attribute path is.
struct Written {
    label: String,
    first: usize,
    last: usize,
    spans: Vec<(String, usize, usize)>,
}

impl Written {
    fn contains(&self, line: usize) -> bool {
        (self.first..=self.last).contains(&line)
    }

    /// The lines of the longest written path that `path` starts with.
    fn span_of(&self, path: &str) -> Option<(usize, usize)> {
        self.spans
            .iter()
            .filter(|(p, _, _)| {
                path == p
                    || path
                        .strip_prefix(p.as_str())
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
            })
            .max_by_key(|(p, _, _)| p.len())
            .map(|(_, a, b)| (*a, *b))
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: &Json) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
}

/// A resource as a user would write it.
struct AsWritten {
    ty: &'static str,
    value: Value,
    schema: Block,
    paths: &'static PathMap,
    /// The spec this configuration makes (the model's own mapping back).
    spec: Json,
}

/// The resource a user would write for `spec`, through the provider's model; None for a
/// NodeClaim, which the agent alone writes.
fn model_of(kind: Kind, name: &str, spec: &Json) -> Option<AsWritten> {
    let json = |v: Result<Json, serde_json::Error>| v.expect("a spec serializes");
    match kind {
        Kind::Pool => {
            let m = NodePoolModel::from_spec("c", name, &parse::<NodePoolSpec>(spec));
            Some(AsWritten {
                ty: "joiner_node_pool",
                value: m.to_value(),
                schema: node_pool::NodePool.schema().block,
                paths: &node_pool::PATHS,
                spec: json(serde_json::to_value(m.spec())),
            })
        }
        Kind::Class => {
            let m = NodeClassModel::from_spec("c", name, &parse::<NodeClassSpec>(spec));
            Some(AsWritten {
                ty: "joiner_node_class",
                value: m.to_value(),
                schema: node_class::NodeClass.schema().block,
                paths: &node_class::PATHS,
                spec: json(serde_json::to_value(m.spec())),
            })
        }
        Kind::Overlay => {
            let m = NodeOverlayModel::from_spec("c", name, &parse::<NodeOverlaySpec>(spec));
            Some(AsWritten {
                ty: "joiner_node_overlay",
                value: m.to_value(),
                schema: node_overlay::NodeOverlay.schema().block,
                paths: &node_overlay::PATHS,
                spec: json(serde_json::to_value(m.spec())),
            })
        }
        // NodeClaims are the agent's to write; no resource makes one.
        Kind::Claim => None,
    }
}

fn hcl_expr(v: &Value) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quote(s),
        Value::List(xs) | Value::Set(xs) | Value::Tuple(xs) => {
            format!(
                "[{}]",
                xs.iter().map(hcl_expr).collect::<Vec<_>>().join(", ")
            )
        }
        Value::Map(m) | Value::Object(m) => format!(
            "{{ {} }}",
            m.iter()
                .map(|(k, x)| format!("{} = {}", quote(k), hcl_expr(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Null | Value::Unknown => "null".into(),
    }
}

/// Writes `v` as the body of `block`, one attribute per line, recording where each path is.
fn body(
    block: &Block,
    v: &Value,
    indent: &str,
    path: &str,
    out: &mut Vec<String>,
    spans: &mut Vec<(String, usize, usize)>,
) {
    let join = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    for a in &block.attributes {
        let x = v.get(&a.name);
        if (a.computed && !a.optional && !a.required) || x.is_null() || x.is_unknown() {
            continue;
        }
        out.push(format!("{indent}{} = {}", a.name, hcl_expr(x)));
        spans.push((join(&a.name), out.len(), out.len()));
    }
    for nb in &block.blocks {
        let x = v.get(&nb.type_name);
        let items: Vec<(String, &Value)> = match (&nb.nesting, x) {
            (_, Value::Null | Value::Unknown) => Vec::new(),
            (Nesting::List | Nesting::Set, Value::List(xs) | Value::Set(xs)) => xs
                .iter()
                .enumerate()
                .map(|(i, x)| (format!("{}[{i}]", join(&nb.type_name)), x))
                .collect(),
            (_, x) => vec![(join(&nb.type_name), x)],
        };
        let first = out.len() + 1;
        for (p, x) in items {
            let start = out.len() + 1;
            out.push(format!("{indent}{} {{", nb.type_name));
            body(&nb.block, x, &format!("{indent}  "), &p, out, spans);
            out.push(format!("{indent}}}"));
            spans.push((p, start, out.len()));
        }
        if out.len() >= first {
            spans.push((join(&nb.type_name), first, out.len()));
        }
    }
}

/// The configuration's text and what each resource of it is.
fn write(resources: &[(String, &'static str, Value, Block)]) -> (String, Vec<Written>) {
    let mut out = Vec::new();
    let mut written = Vec::new();
    for (label, ty, v, schema) in resources {
        let first = out.len() + 1;
        out.push(format!("resource \"{ty}\" \"{label}\" {{"));
        let mut spans = Vec::new();
        body(schema, v, "  ", "", &mut out, &mut spans);
        out.push("}".into());
        written.push(Written {
            label: label.clone(),
            first,
            last: out.len(),
            spans,
        });
        out.push(String::new());
    }
    (out.join("\n"), written)
}

#[test]
fn the_plan_refuses_every_bad_object_the_api_server_refuses() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let rows = table();
    let mut resources = Vec::new();
    // Row label -> (row, expected attribute path).
    let mut expect: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut not_expressible = Vec::new();
    for (i, b) in rows.iter().enumerate() {
        let label = format!("bad{i}");
        // Expressible when the spec the configuration makes still has the row's mistake.
        let written = model_of(b.kind, &label, &b.spec()).filter(|w| {
            b.kind
                .validate(&w.spec)
                .iter()
                .any(|e| e.starts_with(b.field) && e.contains(b.says))
        });
        match written {
            Some(w) => {
                expect.insert(label.clone(), (i, w.paths.translate(b.field).to_string()));
                resources.push((label, w.ty, w.value, w.schema));
            }
            None => not_expressible.push(format!("{} {}", b.kind.name(), b.what)),
        }
    }
    let mut good_labels = Vec::new();
    for (i, (kind, spec)) in good().into_iter().enumerate() {
        let label = format!("good{i}");
        if let Some(w) = model_of(kind, &label, &spec) {
            good_labels.push(label.clone());
            resources.push((label, w.ty, w.value, w.schema));
        }
    }
    let mut listed: Vec<String> = NOT_EXPRESSIBLE
        .iter()
        .map(|(what, _)| what.to_string())
        .collect();
    listed.sort();
    let mut found = not_expressible.clone();
    found.retain(|w| !w.starts_with("NodeClaim "));
    found.sort();
    assert_eq!(
        found, listed,
        "rows no configuration can express (a new one needs its reason in NOT_EXPRESSIBLE)"
    );
    assert!(expect.len() >= 60, "{} rows expressed", expect.len());

    let (text, written) = write(&resources);
    tf.write_config(&text);
    let run = tf.terraform(&["plan", "-no-color", "-input=false", "-json"]);
    let diags: Vec<Diagnostic> = Diagnostic::parse_stream(&run.stdout)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    let lines: Vec<&str> = text.lines().collect();
    let mut wrong = Vec::new();
    for w in &written {
        let mine: Vec<&Diagnostic> = diags
            .iter()
            .filter(|d| d.line.is_some_and(|l| w.contains(l as usize)))
            .collect();
        if good_labels.contains(&w.label) {
            if !mine.is_empty() {
                wrong.push(format!("good {} refused: {}", w.label, mine[0]));
            }
            continue;
        }
        let (row, path) = &expect[&w.label];
        let b = &rows[*row];
        // Where the error must point: the lines of its attribute; for an error about the
        // whole resource, anywhere in it; for a nested block's path, which Terraform can
        // only attribute to the resource, the resource's first line with the path named in
        // the message. And it must say what the API server's refusal says.
        let at = w.span_of(path);
        let ok = mine.iter().any(|d| {
            let line = d.line.unwrap_or(0) as usize;
            let placed = match at {
                _ if path.is_empty() => true,
                Some((first, last)) => {
                    (first..=last).contains(&line)
                        || (line == w.first && d.detail.starts_with(path.as_str()))
                }
                // Nothing written there (a required block left out): Terraform's own
                // schema check names it.
                None => line == w.first && d.mentions(path),
            };
            placed && d.mentions(b.says)
        });
        if !ok {
            wrong.push(format!(
                "{} {} ({}): expected an error at `{path}` ({:?}: {:?}) saying {:?}; got {:#?}",
                b.kind.name(),
                b.what,
                w.label,
                at,
                at.and_then(|a| lines.get(a.0.saturating_sub(1)).copied())
                    .unwrap_or(""),
                b.says,
                mine.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            ));
        }
    }
    println!(
        "{} bad rows planned, {} good objects, {} rows not expressible, {} errors",
        expect.len(),
        good_labels.len(),
        not_expressible.len(),
        diags.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of the rows disagree:\n{wrong:#?}",
        wrong.len()
    );
}
