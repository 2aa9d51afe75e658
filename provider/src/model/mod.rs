//! Typed models: Rust structs mapped to and from Terraform values, one per resource.
//!
//! Resource code reads `model.requirements[0].min_values` instead of
//! `config.get("requirement").as_list()...get("min_values")`, so a misspelt attribute is a
//! compile error in resource code. A model is declared with [`attr::model!`]: its fields,
//! each with its attribute name; how each field type reads and writes is said once, in
//! [`attr::Attr`]. A unit test per model checks the names against the resource's schema with
//! [`conforms`]: every key a model writes exists in the schema with the right shape, and
//! every schema attribute is written. This is what terraform-plugin-framework's `tfsdk`
//! struct tags give Go providers.
//!
//! Unknown values (known only after apply) read as absent. A field that plan-time code must
//! see as unknown is an [`attr::Planned`], so plan-time code reads the same model as apply.

pub mod access_entry;
pub mod agent;
pub mod attr;
pub mod cluster;
pub mod fargate_profile;
pub mod interruption_queue;
pub mod interruption_rules;
pub mod node_class;
pub mod node_overlay;
pub mod node_pool;
pub mod paths;
pub mod role;

use crate::protocol::prelude::*;

pub use attr::{Attr, Model, Planned};

/// Checks that `v` has exactly the shape of `ty`: the same attribute names at every level
/// of every object (nulls allowed anywhere). The error names the first mismatch's path.
pub fn conforms(v: &Value, ty: &Type) -> Result<(), String> {
    fn walk(v: &Value, ty: &Type, at: &str) -> Result<(), String> {
        match (v, ty) {
            (Value::Null | Value::Unknown, _) => Ok(()),
            (Value::Object(m), Type::Object(attrs)) => {
                for k in m.keys() {
                    if !attrs.contains_key(k) {
                        return Err(format!("{at}.{k}: not in the schema"));
                    }
                }
                for (k, t) in attrs {
                    match m.get(k) {
                        None => return Err(format!("{at}.{k}: schema attribute not mapped")),
                        Some(x) => walk(x, t, &format!("{at}.{k}"))?,
                    }
                }
                Ok(())
            }
            (Value::List(xs) | Value::Set(xs), Type::List(t) | Type::Set(t)) => xs
                .iter()
                .enumerate()
                .try_for_each(|(i, x)| walk(x, t, &format!("{at}[{i}]"))),
            (Value::Map(m), Type::Map(t)) => m
                .iter()
                .try_for_each(|(k, x)| walk(x, t, &format!("{at}[{k:?}]"))),
            (Value::String(_), Type::String)
            | (Value::Number(_), Type::Number)
            | (Value::Bool(_), Type::Bool) => Ok(()),
            (v, t) => Err(format!("{at}: value {v:?} is not a {}", t.friendly_name())),
        }
    }
    walk(v, ty, "")
}
