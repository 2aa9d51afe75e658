//! Readers and writers for collection attributes where null and empty differ.
//!
//! [`super::fields`] reads a null collection as empty and writes an empty one as null, which
//! suits nested blocks. The AWS-side resources need the difference: state must read back the
//! way the configuration wrote it (`tags = {}` or no tags at all), or the plan shows a diff
//! forever; and sets need their own writer, as a `Value::Set`.

use std::collections::BTreeSet;

use crate::protocol::prelude::*;

/// The strings of a set (or list) attribute; `None` when null or unknown.
pub fn opt_set(v: &Value, k: &str) -> Option<BTreeSet<String>> {
    match v.get(k) {
        x @ (Value::Set(_) | Value::List(_)) => Some(x.as_string_list().into_iter().collect()),
        _ => None,
    }
}

/// A set attribute, sorted (Terraform compares sets unordered; sorting keeps state stable).
pub fn set(xs: &BTreeSet<String>) -> Value {
    Value::Set(xs.iter().cloned().map(Value::String).collect())
}

/// A set attribute that is null when `None`.
pub fn opt_set_value(xs: &Option<BTreeSet<String>>) -> Value {
    xs.as_ref().map(set).unwrap_or(Value::Null)
}

/// The strings of a list attribute; `None` when null or unknown.
pub fn opt_strings(v: &Value, k: &str) -> Option<Vec<String>> {
    match v.get(k) {
        x @ Value::List(_) => Some(x.as_string_list()),
        _ => None,
    }
}

/// A list attribute that is null when `None` (and `[]` when empty).
pub fn opt_list_value(xs: &Option<Vec<String>>) -> Value {
    xs.as_ref()
        .map(|xs| Value::List(xs.iter().cloned().map(Value::String).collect()))
        .unwrap_or(Value::Null)
}

/// A map attribute that keeps null apart from `{}`; `None` when null or unknown.
pub fn nullable_map(v: &Value, k: &str) -> Option<std::collections::BTreeMap<String, String>> {
    match v.get(k) {
        x @ Value::Map(_) => Some(x.as_string_map()),
        _ => None,
    }
}

/// A map attribute that is null when `None` (and `{}` when empty).
pub fn nullable_map_value(m: &Option<std::collections::BTreeMap<String, String>>) -> Value {
    m.as_ref()
        .map(|m| Value::string_map(m.clone()))
        .unwrap_or(Value::Null)
}
