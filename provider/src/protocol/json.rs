//! DynamicValue's JSON encoding, used by Terraform for stored state (`RawState.json` in
//! UpgradeResourceState) and accepted anywhere a DynamicValue may come as JSON.
//!
//! Like msgpack it is type-directed; JSON cannot express unknown values, and a dynamic value
//! is the object `{"value": ..., "type": ...}`.

use super::msgpack::{infer_type, CodecError};
use super::value::{Type, Value};
use serde_json::Value as J;
use std::collections::BTreeMap;

fn err(path: &str, message: impl Into<String>) -> CodecError {
    CodecError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Parses JSON bytes and decodes them as type `ty`.
pub fn decode(bytes: &[u8], ty: &Type) -> Result<Value, CodecError> {
    let j: J = serde_json::from_slice(bytes).map_err(|e| err("", format!("invalid JSON: {e}")))?;
    from_json(&j, ty)
}

/// Decodes an already-parsed JSON value as type `ty`. Missing object attributes are null.
pub fn from_json(j: &J, ty: &Type) -> Result<Value, CodecError> {
    dec(j, ty, &mut String::new())
}

fn dec(j: &J, ty: &Type, path: &mut String) -> Result<Value, CodecError> {
    if j.is_null() {
        return Ok(Value::Null);
    }
    match ty {
        Type::Dynamic => {
            let (Some(v), Some(t)) = (j.get("value"), j.get("type")) else {
                return Err(err(
                    path,
                    "dynamic value must be an object with \"value\" and \"type\"",
                ));
            };
            let t = Type::from_json(t).map_err(|e| err(path, e))?;
            dec(v, &t, path)
        }
        Type::Bool => j
            .as_bool()
            .map(Value::Bool)
            .ok_or_else(|| err(path, "expected bool")),
        Type::Number => dec_number(j, path),
        Type::String => match j {
            J::String(s) => Ok(Value::String(s.clone())),
            // cty converts primitives to string the same way.
            J::Number(n) => Ok(Value::String(n.to_string())),
            J::Bool(b) => Ok(Value::String(b.to_string())),
            _ => Err(err(path, "expected string")),
        },
        Type::List(et) | Type::Set(et) => {
            let arr = j
                .as_array()
                .ok_or_else(|| err(path, format!("expected {}", ty.friendly_name())))?;
            let items = dec_elements(arr.iter().map(|x| (x, &**et)), path)?;
            Ok(if matches!(ty, Type::List(_)) {
                Value::List(items)
            } else {
                Value::Set(items)
            })
        }
        Type::Tuple(ets) => {
            let arr = j.as_array().ok_or_else(|| err(path, "expected tuple"))?;
            if arr.len() != ets.len() {
                return Err(err(
                    path,
                    format!("tuple needs {} elements, got {}", ets.len(), arr.len()),
                ));
            }
            Ok(Value::Tuple(dec_elements(arr.iter().zip(ets), path)?))
        }
        Type::Map(et) => {
            let obj = j
                .as_object()
                .ok_or_else(|| err(path, format!("expected {}", ty.friendly_name())))?;
            let mut m = BTreeMap::new();
            for (k, x) in obj {
                let len = path.len();
                path.push_str(&format!("[{k:?}]"));
                m.insert(k.clone(), dec(x, et, path)?);
                path.truncate(len);
            }
            Ok(Value::Map(m))
        }
        Type::Object(attrs) => {
            let obj = j.as_object().ok_or_else(|| err(path, "expected object"))?;
            dec_object(obj, attrs, path)
        }
    }
}

fn dec_number(j: &J, path: &str) -> Result<Value, CodecError> {
    match j {
        J::Number(n) => Ok(match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::int(i),
            (None, Some(f)) => Value::float(f),
            _ => return Err(err(path, "number out of range")),
        }),
        // Terraform accepts numbers written as strings in state. Rust also parses "NaN",
        // "inf" and "1e999" as floats; cty numbers are finite (the msgpack decoder refuses
        // the others), so state holding one must not decode into a value that Terraform
        // would then get back as msgpack NaN or infinity.
        J::String(s) => match s.parse::<i64>() {
            Ok(i) => Ok(Value::int(i)),
            Err(_) => match s.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Value::float(f)),
                _ => Err(err(path, format!("{s:?} is not a finite number"))),
            },
        },
        _ => Err(err(path, "expected number")),
    }
}

/// The elements of a list, set or tuple, each decoded by its type at `path[i]`.
fn dec_elements<'j, 't>(
    elements: impl ExactSizeIterator<Item = (&'j J, &'t Type)>,
    path: &mut String,
) -> Result<Vec<Value>, CodecError> {
    let mut items = Vec::with_capacity(elements.len());
    for (i, (x, et)) in elements.enumerate() {
        let len = path.len();
        path.push_str(&format!("[{i}]"));
        items.push(dec(x, et, path)?);
        path.truncate(len);
    }
    Ok(items)
}

/// An object's attributes, each at `path.name`: an attribute the type does not name is
/// refused, one the JSON leaves out is null.
fn dec_object(
    obj: &serde_json::Map<String, J>,
    attrs: &BTreeMap<String, Type>,
    path: &mut String,
) -> Result<Value, CodecError> {
    let mut m = BTreeMap::new();
    for (k, x) in obj {
        let Some(at) = attrs.get(k) else {
            return Err(err(path, format!("unexpected attribute {k:?}")));
        };
        let len = path.len();
        path.push('.');
        path.push_str(k);
        m.insert(k.clone(), dec(x, at, path)?);
        path.truncate(len);
    }
    for name in attrs.keys() {
        m.entry(name.clone()).or_insert(Value::Null);
    }
    Ok(Value::Object(m))
}

