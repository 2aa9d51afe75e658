//! DynamicValue's msgpack encoding, as Terraform (cty) writes it.
//!
//! The encoding is type-directed: the schema type says how to read each msgpack item.
//! Null is msgpack nil; an unknown value is the extension type 0 (Terraform sends
//! `d4 00 00`; refined unknowns since Terraform 1.6 use other extension codes, and every
//! extension is read as unknown); objects and maps are msgpack maps keyed by name; lists,
//! sets and tuples are arrays; a dynamic value is a pair `[json type, value]`.
//!
//! Decoding never panics and never allocates more than the input can justify: lengths are
//! checked against the bytes left, and recursion is bounded by the type (plus a depth cap for
//! dynamic values, whose type comes from the input).

use super::value::{Number, Type, Value};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    /// Where in the value, e.g. `.tags["a"]`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "at {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for CodecError {}

fn err(path: &str, message: impl Into<String>) -> CodecError {
    CodecError {
        path: path.to_string(),
        message: message.into(),
    }
}

const MAX_DYNAMIC_DEPTH: usize = 64;

// ---------------------------------------------------------------------------------------
// Encoding

/// Encodes `v` as type `ty`. Object attributes missing from `v` encode as null; attributes
/// not in the type are an error (they are always a bug in the caller).
pub fn encode(v: &Value, ty: &Type) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(64);
    enc(&mut out, v, ty, &mut String::new())?;
    Ok(out)
}

