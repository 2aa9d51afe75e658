//! `terraform-provider-joiner convert`: Karpenter manifests in, `joiner_node_pool` and
//! `joiner_node_class` HCL out.
//!
//! It lives in the provider binary because that is the one joiner binary a Terraform user
//! already has (`terraform init` installs it), and because what it writes is the provider's
//! schema. It reads every generation teams still run: `karpenter.sh/v1` and `v1beta1`
//! `NodePool`, `v1alpha5` `Provisioner` (with an inline `provider` block or a
//! `providerRef`), and `karpenter.k8s.aws/v1`, `v1beta1` `EC2NodeClass` and `v1alpha1`
//! `AWSNodeTemplate`. Every field whose meaning changed on the way, or that has no joiner
//! equivalent, gets a comment in the output at the place it would have gone, so the
//! review happens in the HCL (and then in `terraform plan`, which validates the result).

pub mod hcl;
mod node_class;
mod node_overlay;
mod node_pool;

use serde_yaml::Value;
use std::collections::BTreeSet;

/// What the output refers to instead of literals the manifests cannot know.
#[derive(Debug, Clone)]
pub struct Options {
    /// The expression for `cluster_name`, and for `${CLUSTER_NAME}` in manifest strings.
    pub cluster_name: String,
    /// The node role for a class that names neither a role nor an instance profile.
    pub node_role: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cluster_name: "var.cluster_name".to_string(),
            node_role: "var.node_role_name".to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("document {index}: not YAML: {source}")]
    Yaml {
        index: usize,
        source: serde_yaml::Error,
    },
    #[error("document {index} ({kind} {name:?}): {message}")]
    Invalid {
        index: usize,
        kind: String,
        name: String,
        message: String,
    },
}

/// Converts every document of a (multi-document) YAML stream; `source` names it in the
/// header comment.
pub fn convert(yaml: &str, source: &str, opts: &Options) -> Result<String, ConvertError> {
    let mut docs = Vec::new();
    for (index, de) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let v = <Value as serde::Deserialize>::deserialize(de)
            .map_err(|source| ConvertError::Yaml { index, source })?;
        if !v.is_null() {
            docs.push((index, v));
        }
    }
    // Classes first, so that pools can reference the ones converted in the same run.
    let class_names: BTreeSet<String> = docs
        .iter()
        .filter(|(_, d)| node_class::is_node_class(d))
        .filter_map(|(_, d)| str_at(d, &["metadata", "name"]).map(str::to_string))
        .collect();
    let mut classes = Vec::new();
    let mut pools = Vec::new();
    let mut overlays = Vec::new();
    let mut skipped = Vec::new();
    for (index, doc) in &docs {
        let api = str_at(doc, &["apiVersion"]).unwrap_or("");
        let kind = str_at(doc, &["kind"]).unwrap_or("");
        let name = str_at(doc, &["metadata", "name"]).unwrap_or("").to_string();
        let invalid = |message: &str| ConvertError::Invalid {
            index: *index,
            kind: kind.to_string(),
            name: name.clone(),
            message: message.to_string(),
        };
        let known = node_class::is_node_class(doc)
            || node_pool::is_node_pool(doc)
            || node_overlay::is_node_overlay(doc);
        if known && name.is_empty() {
            return Err(invalid("metadata.name is missing"));
        }
        if node_class::is_node_class(doc) {
            classes.push(node_class::convert(doc, &name, opts).map_err(|m| invalid(&m))?);
        } else if node_pool::is_node_pool(doc) {
            let (pool, inline_class) =
                node_pool::convert(doc, &name, &class_names, opts).map_err(|m| invalid(&m))?;
            classes.extend(inline_class);
            pools.push(pool);
        } else if node_overlay::is_node_overlay(doc) {
            overlays.push(node_overlay::convert(doc, &name, opts).map_err(|m| invalid(&m))?);
        } else {
            skipped.push(format!("{kind} {name:?} ({api})"));
        }
    }
    let mut out = format!(
        "# Converted from {source} by terraform-provider-joiner convert {}.\n\
         # Lines starting with `# changed:` and `# not converted:` need a look before the first apply.\n",
        env!("CARGO_PKG_VERSION")
    );
    for s in &skipped {
        out.push_str(&format!("# skipped: {s} is not a Karpenter NodePool, Provisioner, EC2NodeClass, AWSNodeTemplate or NodeOverlay.\n"));
    }
    for b in classes.iter().chain(pools.iter()).chain(overlays.iter()) {
        out.push('\n');
        out.push_str(&b.render());
    }
    let imports: Vec<(String, String)> = classes
        .iter()
        .chain(pools.iter())
        .chain(overlays.iter())
        .filter_map(|b| Some((b.address()?, b.object_name()?)))
        .collect();
    if !imports.is_empty() {
        // Commands rather than `import` blocks: those need Terraform 1.5, and joiner
        // supports 1.0.
        out.push_str(
            "\n# Where an object already exists in the cluster, import it instead of creating it\n\
             # (CLUSTER=<the cluster's name>):\n",
        );
        for (address, name) in imports {
            out.push_str(&format!(
                "#   terraform import '{address}' \"$CLUSTER:{name}\"\n"
            ));
        }
    }
    Ok(out)
}

/// The string at a path of mapping keys.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// A scalar as the string Kubernetes would see (`30` and `"30"` alike).
pub(crate) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A YAML mapping of scalars, in the manifest's order.
pub(crate) fn string_map(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((scalar(k)?, scalar(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A manifest string as an HCL expression: `${CLUSTER_NAME}` (how Karpenter's docs and our
/// seed manifests write the cluster's name) becomes the cluster-name expression; anything
/// else stays literal.
pub(crate) fn text(s: &str, opts: &Options) -> hcl::Expr {
    const PLACEHOLDER: &str = "${CLUSTER_NAME}";
    if s == PLACEHOLDER {
        return hcl::Expr::Raw(opts.cluster_name.clone());
    }
    if s.contains(PLACEHOLDER) {
        let parts: Vec<String> = s
            .split(PLACEHOLDER)
            .map(|p| {
                let q = hcl::quote(p);
                q[1..q.len() - 1].to_string()
            })
            .collect();
        return hcl::Expr::Raw(format!(
            "\"{}\"",
            parts.join(&format!("${{{}}}", opts.cluster_name))
        ));
    }
    hcl::Expr::Str(s.to_string())
}

pub(crate) fn text_map(entries: &[(String, String)], opts: &Options) -> hcl::Expr {
    hcl::Expr::Map(
        entries
            .iter()
            .map(|(k, v)| (k.clone(), text(v, opts)))
            .collect(),
    )
}

/// Seconds as the shortest Go duration joiner accepts (`2592000` → `720h`).
pub(crate) fn seconds_to_duration(secs: i64) -> String {
    if secs != 0 && secs % 3600 == 0 {
        format!("{}h", secs / 3600)
    } else if secs != 0 && secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// A compact one-line rendering of a field that is carried as a comment.
pub(crate) fn inline(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "?".to_string())
}

#[cfg(test)]
mod tests;
