//! The one mapping between Rust field types and Terraform values, and [`model!`], which
//! builds a model's reader and writer from its field list.
//!
//! Each field type says once how it reads and writes ([`Attr`]); a model is then only its
//! fields and their attribute names. Why not serde: a Terraform value has two things
//! serde's data model lacks, sets (which must be written as sets, not lists) and unknowns
//! (which plan-time code must see), and an empty collection must read back as the
//! configuration wrote it (null or `[]`). Each would need a marker type smuggled through a
//! serializer; a trait with one impl per field type states them directly, in fewer lines.
//! Why not a derive: `model!` wraps the struct declaration and gives the same one-place
//! field list without a proc-macro crate (and `syn`) to build and maintain.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};

use crate::protocol::prelude::*;

/// A field type's reading from, and writing to, a Terraform value.
pub trait Attr: Sized {
    /// Reads the attribute. Null and unknown read as absent: `None`, empty, `""`.
    fn from_attr(v: &Value) -> Self;
    /// Writes the attribute. An empty string list or map writes null, so that an omitted
    /// attribute and an empty one read back alike; `Option` keeps them apart.
    fn to_attr(&self) -> Value;
    /// What `Some(self)` writes: an empty collection stays empty.
    fn to_attr_some(&self) -> Value {
        self.to_attr()
    }
    /// Whether this is a primitive. An empty list of primitives is a list attribute left
    /// out (null); an empty list of objects is a list of nested blocks with none in it,
    /// which Terraform wants as `[]`.
    const PRIMITIVE: bool = false;
}

/// A struct that maps onto one Terraform object type (written by [`model!`]).
pub trait Model: Attr {
    fn from_value(v: &Value) -> Self {
        Self::from_attr(v)
    }
    fn to_value(&self) -> Value {
        self.to_attr()
    }
}

/// Reads attribute `k` of object `v`.
pub fn get<T: Attr>(v: &Value, k: &str) -> T {
    T::from_attr(v.get(k))
}

/// Declares a model struct and its [`Attr`]/[`Model`] impls. A field maps to the attribute
/// of its own name, or to the one named after `=>` (`requirements: Vec<..> => "requirement"`).
macro_rules! model {
    (@name $field:ident $attr:literal) => { $attr };
    (@name $field:ident) => { stringify!($field) };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty $(=> $attr:literal)? ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::model::attr::Attr for $name {
            fn from_attr(v: &$crate::protocol::value::Value) -> Self {
                $name {
                    $( $field: $crate::model::attr::get(
                        v,
                        $crate::model::attr::model!(@name $field $($attr)?),
                    ), )*
                }
            }
            fn to_attr(&self) -> $crate::protocol::value::Value {
                $crate::protocol::value::Value::object([
                    $( (
                        $crate::model::attr::model!(@name $field $($attr)?),
                        $crate::model::attr::Attr::to_attr(&self.$field),
                    ), )*
                ])
            }
        }

        impl $crate::model::attr::Model for $name {}
    };
}
pub(crate) use model;

/// Null and unknown elements of a collection are skipped: a model reads what is known.
fn present(v: &&Value) -> bool {
    !v.is_null() && v.is_known()
}

/// Strings, integers and booleans; null reads as `""`, 0 or false.
macro_rules! primitive {
    ($($t:ty => $as:ident),*) => {$(
        impl Attr for $t {
            fn from_attr(v: &Value) -> Self {
                v.$as().unwrap_or_default().into()
            }
            fn to_attr(&self) -> Value {
                self.clone().into()
            }
            const PRIMITIVE: bool = true;
        }
    )*};
}
primitive!(String => as_str, i64 => as_i64, bool => as_bool);

/// Carried through untouched (`timeouts`, computed values the resource fills in itself).
impl Attr for Value {
    fn from_attr(v: &Value) -> Self {
        v.clone()
    }
    fn to_attr(&self) -> Value {
        self.clone()
    }
}

impl<T: Attr> Attr for Option<T> {
    fn from_attr(v: &Value) -> Self {
        present(&v).then(|| T::from_attr(v))
    }
    fn to_attr(&self) -> Value {
        self.as_ref().map(T::to_attr_some).unwrap_or(Value::Null)
    }
}

/// The present elements of a list or set.
fn elements<T: Attr, C: FromIterator<T>>(v: &Value) -> C {
    let xs = v.as_list().unwrap_or_default();
    xs.iter().filter(present).map(T::from_attr).collect()
}

/// Null for an empty collection of primitives (an attribute left out), else `written`.
fn null_if_empty<T: Attr>(empty: bool, written: impl FnOnce() -> Value) -> Value {
    if empty && T::PRIMITIVE {
        Value::Null
    } else {
        written()
    }
}

impl<T: Attr> Attr for Vec<T> {
    fn from_attr(v: &Value) -> Self {
        elements(v)
    }
    fn to_attr(&self) -> Value {
        null_if_empty::<T>(self.is_empty(), || self.to_attr_some())
    }
    fn to_attr_some(&self) -> Value {
        Value::List(self.iter().map(T::to_attr).collect())
    }
}