fn enc(out: &mut Vec<u8>, v: &Value, ty: &Type, path: &mut String) -> Result<(), CodecError> {
    match v {
        Value::Null => {
            out.push(0xc0);
            return Ok(());
        }
        Value::Unknown => {
            out.extend_from_slice(&[0xd4, 0, 0]);
            return Ok(());
        }
        _ => {}
    }
    match (ty, v) {
        (Type::Dynamic, v) => {
            let inferred = infer_type(v);
            let tj = serde_json::to_vec(&inferred.to_json()).expect("type JSON always serializes");
            write_array_len(out, 2);
            write_bin(out, &tj);
            enc(out, v, &inferred, path)
        }
        (Type::Bool, Value::Bool(b)) => {
            out.push(if *b { 0xc3 } else { 0xc2 });
            Ok(())
        }
        (Type::Number, Value::Number(n)) => {
            match n {
                Number::Int(i) => write_int(out, *i),
                Number::Float(f) => match Number::Float(*f).as_i64() {
                    Some(i) => write_int(out, i),
                    None => {
                        out.push(0xcb);
                        out.extend_from_slice(&f.to_be_bytes());
                    }
                },
            }
            Ok(())
        }
        (Type::String, Value::String(s)) => {
            write_str(out, s);
            Ok(())
        }
        (Type::List(et), Value::List(items)) | (Type::Set(et), Value::Set(items)) => {
            write_array_len(out, items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                enc(out, item, et, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        (Type::Tuple(ets), Value::Tuple(items)) => {
            if ets.len() != items.len() {
                return Err(err(
                    path,
                    format!("tuple needs {} elements, got {}", ets.len(), items.len()),
                ));
            }
            write_array_len(out, items.len());
            for (i, (item, et)) in items.iter().zip(ets).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                enc(out, item, et, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        (Type::Map(et), Value::Map(m)) => {
            write_map_len(out, m.len());
            for (k, item) in m {
                write_str(out, k);
                let len = path.len();
                path.push_str(&format!("[{k:?}]"));
                enc(out, item, et, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        (Type::Object(attrs), Value::Object(m)) => {
            if let Some(extra) = m.keys().find(|k| !attrs.contains_key(*k)) {
                return Err(err(path, format!("unexpected attribute {extra:?}")));
            }
            write_map_len(out, attrs.len());
            for (name, at) in attrs {
                write_str(out, name);
                let len = path.len();
                path.push('.');
                path.push_str(name);
                enc(out, m.get(name).unwrap_or(&Value::Null), at, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        (ty, v) => Err(err(
            path,
            format!("expected {}, got {}", ty.friendly_name(), kind_name(v)),
        )),
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Unknown => "unknown",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::List(_) => "list",
        Value::Set(_) => "set",
        Value::Map(_) => "map",
        Value::Object(_) => "object",
        Value::Tuple(_) => "tuple",
    }
}

/// The most specific type describing a known value (for dynamic attributes).
pub fn infer_type(v: &Value) -> Type {
    match v {
        Value::Null | Value::Unknown => Type::Dynamic,
        Value::Bool(_) => Type::Bool,
        Value::Number(_) => Type::Number,
        Value::String(_) => Type::String,
        Value::List(items) => Type::list(items.first().map(infer_type).unwrap_or(Type::Dynamic)),
        Value::Set(items) => Type::set(items.first().map(infer_type).unwrap_or(Type::Dynamic)),
        Value::Map(m) => Type::map(m.values().next().map(infer_type).unwrap_or(Type::Dynamic)),
        Value::Object(m) => {
            Type::Object(m.iter().map(|(k, v)| (k.clone(), infer_type(v))).collect())
        }
        Value::Tuple(items) => Type::Tuple(items.iter().map(infer_type).collect()),
    }
}

fn write_int(out: &mut Vec<u8>, i: i64) {
    if (0..=0x7f).contains(&i) {
        out.push(i as u8);
    } else if (-32..0).contains(&i) {
        out.push(i as i8 as u8);
    } else if let Ok(x) = i8::try_from(i) {
        out.push(0xd0);
        out.push(x as u8);
    } else if let Ok(x) = i16::try_from(i) {
        out.push(0xd1);
        out.extend_from_slice(&x.to_be_bytes());
    } else if let Ok(x) = i32::try_from(i) {
        out.push(0xd2);
        out.extend_from_slice(&x.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= u8::MAX as usize {
        out.push(0xd9);
        out.push(n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

fn write_bin(out: &mut Vec<u8>, b: &[u8]) {
    let n = b.len();
    if n <= u8::MAX as usize {
        out.push(0xc4);
        out.push(n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xc5);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(b);
}

fn write_array_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn write_map_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x80 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xde);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Decodes `bytes` as a value of type `ty`. Trailing bytes are an error.
pub fn decode(bytes: &[u8], ty: &Type) -> Result<Value, CodecError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let v = r.value(ty, &mut String::new(), 0)?;
    if r.pos != bytes.len() {
        return Err(err(
            "",
            format!("{} trailing bytes after the value", bytes.len() - r.pos),
        ));
    }
    Ok(v)
}

/// One msgpack item header.
enum Item<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Array(usize),
    Map(usize),
    Ext,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, path: &str) -> Result<&'a [u8], CodecError> {
        if self.buf.len() - self.pos < n {
            return Err(err(path, "unexpected end of msgpack data"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, path: &str) -> Result<u8, CodecError> {
        Ok(self.take(1, path)?[0])
    }
    fn be(&mut self, n: usize, path: &str) -> Result<u64, CodecError> {
        Ok(self
            .take(n, path)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | *b as u64))
    }
    /// A container length, refused when the remaining input could not possibly hold it
    /// (every element takes at least one byte).
    fn count(&mut self, n: u64, per_item: usize, path: &str) -> Result<usize, CodecError> {
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(per_item as u64) > left {
            return Err(err(
                path,
                format!("length {n} exceeds the remaining {left} bytes"),
            ));
        }
        Ok(n as usize)
    }

    fn item(&mut self, path: &str) -> Result<Item<'a>, CodecError> {
        let m = self.u8(path)?;
        Ok(match m {
            0x00..=0x7f => Item::Int(m as i64),
            0xe0..=0xff => Item::Int(m as i8 as i64),
            0x80..=0x8f => Item::Map(self.count((m & 0x0f) as u64, 2, path)?),
            0x90..=0x9f => Item::Array(self.count((m & 0x0f) as u64, 1, path)?),
            0xa0..=0xbf => Item::Str(self.take((m & 0x1f) as usize, path)?),
            0xc0 => Item::Nil,
            0xc2 => Item::Bool(false),
            0xc3 => Item::Bool(true),
            0xc4..=0xc6 => {
                let n = self.be(1 << (m - 0xc4), path)? as usize;
                Item::Bin(self.take(n, path)?)
            }
            0xc7..=0xc9 => {
                let n = self.be(1 << (m - 0xc7), path)? as usize;
                // The extension code; every code means "unknown" to us.
                self.u8(path)?;
                self.take(n, path)?;
                Item::Ext
            }
            0xca => Item::Float(f32::from_bits(self.be(4, path)? as u32) as f64),
            0xcb => Item::Float(f64::from_bits(self.be(8, path)?)),
            0xcc..=0xcf => Item::Uint(self.be(1 << (m - 0xcc), path)?),
            0xd0 => Item::Int(self.be(1, path)? as u8 as i8 as i64),
            0xd1 => Item::Int(self.be(2, path)? as u16 as i16 as i64),
            0xd2 => Item::Int(self.be(4, path)? as u32 as i32 as i64),
            0xd3 => Item::Int(self.be(8, path)? as i64),
            0xd4..=0xd8 => {
                self.u8(path)?;
                self.take(1 << (m - 0xd4), path)?;
                Item::Ext
            }
            0xd9..=0xdb => {
                let n = self.be(1 << (m - 0xd9), path)? as usize;
                Item::Str(self.take(n, path)?)
            }
            0xdc | 0xdd => {
                let n = self.be(2 << (m - 0xdc), path)?;
                Item::Array(self.count(n, 1, path)?)
            }
            0xde | 0xdf => {
                let n = self.be(2 << (m - 0xde), path)?;
                Item::Map(self.count(n, 2, path)?)
            }
            0xc1 => return Err(err(path, "invalid msgpack marker 0xc1")),
        })
    }

    fn string(&mut self, path: &str) -> Result<String, CodecError> {
        match self.item(path)? {
            Item::Str(b) => {
                String::from_utf8(b.to_vec()).map_err(|_| err(path, "string is not valid UTF-8"))
            }
            _ => Err(err(path, "expected a string key")),
        }
    }

    fn value(&mut self, ty: &Type, path: &mut String, depth: usize) -> Result<Value, CodecError> {
        if depth > MAX_DYNAMIC_DEPTH {
            return Err(err(path, "value nested too deeply"));
        }
        let item = self.item(path)?;
        match item {
            Item::Nil => return Ok(Value::Null),
            // Type 0 is cty's unknown; other codes carry refinements we do not need.
            Item::Ext => return Ok(Value::Unknown),
            _ => {}
        }
        match ty {
            Type::Dynamic => self.dynamic(item, path, depth),
            Type::Bool => match item {
                Item::Bool(b) => Ok(Value::Bool(b)),
                _ => Err(err(path, "expected bool")),
            },
            Type::Number => number(item, path),
            Type::String => match item {
                Item::Str(b) => String::from_utf8(b.to_vec())
                    .map(Value::String)
                    .map_err(|_| err(path, "string is not valid UTF-8")),
                _ => Err(err(path, "expected string")),
            },
            Type::List(et) | Type::Set(et) => {
                let Item::Array(n) = item else {
                    return Err(err(path, format!("expected {}", ty.friendly_name())));
                };
                let items = self.elements(std::iter::repeat_n(&**et, n), path, depth)?;
                Ok(if matches!(ty, Type::List(_)) {
                    Value::List(items)
                } else {
                    Value::Set(items)
                })
            }
            Type::Tuple(ets) => {
                let Item::Array(n) = item else {
                    return Err(err(path, "expected tuple"));
                };
                if n != ets.len() {
                    return Err(err(
                        path,
                        format!("tuple needs {} elements, got {n}", ets.len()),
                    ));
                }
                Ok(Value::Tuple(self.elements(ets.iter(), path, depth)?))
            }
            Type::Map(et) => {
                let Item::Map(n) = item else {
                    return Err(err(path, format!("expected {}", ty.friendly_name())));
                };
                self.map(et, n, path, depth)
            }
            Type::Object(attrs) => {
                let Item::Map(n) = item else {
                    return Err(err(path, "expected object"));
                };
                self.object(attrs, n, path, depth)
            }
        }
    }

    /// A value of cty's dynamic pseudo-type: a `[type as JSON, value]` pair, the value
    /// decoded by the type it carries.
    fn dynamic(
        &mut self,
        item: Item<'a>,
        path: &mut String,
        depth: usize,
    ) -> Result<Value, CodecError> {
        let Item::Array(2) = item else {
            return Err(err(path, "dynamic value must be a [type, value] pair"));
        };
        let tj = match self.item(path)? {
            Item::Bin(b) | Item::Str(b) => b,
            _ => return Err(err(path, "dynamic value type must be JSON bytes")),
        };
        let tjv: serde_json::Value = serde_json::from_slice(tj)
            .map_err(|e| err(path, format!("dynamic value type is not JSON: {e}")))?;
        let t = Type::from_json(&tjv).map_err(|e| err(path, e))?;
        if type_depth(&t) + depth > MAX_DYNAMIC_DEPTH {
            return Err(err(path, "dynamic value type nested too deeply"));
        }
        self.value(&t, path, depth + 1)
    }

    /// The elements of a list, set or tuple, one per type given, each at `path[i]`.
    fn elements<'t>(
        &mut self,
        types: impl Iterator<Item = &'t Type>,
        path: &mut String,
        depth: usize,
    ) -> Result<Vec<Value>, CodecError> {
        let mut items = Vec::with_capacity(types.size_hint().0);
        for (i, et) in types.enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            items.push(self.value(et, path, depth + 1)?);
            path.truncate(len);
        }
        Ok(items)
    }

    /// A map's `n` entries, each value at `path["key"]`.
    fn map(
        &mut self,
        et: &Type,
        n: usize,
        path: &mut String,
        depth: usize,
    ) -> Result<Value, CodecError> {
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let k = self.string(path)?;
            let len = path.len();
            path.push_str(&format!("[{k:?}]"));
            let v = self.value(et, path, depth + 1)?;
            path.truncate(len);
            m.insert(k, v);
        }
        Ok(Value::Map(m))
    }

    /// An object's `n` attributes, each at `path.name`: an attribute the type does not
    /// name is refused, one the input leaves out is null.
    fn object(
        &mut self,
        attrs: &BTreeMap<String, Type>,
        n: usize,
        path: &mut String,
        depth: usize,
    ) -> Result<Value, CodecError> {
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let k = self.string(path)?;
            let Some(at) = attrs.get(&k) else {
                return Err(err(path, format!("unexpected attribute {k:?}")));
            };
            let len = path.len();
            path.push('.');
            path.push_str(&k);
            let v = self.value(at, path, depth + 1)?;
            path.truncate(len);
            m.insert(k, v);
        }
        for name in attrs.keys() {
            m.entry(name.clone()).or_insert(Value::Null);
        }
        Ok(Value::Object(m))
    }
}

/// A number as cty writes it: an integer, a finite float, or (when it does not fit 64
/// bits) a decimal string.
fn number(item: Item<'_>, path: &str) -> Result<Value, CodecError> {
    match item {
        Item::Int(i) => Ok(Value::int(i)),
        Item::Uint(u) => Ok(i64::try_from(u)
            .map(Value::int)
            .unwrap_or(Value::float(u as f64))),
        Item::Float(f) if f.is_finite() => Ok(Value::float(f)),
        Item::Float(_) => Err(err(path, "number must be finite")),
        Item::Str(b) => {
            let s = std::str::from_utf8(b).map_err(|_| err(path, "number is not valid UTF-8"))?;
            if let Ok(i) = s.parse::<i64>() {
                Ok(Value::int(i))
            } else {
                match s.parse::<f64>() {
                    Ok(f) if f.is_finite() => Ok(Value::float(f)),
                    _ => Err(err(path, format!("{s:?} is not a number"))),
                }
            }
        }
        _ => Err(err(path, "expected number")),
    }
}

fn type_depth(t: &Type) -> usize {
    match t {
        Type::List(e) | Type::Set(e) | Type::Map(e) => 1 + type_depth(e),
        Type::Object(a) => 1 + a.values().map(type_depth).max().unwrap_or(0),
        Type::Tuple(ts) => 1 + ts.iter().map(type_depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_type() -> Type {
        Type::object([
            ("name", Type::String),
            ("n", Type::Number),
            ("ok", Type::Bool),
            ("tags", Type::map(Type::String)),
            ("ids", Type::set(Type::String)),
            (
                "nested",
                Type::list(Type::object([
                    ("x", Type::Number),
                    ("y", Type::list(Type::String)),
                ])),
            ),
            ("any", Type::Dynamic),
            ("pair", Type::Tuple(vec![Type::String, Type::Number])),
        ])
    }

    fn round_trip(v: &Value, t: &Type) -> Value {
        let bytes = encode(v, t).unwrap();
        decode(&bytes, t).unwrap()
    }

    #[test]
    fn unknown_is_cty_extension_zero() {
        assert_eq!(
            encode(&Value::Unknown, &Type::String).unwrap(),
            vec![0xd4, 0, 0]
        );
        assert_eq!(
            decode(&[0xd4, 0, 0], &Type::list(Type::String)).unwrap(),
            Value::Unknown
        );
        // A refined unknown (ext 12 with a payload) still reads as unknown.
        assert_eq!(
            decode(&[0xc7, 2, 12, 0x81, 0x01], &Type::String).unwrap(),
            Value::Unknown
        );
    }

    #[test]
    fn nulls_unknowns_and_nesting_round_trip() {
        let t = sample_type();
        let v = Value::object([
            ("name", Value::string("q")),
            ("n", Value::int(-70000)),
            ("ok", Value::Unknown),
            (
                "tags",
                Value::Map(
                    [
                        ("a".to_string(), Value::Unknown),
                        ("b".to_string(), Value::Null),
                    ]
                    .into(),
                ),
            ),
            ("ids", Value::Set(vec!["x".into(), Value::Unknown])),
            (
                "nested",
                Value::List(vec![
                    Value::object([
                        ("x", Value::float(1.5)),
                        ("y", Value::List(vec![Value::Null])),
                    ]),
                    Value::object([("x", Value::Null), ("y", Value::Unknown)]),
                ]),
            ),
            (
                "any",
                Value::object([("k", Value::List(vec![Value::int(1), Value::int(2)]))]),
            ),
            ("pair", Value::Tuple(vec!["a".into(), Value::int(300)])),
        ]);
        assert_eq!(round_trip(&v, &t), v);
        // Missing attributes come back as null.
        let sparse = Value::object([("name", Value::string("q"))]);
        let back = round_trip(&sparse, &t);
        assert!(back.get("tags").is_null());
        assert_eq!(back.as_map().unwrap().len(), 8);
        assert_eq!(round_trip(&Value::Null, &t), Value::Null);
        assert_eq!(round_trip(&Value::Unknown, &t), Value::Unknown);
    }

    #[test]
    fn numbers_in_every_width() {
        for i in [
            0,
            1,
            127,
            128,
            -1,
            -32,
            -33,
            -129,
            40000,
            -40000,
            1 << 40,
            i64::MIN,
            i64::MAX,
        ] {
            assert_eq!(
                round_trip(&Value::int(i), &Type::Number),
                Value::int(i),
                "{i}"
            );
        }
        assert_eq!(
            round_trip(&Value::float(0.25), &Type::Number),
            Value::float(0.25)
        );
        // uint64 beyond i64, float32, and cty's big-number strings.
        assert_eq!(
            decode(
                &[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                &Type::Number
            )
            .unwrap(),
            Value::float(u64::MAX as f64)
        );
        assert_eq!(
            decode(&[0xca, 0x3f, 0x80, 0, 0], &Type::Number).unwrap(),
            Value::int(1)
        );
        assert_eq!(
            decode(&[0xa3, b'1', b'.', b'5'], &Type::Number).unwrap(),
            Value::float(1.5)
        );
    }

    #[test]
    fn type_errors_name_the_path() {
        let t = Type::object([("tags", Type::map(Type::String))]);
        let v = Value::object([(
            "tags",
            Value::Map([("k".to_string(), Value::int(1))].into()),
        )]);
        let e = encode(&v, &t).unwrap_err();
        assert_eq!(e.path, ".tags[\"k\"]");
        let e = encode(&Value::object([("nope", Value::Null)]), &t).unwrap_err();
        assert!(e.message.contains("nope"));
    }

    #[test]
    fn hostile_input_is_an_error_not_a_panic() {
        // array32 claiming 4 billion elements, with nothing behind it.
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff], &Type::list(Type::String)).is_err());
        assert!(decode(&[0xdb, 0xff, 0xff, 0xff, 0xff], &Type::String).is_err());
        assert!(decode(&[], &Type::String).is_err());
        assert!(decode(&[0xc1], &Type::String).is_err());
        assert!(decode(&[0xc0, 0xc0], &Type::String).is_err());
        // A dynamic value whose embedded type nests deeper than the cap.
        let deep = format!("{}\"string\"{}", "[\"list\",".repeat(200), "]".repeat(200));
        let mut bytes = vec![0x92, 0xc5];
        bytes.extend_from_slice(&(deep.len() as u16).to_be_bytes());
        bytes.extend_from_slice(deep.as_bytes());
        bytes.push(0xc0);
        assert!(decode(&bytes, &Type::Dynamic).is_err());
    }
}
