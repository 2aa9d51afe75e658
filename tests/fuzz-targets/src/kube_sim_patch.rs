//! kube-sim's four PATCH bodies (JSON patch, merge patch, strategic merge, server-side apply)
//! against a live object: the first byte picks the kind, then the object's JSON, a NUL, and
//! the patch body as a client would send it.

use crate::{split_first, split_nul};
use kube_sim::patch::{self, PatchKind};

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, rest)) = split_first(data) else {
        return;
    };
    let kind = [
        PatchKind::Json,
        PatchKind::Merge,
        PatchKind::Strategic,
        PatchKind::Apply,
    ][selector as usize % 4];
    let (current, body) = split_nul(rest);
    let current: Option<serde_json::Value> = serde_json::from_slice(current).ok();
    let Ok(p) = patch::parse_body(kind, body) else {
        return;
    };
    match kind {
        PatchKind::Apply => {
            if let Ok(applied) = patch::server_side_apply(current.as_ref(), &p, "fuzz", "v1") {
                // Applying the same configuration again changes nothing but the timestamp.
                let _ = patch::server_side_apply(Some(&applied), &p, "fuzz", "v1");
            }
        }
        _ => {
            let current = current.unwrap_or_else(|| serde_json::json!({}));
            let _ = patch::apply_patch(kind, &current, &p);
        }
    }
}