/// Written as a set, sorted, so that state is stable (Terraform compares sets unordered).
impl<T: Attr + Ord> Attr for BTreeSet<T> {
    fn from_attr(v: &Value) -> Self {
        elements(v)
    }
    fn to_attr(&self) -> Value {
        null_if_empty::<T>(self.is_empty(), || self.to_attr_some())
    }
    fn to_attr_some(&self) -> Value {
        Value::Set(self.iter().map(T::to_attr).collect())
    }
}

impl<T: Attr> Attr for BTreeMap<String, T> {
    fn from_attr(v: &Value) -> Self {
        let m = v.as_map().into_iter().flatten();
        m.filter(|(_, x)| present(x))
            .map(|(k, x)| (k.clone(), T::from_attr(x)))
            .collect()
    }
    fn to_attr(&self) -> Value {
        if self.is_empty() {
            return Value::Null;
        }
        self.to_attr_some()
    }
    fn to_attr_some(&self) -> Value {
        Value::Map(self.iter().map(|(k, x)| (k.clone(), x.to_attr())).collect())
    }
}

/// A field that plan-time code must be able to see as unknown (set from another resource's
/// output, known only after apply). It reads like `T` (unknown as absent, as every field
/// does), and [`Planned::is_known`] says whether that is the whole truth; it writes an
/// unknown back as unknown, so a planned value survives a round trip through the model.
/// (`x.clone()` clones the `Planned`; `(*x).clone()` the value.)
#[derive(Clone, Debug, PartialEq)]
pub struct Planned<T> {
    value: T,
    known: bool,
}

impl<T> Planned<T> {
    /// Known all the way down: an element or entry unknown inside a collection counts.
    pub fn is_known(&self) -> bool {
        self.known
    }
    /// The value, when it is known.
    pub fn known(&self) -> Option<&T> {
        self.known.then_some(&self.value)
    }
    pub fn unknown(value: T) -> Self {
        Planned {
            value,
            known: false,
        }
    }
}

impl<T> Planned<Option<T>> {
    /// Whether the configuration sets the attribute, to a value known or not.
    pub fn is_set(&self) -> bool {
        self.value.is_some() || !self.known
    }
}

impl<T: Default> Default for Planned<T> {
    fn default() -> Self {
        T::default().into()
    }
}

impl<T> From<T> for Planned<T> {
    fn from(value: T) -> Self {
        Planned { value, known: true }
    }
}

impl<T> Deref for Planned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for Planned<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Attr> Attr for Planned<T> {
    fn from_attr(v: &Value) -> Self {
        Planned {
            value: T::from_attr(v),
            known: v.is_fully_known(),
        }
    }
    fn to_attr(&self) -> Value {
        if self.known {
            self.value.to_attr()
        } else {
            Value::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    model! {
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Inner {
            pub key: String,
            pub values: Vec<String>,
        }
    }

    model! {
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Outer {
            pub name: Option<String>,
            pub count: Option<i64>,
            pub labels: BTreeMap<String, String>,
            pub tags: Option<BTreeMap<String, String>>,
            pub ids: Option<BTreeSet<String>>,
            pub inner: Vec<Inner> => "block",
            pub single: Option<Inner>,
            pub late: Planned<Option<String>>,
        }
    }

    /// Empty and null stay apart exactly where the field type says they differ.
    #[test]
    fn empty_and_null() {
        let v = Outer::default().to_value();
        assert_eq!(v.get("labels"), &Value::Null);
        assert_eq!(v.get("tags"), &Value::Null);
        assert_eq!(v.get("block"), &Value::List(vec![]));
        assert_eq!(v.get("single"), &Value::Null);
        let m = Outer {
            tags: Some(BTreeMap::new()),
            ids: Some(BTreeSet::new()),
            inner: vec![Inner::default()],
            ..Default::default()
        };
        let v = m.to_value();
        assert_eq!(v.get("tags"), &Value::Map(BTreeMap::new()));
        assert_eq!(v.get("ids"), &Value::Set(vec![]));
        assert_eq!(
            v.get("block").as_list().unwrap()[0].get("values"),
            &Value::Null
        );
        assert_eq!(Outer::from_value(&v), m);
    }

    /// An unknown reads as absent everywhere, and a [`Planned`] field says so and writes
    /// it back as unknown.
    #[test]
    fn unknowns() {
        let v = Value::object([
            ("name", Value::Unknown),
            (
                "labels",
                Value::object([("a", Value::Unknown), ("b", "c".into())]),
            ),
            ("late", Value::Unknown),
        ]);
        let m = Outer::from_value(&v);
        assert_eq!(m.name, None);
        assert_eq!(m.labels, [("b".to_string(), "c".to_string())].into());
        assert!(!m.late.is_known() && m.late.is_set() && m.late.is_none());
        assert_eq!(m.to_value().get("late"), &Value::Unknown);
        let known = Outer::from_value(&Value::object([("late", "x".into())]));
        assert!(known.late.is_known() && known.late.as_deref() == Some("x"));
        assert!(!Outer::default().late.is_set());
    }
}
