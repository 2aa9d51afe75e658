//! Readers and writers for the attribute shapes the models use.

use std::collections::BTreeMap;

use crate::protocol::prelude::*;

pub fn string(v: &Value, k: &str) -> Option<String> {
    v.get(k).as_str().map(str::to_string)
}

pub fn int(v: &Value, k: &str) -> Option<i64> {
    v.get(k).as_i64()
}

pub fn boolean(v: &Value, k: &str) -> Option<bool> {
    v.get(k).as_bool()
}

pub fn map(v: &Value, k: &str) -> BTreeMap<String, String> {
    v.get(k).as_string_map()
}

pub fn strings(v: &Value, k: &str) -> Vec<String> {
    v.get(k).as_string_list()
}

/// The objects of a list block (empty when null or unknown).
pub fn blocks<T: super::Model>(v: &Value, k: &str) -> Vec<T> {
    v.get(k)
        .as_list()
        .map(|l| l.iter().map(T::from_value).collect())
        .unwrap_or_default()
}

/// A single block: None when absent.
pub fn single<T: super::Model>(v: &Value, k: &str) -> Option<T> {
    match v.get(k) {
        Value::Object(_) => Some(T::from_value(v.get(k))),
        _ => None,
    }
}

pub fn opt_str(s: &Option<String>) -> Value {
    Value::opt_string(s.clone())
}

pub fn opt_int(i: Option<i64>) -> Value {
    i.map(Value::int).unwrap_or(Value::Null)
}

pub fn opt_bool(b: Option<bool>) -> Value {
    b.map(Value::Bool).unwrap_or(Value::Null)
}

/// A map attribute; null when empty, so an omitted map and `{}` read back alike.
pub fn opt_map(m: &BTreeMap<String, String>) -> Value {
    if m.is_empty() {
        Value::Null
    } else {
        Value::string_map(m.clone())
    }
}

pub fn list(xs: &[String]) -> Value {
    Value::List(xs.iter().map(|s| Value::string(s.clone())).collect())
}

pub fn opt_list(xs: &[String]) -> Value {
    if xs.is_empty() {
        Value::Null
    } else {
        list(xs)
    }
}

pub fn block_list<T: super::Model>(xs: &[T]) -> Value {
    Value::List(xs.iter().map(T::to_value).collect())
}

pub fn block_single<T: super::Model>(x: &Option<T>) -> Value {
    x.as_ref().map(T::to_value).unwrap_or(Value::Null)
}
