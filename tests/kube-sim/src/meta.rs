//! Reading an object's metadata, and the API server's clock format.
//!
//! Below both the store and admission, which read the same fields: admission checks an
//! object before the store writes it, and the store calls admission.

use serde_json::Value;

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

pub fn name_of(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace_of(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
