//! Terraform's value model (cty): types, values with null and unknown, and attribute paths.
//!
//! Values are untyped trees; the schema's [`Type`] drives encoding and decoding, the same way
//! Terraform's own msgpack and JSON encodings are type-directed. That keeps resource code
//! short (build an object, leave out what is null) while the codec still checks every value
//! against the schema before it goes on the wire.

use std::collections::BTreeMap;
use std::fmt;

/// A cty type, as it appears in schemas (`Schema.Attribute.type` is its JSON form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Bool,
    Number,
    String,
    /// cty.DynamicPseudoType: the value carries its own type on the wire.
    Dynamic,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(BTreeMap<String, Type>),
    Tuple(Vec<Type>),
}

impl Type {
    pub fn list(t: Type) -> Type {
        Type::List(Box::new(t))
    }
    pub fn set(t: Type) -> Type {
        Type::Set(Box::new(t))
    }
    pub fn map(t: Type) -> Type {
        Type::Map(Box::new(t))
    }
    pub fn object<K: Into<String>>(attrs: impl IntoIterator<Item = (K, Type)>) -> Type {
        Type::Object(attrs.into_iter().map(|(k, t)| (k.into(), t)).collect())
    }

    /// The JSON type expression Terraform expects in schemas, e.g. `["map","string"]`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Value as J};
        match self {
            Type::Bool => J::from("bool"),
            Type::Number => J::from("number"),
            Type::String => J::from("string"),
            Type::Dynamic => J::from("dynamic"),
            Type::List(t) => json!(["list", t.to_json()]),
            Type::Set(t) => json!(["set", t.to_json()]),
            Type::Map(t) => json!(["map", t.to_json()]),
            Type::Object(attrs) => {
                let m: serde_json::Map<String, J> = attrs
                    .iter()
                    .map(|(k, t)| (k.clone(), t.to_json()))
                    .collect();
                json!(["object", m])
            }
            Type::Tuple(ts) => json!(["tuple", ts.iter().map(Type::to_json).collect::<Vec<_>>()]),
        }
    }

    /// Parses a JSON type expression (used for dynamic values, which embed their type).
    pub fn from_json(j: &serde_json::Value) -> Result<Type, String> {
        use serde_json::Value as J;
        match j {
            J::String(s) => match s.as_str() {
                "bool" => Ok(Type::Bool),
                "number" => Ok(Type::Number),
                "string" => Ok(Type::String),
                "dynamic" => Ok(Type::Dynamic),
                other => Err(format!("unknown primitive type {other:?}")),
            },
            J::Array(parts) if parts.len() == 2 => {
                let kind = parts[0].as_str().ok_or("type kind must be a string")?;
                match kind {
                    "list" => Ok(Type::list(Type::from_json(&parts[1])?)),
                    "set" => Ok(Type::set(Type::from_json(&parts[1])?)),
                    "map" => Ok(Type::map(Type::from_json(&parts[1])?)),
                    "object" => {
                        let attrs = parts[1]
                            .as_object()
                            .ok_or("object attributes must be a map")?;
                        let mut out = BTreeMap::new();
                        for (k, v) in attrs {
                            out.insert(k.clone(), Type::from_json(v)?);
                        }
                        Ok(Type::Object(out))
                    }
                    "tuple" => {
                        let elems = parts[1].as_array().ok_or("tuple elements must be a list")?;
                        Ok(Type::Tuple(
                            elems
                                .iter()
                                .map(Type::from_json)
                                .collect::<Result<_, _>>()?,
                        ))
                    }
                    other => Err(format!("unknown type kind {other:?}")),
                }
            }
            // ["object", {...}, [optional attrs]] appears in Terraform >= 1.3 type constraints.
            J::Array(parts) if parts.len() == 3 && parts[0] == "object" => {
                Type::from_json(&J::Array(parts[..2].to_vec()))
            }
            other => Err(format!("invalid type expression {other}")),
        }
    }

    /// A short human name for error messages ("list of string").
    pub fn friendly_name(&self) -> String {
        match self {
            Type::Bool => "bool".into(),
            Type::Number => "number".into(),
            Type::String => "string".into(),
            Type::Dynamic => "any".into(),
            Type::List(t) => format!("list of {}", t.friendly_name()),
            Type::Set(t) => format!("set of {}", t.friendly_name()),
            Type::Map(t) => format!("map of {}", t.friendly_name()),
            Type::Object(_) => "object".into(),
            Type::Tuple(_) => "tuple".into(),
        }
    }
}

