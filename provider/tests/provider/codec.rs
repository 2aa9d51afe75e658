//! Property tests for the DynamicValue codecs: any typed value survives a msgpack round
//! trip (and a JSON one when it has no unknowns), and no input bytes make decoding panic.

use joiner_provider::protocol::value::{Type, Value};
use joiner_provider::protocol::{json, msgpack};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn arb_type() -> impl Strategy<Value = Type> {
    let leaf = prop_oneof![Just(Type::Bool), Just(Type::Number), Just(Type::String)];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(Type::list),
            inner.clone().prop_map(Type::set),
            inner.clone().prop_map(Type::map),
            prop::collection::btree_map("[a-z_]{1,6}", inner.clone(), 0..4).prop_map(Type::Object),
            prop::collection::vec(inner, 0..3).prop_map(Type::Tuple),
        ]
    })
}

fn arb_known(ty: &Type) -> BoxedStrategy<Value> {
    match ty {
        Type::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Type::Number => prop_oneof![
            any::<i64>().prop_map(Value::int),
            // Quarters are exact in binary and decimal, so JSON cannot round them.
            (-4_000_000_000i64..4_000_000_000).prop_map(|q| Value::float(q as f64 / 4.0)),
        ]
        .boxed(),
        Type::String => ".{0,12}".prop_map(Value::String).boxed(),
        Type::Dynamic => Just(Value::Null).boxed(),
        Type::List(et) => prop::collection::vec(arb_value(et), 0..4)
            .prop_map(Value::List)
            .boxed(),
        Type::Set(et) => prop::collection::vec(arb_value(et), 0..4)
            .prop_map(Value::Set)
            .boxed(),
        Type::Map(et) => prop::collection::btree_map(".{0,5}", arb_value(et), 0..4)
            .prop_map(Value::Map)
            .boxed(),
        Type::Object(attrs) => {
            let parts: Vec<(String, BoxedStrategy<Value>)> = attrs
                .iter()
                .map(|(k, t)| (k.clone(), arb_value(t)))
                .collect();
            let names: Vec<String> = parts.iter().map(|(k, _)| k.clone()).collect();
            let strategies: Vec<BoxedStrategy<Value>> = parts.into_iter().map(|(_, s)| s).collect();
            strategies
                .prop_map(move |vals| {
                    Value::Object(names.iter().cloned().zip(vals).collect::<BTreeMap<_, _>>())
                })
                .boxed()
        }
        Type::Tuple(ets) => {
            let strategies: Vec<BoxedStrategy<Value>> = ets.iter().map(arb_value).collect();
            strategies.prop_map(Value::Tuple).boxed()
        }
    }
}

/// A value of type `ty`, with nulls and unknowns anywhere.
fn arb_value(ty: &Type) -> BoxedStrategy<Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => Just(Value::Unknown),
        6 => arb_known(ty),
    ]
    .boxed()
}

fn typed_value() -> impl Strategy<Value = (Type, Value)> {
    arb_type().prop_flat_map(|t| {
        let v = arb_value(&t);
        (Just(t), v)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn msgpack_round_trips((ty, v) in typed_value()) {
        let bytes = msgpack::encode(&v, &ty).unwrap();
        prop_assert_eq!(msgpack::decode(&bytes, &ty).unwrap(), v.clone());
        // As a dynamic value too: the type travels with it.
        if v.is_fully_known() && !v.is_null() {
            let dynamic = msgpack::encode(&v, &Type::Dynamic).unwrap();
            let back = msgpack::decode(&dynamic, &Type::Dynamic).unwrap();
            prop_assert_eq!(msgpack::encode(&back, &Type::Dynamic).unwrap(), dynamic);
        }
    }

    #[test]
    fn json_round_trips_known_values((ty, v) in typed_value()) {
        match json::encode(&v, &ty) {
            Ok(bytes) => prop_assert_eq!(json::decode(&bytes, &ty).unwrap(), v),
            Err(e) => prop_assert!(!v.is_fully_known(), "known value refused: {e}"),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), ty in arb_type()) {
        let _ = msgpack::decode(&bytes, &ty);
        let _ = msgpack::decode(&bytes, &Type::Dynamic);
        let _ = json::decode(&bytes, &ty);
    }

    #[test]
    fn corrupted_encodings_never_panic((ty, v) in typed_value(), flip in any::<(usize, u8)>()) {
        let mut bytes = msgpack::encode(&v, &ty).unwrap();
        if !bytes.is_empty() {
            let i = flip.0 % bytes.len();
            bytes[i] ^= flip.1;
        }
        let _ = msgpack::decode(&bytes, &ty);
        bytes.truncate(bytes.len() / 2);
        let _ = msgpack::decode(&bytes, &ty);
    }
}
