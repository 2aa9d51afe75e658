//! DynamicValue's JSON codec (stored state, `RawState.json`) and cty's JSON type expressions:
//! the first byte picks a schema type, the rest is the JSON. Whatever decodes must encode as
//! JSON and as msgpack (state goes back to Terraform as msgpack) and decode back unchanged.

use crate::{codec_type, has_dynamic, split_first};
use joiner_provider::protocol::value::Type;
use joiner_provider::protocol::{json, msgpack};

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, bytes)) = split_first(data) else {
        return;
    };
    // The same bytes as a type expression, as a dynamic value's "type" carries it.
    if let Ok(j) = serde_json::from_slice::<serde_json::Value>(bytes) {
        if let Ok(t) = Type::from_json(&j) {
            assert_eq!(Type::from_json(&t.to_json()).as_ref(), Ok(&t));
        }
    }
    let ty = codec_type(selector);
    let Ok(value) = json::decode(bytes, &ty) else {
        return;
    };
    let dynamic = has_dynamic(&ty);
    match json::encode(&value, &ty) {
        Ok(encoded) => {
            let again = json::decode(&encoded, &ty)
                .unwrap_or_else(|e| panic!("our own JSON does not decode: {e}; value {value:?}"));
            assert_eq!(again, value, "JSON round trip changed the value");
        }
        Err(e) if dynamic => {
            let _ = e;
        }
        Err(e) => panic!("a decoded value does not encode as JSON: {e}; value {value:?}"),
    }
    match msgpack::encode(&value, &ty) {
        Ok(encoded) => {
            let again = msgpack::decode(&encoded, &ty).unwrap_or_else(|e| {
                panic!("state decoded from JSON does not decode from msgpack: {e}; value {value:?}")
            });
            assert_eq!(again, value, "JSON to msgpack changed the value");
        }
        Err(e) if dynamic => {
            let _ = e;
        }
        Err(e) => {
            panic!("state decoded from JSON does not encode as msgpack: {e}; value {value:?}")
        }
    }
}