/// A cty number. Integers stay exact; anything else is an f64.
#[derive(Clone, Copy, Debug)]
pub enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
    /// The value as an integer, when it is one exactly.
    pub fn as_i64(self) -> Option<i64> {
        match self {
            Number::Int(i) => Some(i),
            Number::Float(f) if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 => {
                Some(f as i64)
            }
            Number::Float(_) => None,
        }
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a == b,
            _ => self.as_f64() == other.as_f64(),
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Int(i) => write!(f, "{i}"),
            Number::Float(x) => write!(f, "{x}"),
        }
    }
}

/// A Terraform value. `Null` and `Unknown` can stand anywhere a value of any type can.
///
/// Equality treats sets as unordered and numbers by value, which is what "did the user change
/// this attribute" checks need.
#[derive(Clone, Debug, Default)]
pub enum Value {
    #[default]
    Null,
    /// Known only after apply.
    Unknown,
    Bool(bool),
    Number(Number),
    String(String),
    List(Vec<Value>),
    Set(Vec<Value>),
    Map(BTreeMap<String, Value>),
    Object(BTreeMap<String, Value>),
    Tuple(Vec<Value>),
}

static NULL: Value = Value::Null;

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (Null, Null) | (Unknown, Unknown) => true,
            (Bool(a), Bool(b)) => a == b,
            (Number(a), Number(b)) => a == b,
            (String(a), String(b)) => a == b,
            (List(a), List(b)) | (Tuple(a), Tuple(b)) => a == b,
            (Set(a), Set(b)) => {
                a.len() == b.len()
                    && a.iter().all(|x| b.contains(x))
                    && b.iter().all(|x| a.contains(x))
            }
            (Map(a), Map(b)) | (Object(a), Object(b)) => a == b,
            _ => false,
        }
    }
}