/// Encodes `v` as JSON for type `ty`. Unknown values cannot be written as JSON.
pub fn to_json(v: &Value, ty: &Type) -> Result<J, CodecError> {
    enc(v, ty, &mut String::new())
}

/// Encodes `v` as JSON bytes for type `ty`.
pub fn encode(v: &Value, ty: &Type) -> Result<Vec<u8>, CodecError> {
    Ok(serde_json::to_vec(&to_json(v, ty)?).expect("JSON values always serialize"))
}

fn enc(v: &Value, ty: &Type, path: &mut String) -> Result<J, CodecError> {
    match (ty, v) {
        (_, Value::Null) => Ok(J::Null),
        (_, Value::Unknown) => Err(err(path, "unknown values cannot be encoded as JSON")),
        (Type::Dynamic, v) => {
            let t = infer_type(v);
            Ok(serde_json::json!({"value": enc(v, &t, path)?, "type": t.to_json()}))
        }
        (Type::Bool, Value::Bool(b)) => Ok(J::Bool(*b)),
        (Type::Number, Value::Number(n)) => Ok(match n.as_i64() {
            Some(i) => J::from(i),
            None => serde_json::Number::from_f64(n.as_f64())
                .map(J::Number)
                .ok_or_else(|| err(path, "number must be finite"))?,
        }),
        (Type::String, Value::String(s)) => Ok(J::String(s.clone())),
        (Type::List(et), Value::List(items)) | (Type::Set(et), Value::Set(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                out.push(enc(x, et, path)?);
                path.truncate(len);
            }
            Ok(J::Array(out))
        }
        (Type::Tuple(ets), Value::Tuple(items)) if ets.len() == items.len() => {
            let mut out = Vec::with_capacity(items.len());
            for (x, et) in items.iter().zip(ets) {
                out.push(enc(x, et, path)?);
            }
            Ok(J::Array(out))
        }
        (Type::Map(et), Value::Map(m)) => {
            let mut out = serde_json::Map::new();
            for (k, x) in m {
                let len = path.len();
                path.push_str(&format!("[{k:?}]"));
                out.insert(k.clone(), enc(x, et, path)?);
                path.truncate(len);
            }
            Ok(J::Object(out))
        }
        (Type::Object(attrs), Value::Object(m)) => {
            if let Some(extra) = m.keys().find(|k| !attrs.contains_key(*k)) {
                return Err(err(path, format!("unexpected attribute {extra:?}")));
            }
            let mut out = serde_json::Map::new();
            for (name, at) in attrs {
                let len = path.len();
                path.push('.');
                path.push_str(name);
                out.insert(
                    name.clone(),
                    enc(m.get(name).unwrap_or(&Value::Null), at, path)?,
                );
                path.truncate(len);
            }
            Ok(J::Object(out))
        }
        (ty, _) => Err(err(path, format!("expected {}", ty.friendly_name()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_json_round_trip_with_nulls_and_nesting() {
        let t = Type::object([
            ("name", Type::String),
            ("retention", Type::Number),
            ("tags", Type::map(Type::String)),
            ("rules", Type::set(Type::object([("id", Type::String)]))),
            ("extra", Type::Dynamic),
        ]);
        let v = Value::object([
            ("name", Value::string("q")),
            ("retention", Value::int(300)),
            ("tags", Value::Null),
            (
                "rules",
                Value::Set(vec![Value::object([("id", Value::string("a"))])]),
            ),
            ("extra", Value::List(vec![Value::Bool(true)])),
        ]);
        let bytes = encode(&v, &t).unwrap();
        assert_eq!(decode(&bytes, &t).unwrap(), v);
    }

    #[test]
    fn missing_attributes_are_null_and_unknowns_refused() {
        let t = Type::object([("a", Type::String), ("b", Type::Number)]);
        let v = decode(br#"{"a":"x"}"#, &t).unwrap();
        assert!(v.get("b").is_null());
        assert!(decode(br#"{"c":1}"#, &t)
            .unwrap_err()
            .message
            .contains("\"c\""));
        assert!(encode(&Value::object([("a", Value::Unknown)]), &t).is_err());
        assert!(decode(b"{not json", &t).is_err());
    }

    /// Found writing the fuzz target `fuzz/fuzz_targets/json_value.rs`: a number stored as
    /// the string "NaN" decoded into a value whose msgpack our own decoder (and Terraform)
    /// refuses.
    #[test]
    fn numbers_written_as_strings_must_be_finite() {
        for s in ["NaN", "inf", "-infinity", "1e999"] {
            let e = decode(format!("{s:?}").as_bytes(), &Type::Number).unwrap_err();
            assert!(e.message.contains("not a finite number"), "{s}: {e}");
        }
        assert_eq!(
            decode(br#""1.5e3""#, &Type::Number).unwrap(),
            Value::float(1500.0)
        );
        assert_eq!(decode(br#""-7""#, &Type::Number).unwrap(), Value::int(-7));
    }

    /// Found by fuzzing (fuzz/fuzz_targets/json_value.rs): serde_json's default float parser
    /// may be one unit in the last place off, so state holding `5e36` read back as
    /// 5.0000000000000004e36 and a refresh showed a change nobody made. The workspace turns
    /// on serde_json's `float_roundtrip`, which parses exactly.
    #[test]
    fn numbers_in_state_parse_exactly() {
        for (text, f) in [
            ("5e36", 5e36),
            ("0.1", 0.1),
            ("1.7976931348623157e308", f64::MAX),
        ] {
            let Value::Number(n) = decode(text.as_bytes(), &Type::Number).unwrap() else {
                panic!("{text} is not a number");
            };
            assert_eq!(n.as_f64().to_bits(), f.to_bits(), "{text}");
        }
    }
}
