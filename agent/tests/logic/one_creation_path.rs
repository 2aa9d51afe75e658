//! Capacity has one path: only provisioning creates NodeClaims. Interruption and disruption
//! disrupt claims and leave the replacement to the provisioner's next batch; a second
//! creation path would bring back plans that do not see each other (the double-counted
//! free capacity the interruption controller once needed a ledger for).
//!
//! Checked on the source tree: every file of `agent/src` that can write a NodeClaim into
//! existence (a `.create(` or a server-side apply, `Patch::Apply`, with an `Api<NodeClaim>`
//! in the same file) must be `controllers/nodeclaims.rs`, and its creation function is
//! called from provisioning's round only (and its adoption variant, which
//! records a running node of Karpenter's and launches nothing, from the adoption loop only). Conservative on purpose: a file
//! creating something else next to an `Api<NodeClaim>` fails too, and is looked at.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}")) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

#[test]
fn nodeclaims_are_created_in_one_module_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 50, "agent/src read: {} files", files.len());

    let mut creators = Vec::new();
    let mut callers = Vec::new();
    let mut adopters = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let nodeclaim_api = [
            "Api<NodeClaim>",
            "Api::<NodeClaim>",
            "Api<crate::api::NodeClaim>",
            "node_claim_api()",
        ]
        .iter()
        .any(|t| text.contains(t));
        let creates = text.contains(".create(") || text.contains("Patch::Apply");
        if nodeclaim_api && creates {
            creators.push(relative(&root, f));
        }
        if text.contains("nodeclaims::create(") {
            callers.push(relative(&root, f));
        }
        if text.contains("nodeclaims::create_adopted(") {
            adopters.push(relative(&root, f));
        }
    }
    assert_eq!(
        creators,
        vec!["controllers/nodeclaims.rs".to_string()],
        "NodeClaims are created by provisioning only"
    );
    assert_eq!(
        callers,
        vec!["controllers/provisioning/mod.rs".to_string()],
        "the creation function is called by the provisioning round only"
    );
    // Recording a running node launches nothing: adoption alone may, for Karpenter's.
    assert_eq!(
        adopters,
        vec!["controllers/adoption/mod.rs".to_string()],
        "adopted claims are created by the adoption loop only"
    );
}