impl Value {
    pub fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }
    pub fn int(i: i64) -> Value {
        Value::Number(Number::Int(i))
    }
    pub fn float(f: f64) -> Value {
        Value::Number(Number::Float(f))
    }
    /// An object from `(name, value)` pairs. Attributes left out encode as null.
    pub fn object<K: Into<String>>(attrs: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Object(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
    /// A map of strings, e.g. tags.
    pub fn string_map<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Value {
        Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.into(), Value::String(v.into())))
                .collect(),
        )
    }
    /// A string, or null when `None`.
    /// A list of strings, e.g. IDs found by a data source.
    pub fn string_list<I: IntoIterator<Item = String>>(items: I) -> Value {
        Value::List(items.into_iter().map(Value::String).collect())
    }

    pub fn opt_string(s: Option<impl Into<String>>) -> Value {
        s.map(|s| Value::String(s.into())).unwrap_or(Value::Null)
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    pub fn is_unknown(&self) -> bool {
        matches!(self, Value::Unknown)
    }
    /// Known at this level (may still contain unknowns inside).
    pub fn is_known(&self) -> bool {
        !self.is_unknown()
    }
    /// Known all the way down.
    pub fn is_fully_known(&self) -> bool {
        match self {
            Value::Unknown => false,
            Value::List(v) | Value::Set(v) | Value::Tuple(v) => v.iter().all(Value::is_fully_known),
            Value::Map(m) | Value::Object(m) => m.values().all(Value::is_fully_known),
            _ => true,
        }
    }

    /// The attribute `name` of an object (or entry of a map); null when absent or when `self`
    /// is null/unknown. Lets resource code write `config.get("name").as_str()`.
    pub fn get(&self, name: &str) -> &Value {
        match self {
            Value::Object(m) | Value::Map(m) => m.get(name).unwrap_or(&NULL),
            _ => &NULL,
        }
    }
    /// Mutable access to an object attribute, inserting null when it is missing.
    /// Panics only if `self` is not an object (a programming error in the caller).
    pub fn attr_mut(&mut self, name: &str) -> &mut Value {
        match self {
            Value::Object(m) => m.entry(name.to_string()).or_default(),
            other => panic!("attr_mut({name}) on non-object value {other:?}"),
        }
    }
    /// Sets an object attribute (no-op on non-objects).
    pub fn set_attr(&mut self, name: &str, v: Value) {
        if let Value::Object(m) = self {
            m.insert(name.to_string(), v);
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_number(&self) -> Option<Number> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        self.as_number().and_then(Number::as_i64)
    }
    pub fn as_f64(&self) -> Option<f64> {
        self.as_number().map(Number::as_f64)
    }
    /// Elements of a list, set or tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Set(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }
    /// Entries of a map or attributes of an object.
    pub fn as_map(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Map(m) | Value::Object(m) => Some(m),
            _ => None,
        }
    }
    /// A map(string) as Rust strings; non-string entries are skipped.
    pub fn as_string_map(&self) -> BTreeMap<String, String> {
        self.as_map()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }
    /// A list(string)/set(string) as Rust strings; non-string elements are skipped.
    pub fn as_string_list(&self) -> Vec<String> {
        self.as_list()
            .map(|l| {
                l.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Follows `path` into the value; null if any step is missing.
    pub fn at(&self, path: &AttributePath) -> &Value {
        let mut cur = self;
        for step in &path.0 {
            cur = match (step, cur) {
                (PathStep::Attr(n), v) | (PathStep::Key(n), v) => v.get(n),
                (PathStep::Index(i), Value::List(l) | Value::Tuple(l)) => usize::try_from(*i)
                    .ok()
                    .and_then(|i| l.get(i))
                    .unwrap_or(&NULL),
                _ => &NULL,
            };
        }
        cur
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::int(i)
    }
}
impl From<i32> for Value {
    fn from(i: i32) -> Self {
        Value::int(i.into())
    }
}

/// One step of an [`AttributePath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathStep {
    /// An object attribute or nested block name.
    Attr(String),
    /// A map key.
    Key(String),
    /// A list or tuple index.
    Index(i64),
}

/// Where in a resource's configuration a diagnostic points, e.g. `timeouts.create` or
/// `tags["Name"]`. Terraform underlines that spot in the user's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AttributePath(pub Vec<PathStep>);

impl AttributePath {
    /// The path of a top-level attribute.
    pub fn new(attr: impl Into<String>) -> Self {
        AttributePath(vec![PathStep::Attr(attr.into())])
    }
    pub fn root() -> Self {
        AttributePath(Vec::new())
    }
    pub fn attr(mut self, name: impl Into<String>) -> Self {
        self.0.push(PathStep::Attr(name.into()));
        self
    }
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.0.push(PathStep::Key(key.into()));
        self
    }
    pub fn index(mut self, i: i64) -> Self {
        self.0.push(PathStep::Index(i));
        self
    }
    pub fn steps(&self) -> &[PathStep] {
        &self.0
    }
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for AttributePath {
    fn from(s: &str) -> Self {
        AttributePath::new(s)
    }
}

impl fmt::Display for AttributePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                PathStep::Attr(n) if i == 0 => write!(f, "{n}")?,
                PathStep::Attr(n) => write!(f, ".{n}")?,
                PathStep::Key(k) => write!(f, "[{k:?}]")?,
                PathStep::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_json_round_trip() {
        let t = Type::object([
            ("a", Type::list(Type::String)),
            ("b", Type::map(Type::Number)),
            ("c", Type::Tuple(vec![Type::Bool, Type::Dynamic])),
            ("d", Type::set(Type::object([("x", Type::String)]))),
        ]);
        assert_eq!(Type::from_json(&t.to_json()).unwrap(), t);
        assert_eq!(t.to_json()["1"], serde_json::Value::Null);
        assert_eq!(
            Type::list(Type::String).to_json(),
            serde_json::json!(["list", "string"])
        );
    }

    #[test]
    fn sets_compare_unordered_and_numbers_by_value() {
        let a = Value::Set(vec!["x".into(), "y".into()]);
        let b = Value::Set(vec!["y".into(), "x".into()]);
        assert_eq!(a, b);
        assert_eq!(Value::int(300), Value::float(300.0));
        assert_ne!(
            Value::List(vec!["x".into(), "y".into()]),
            Value::List(vec!["y".into(), "x".into()])
        );
    }

    #[test]
    fn path_display_and_lookup() {
        let p = AttributePath::new("tags").key("Name");
        assert_eq!(p.to_string(), "tags[\"Name\"]");
        let v = Value::object([("tags", Value::string_map([("Name", "q")]))]);
        assert_eq!(v.at(&p).as_str(), Some("q"));
        assert!(v.at(&AttributePath::new("nope").index(3)).is_null());
    }
}
