//! DynamicValue's msgpack codec, as Terraform sends every configuration, plan and state:
//! the first byte picks a schema type, the rest is the msgpack. Decoding must never panic or
//! over-allocate; whatever decodes must encode again (unless a dynamic value's inferred type
//! cannot hold it) and decode back to the same value.

use crate::{codec_type, has_dynamic, split_first};
use joiner_provider::protocol::msgpack;

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, bytes)) = split_first(data) else {
        return;
    };
    let ty = codec_type(selector);
    let Ok(value) = msgpack::decode(bytes, &ty) else {
        return;
    };
    let encoded = match msgpack::encode(&value, &ty) {
        Ok(e) => e,
        Err(e) if has_dynamic(&ty) => {
            let _ = e;
            return;
        }
        Err(e) => panic!("a decoded value does not encode again: {e}; value {value:?}"),
    };
    let again = msgpack::decode(&encoded, &ty)
        .unwrap_or_else(|e| panic!("our own encoding does not decode: {e}; value {value:?}"));
    assert_eq!(again, value, "msgpack round trip changed the value");
}
