//! What users' configurations write, on a real kube-apiserver carrying joiner's CRDs: every
//! NodePool, NodeClass and NodeOverlay that the examples and the converter's output plan is
//! turned into the spec the provider would write (its own model, the mapping `create`
//! server-side-applies) and sent with `kubectl create --dry-run=server`, which runs the API
//! server's whole validation (OpenAPI schema and CEL rules) and stores nothing. Each must be
//! accepted: a rule that refuses what our own examples or a migrated Karpenter manifest
//! write would stop a GitOps apply of exactly what the docs tell users to write.
//!
//! Bad objects are the other half: `crd_rules` holds the provider's plan to the table of
//! mistakes, and the agent's `logic::crds::rules` holds the API server to the same table.

use std::collections::BTreeMap;

use joiner_agent_world::crd_rules::Kind;
use joiner_e2e::{Plan, Workspace};
use joiner_provider::model::node_class::NodeClassModel;
use joiner_provider::model::node_overlay::NodeOverlayModel;
use joiner_provider::model::node_pool::NodePoolModel;
use joiner_provider::model::Model;
use joiner_provider::protocol::json::from_json;
use joiner_provider::protocol::resource::Resource;
use joiner_provider::resources::{node_class, node_overlay, node_pool};
use serde_json::{json, Value as Json};

/// Stands in for a value the plan cannot know yet (an id, a role name another resource
/// makes). A string every field of these kinds that can be unknown at plan accepts.
const UNKNOWN_AT_PLAN: &str = "known-after-apply";

/// One object a configuration writes: where it came from, its kind, name and spec.
struct Written {
    source: String,
    kind: Kind,
    name: String,
    spec: Json,
}

/// `after` with every value Terraform marks unknown in `unknown` (the plan's
/// `after_unknown`) set to [`UNKNOWN_AT_PLAN`]. Only strings are expected to be unknown in
/// these resources; anything else fails loudly rather than being guessed.
fn fill_unknowns(after: &mut Json, unknown: &Json, at: &str) {
    match unknown {
        Json::Bool(true) => {
            assert!(
                after.is_null() || after.is_string(),
                "{at}: unknown at plan and not a string ({after}); give it a stand-in"
            );
            *after = json!(UNKNOWN_AT_PLAN);
        }
        Json::Object(fields) => {
            if after.is_null() {
                *after = json!({});
            }
            for (k, u) in fields {
                fill_unknowns(&mut after[k], u, &format!("{at}.{k}"));
            }
        }
        Json::Array(items) => {
            for (i, u) in items.iter().enumerate() {
                if let Some(slot) = after.get_mut(i) {
                    fill_unknowns(slot, u, &format!("{at}[{i}]"));
                }
            }
        }
        _ => {}
    }
}

/// The spec the provider writes for a planned resource of type `ty`, through the same
/// model `create` uses; None for resource types that write no custom object.
fn spec_of(ty: &str, planned: &Json) -> Option<(Kind, String, Json)> {
    // `timeouts` is the protocol layer's block, not the resource's schema, and no part of
    // the spec.
    let mut planned = planned.clone();
    if let Some(fields) = planned.as_object_mut() {
        fields.remove("timeouts");
    }
    let decode = |schema: joiner_provider::protocol::schema::Schema| {
        from_json(&planned, &schema.block.implied_type())
            .unwrap_or_else(|e| panic!("{ty}: the planned value does not decode: {e:?}"))
    };
    let (kind, name, spec) = match ty {
        "joiner_node_pool" => {
            let m = NodePoolModel::from_value(&decode(node_pool::NodePool.schema()));
            (Kind::Pool, m.name.clone(), serde_json::to_value(m.spec()))
        }
        "joiner_node_class" => {
            let m = NodeClassModel::from_value(&decode(node_class::NodeClass.schema()));
            (Kind::Class, m.name.clone(), serde_json::to_value(m.spec()))
        }
        "joiner_node_overlay" => {
            let m = NodeOverlayModel::from_value(&decode(node_overlay::NodeOverlay.schema()));
            (
                Kind::Overlay,
                m.name.clone(),
                serde_json::to_value(m.spec()),
            )
        }
        _ => return None,
    };
    let name = name.unwrap_or_else(|| panic!("{ty}: a planned object without a name"));
    Some((kind, name, spec.expect("a spec serializes")))
}

/// Every custom object `plan` creates, child modules included.
fn written_by(plan: &Plan, source: &str) -> Vec<Written> {
    let changes = plan.0["resource_changes"].as_array().cloned();
    let mut out = Vec::new();
    for change in changes.unwrap_or_default() {
        let ty = change["type"].as_str().unwrap_or_default();
        let mut after = change["change"]["after"].clone();
        fill_unknowns(
            &mut after,
            &change["change"]["after_unknown"],
            change["address"].as_str().unwrap_or_default(),
        );
        if let Some((kind, name, spec)) = spec_of(ty, &after) {
            let source = format!("{source} {}", change["address"].as_str().unwrap_or(""));
            out.push(Written {
                source,
                kind,
                name,
                spec,
            });
        }
    }
    out
}

mod real_control_plane {
    use super::*;
    use crate::convert::{convert, manifests, VARIABLES};
    use crate::examples::{
        example_workspace, existing_cluster, network, oidc_provider, tagged_network,
    };
    use joiner_control_plane::{ControlPlane, Options};
    use joiner_e2e::{Aws, MotoServer};

    /// kubectl against the control plane, the object written to a file first.
    fn dry_run(
        cp: &ControlPlane,
        dir: &std::path::Path,
        w: &Written,
        i: usize,
    ) -> Result<String, String> {
        let obj = json!({"apiVersion": "joiner.dev/v1", "kind": w.kind.name(),
            "metadata": {"name": w.name}, "spec": w.spec});
        let file = dir.join(format!("written-{i}.json"));
        std::fs::write(&file, obj.to_string()).unwrap();
        let path = file.to_string_lossy();
        cp.kubectl(&["create", "--dry-run=server", "-o", "name", "-f", &path])
            .map_err(|e| format!("{e:#}"))
    }

    /// The examples as a user applies them, planned against the local AWS world with what
    /// each needs there first (tagged subnets; for `existing-cluster`, the cluster made
    /// outside Terraform and its OIDC provider).
    fn examples(moto: &MotoServer, kubeconfig: &std::path::Path) -> Vec<Written> {
        let aws = Aws::new(moto);
        network(&aws, ("dev", "us-east-1"), 10);
        network(&aws, ("prod", "us-west-2"), 20);
        network(&aws, ("quickstart", "us-east-1"), 40);
        let legacy: Vec<String> =
            tagged_network(&aws, ("legacy", "us-east-1"), 30, "karpenter.sh/discovery")
                .into_iter()
                .collect();
        let (_, issuer) = existing_cluster(&aws, "legacy", &legacy);
        oidc_provider(&aws, &issuer);
        let mut out = Vec::new();
        let root = joiner_test_support::workspace_root().join("examples");
        let mut dirs: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        dirs.sort();
        for dir in dirs {
            // An example of only AWS objects (`groupless-cluster`) writes no custom object.
            let main = std::fs::read_to_string(root.join(&dir).join("main.tf")).unwrap();
            let writes = [
                "joiner_node_pool",
                "joiner_node_class",
                "joiner_node_overlay",
            ]
            .iter()
            .any(|ty| main.contains(&format!("resource \"{ty}\"")));
            if !writes && !main.contains("/spot-node-pools") {
                println!("examples/{dir}: writes no NodePool, NodeClass or NodeOverlay");
                continue;
            }
            let region = if dir == "prod" {
                "us-west-2"
            } else {
                "us-east-1"
            };
            let tf = example_workspace(moto, &format!("examples/{dir}"), region, kubeconfig);
            let written = written_by(&tf.plan(), &format!("examples/{dir}"));
            println!("examples/{dir}: {} objects", written.len());
            out.extend(written);
        }
        out
    }

    /// Every Karpenter manifest the converter is tested on, converted and planned.
    fn converted(moto: &MotoServer) -> Vec<Written> {
        let mut out = Vec::new();
        for file in manifests() {
            let tf = Workspace::new(moto);
            tf.write_config(&format!("{}{VARIABLES}", convert(&file)));
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let written = written_by(&tf.plan(), &format!("converted {name}"));
            assert!(
                !written.is_empty(),
                "{name}: the converted plan writes nothing"
            );
            out.extend(written);
        }
        out
    }

    #[test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    fn every_object_the_examples_and_the_converter_write_is_accepted() {
        let cp = ControlPlane::start(Options {
            controller_manager: false,
            scheduler: false,
            kwok: false,
            ..Default::default()
        })
        .expect("start the control plane");
        let crds: Vec<Json> = joiner_agent::api::schema::crds()
            .into_iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        cp.install_crds(&crds).expect("the CRDs install");
        let dir = tempfile::tempdir().unwrap();

        // The rules are live: a mistake of each kind is refused before anything is judged
        // accepted (an API server that validated nothing would accept everything below).
        let mut probed = Vec::new();
        for (i, bad) in joiner_agent_world::crd_rules::table().iter().enumerate() {
            if probed.contains(&bad.kind) {
                continue;
            }
            probed.push(bad.kind);
            let probe = Written {
                source: bad.what.to_string(),
                kind: bad.kind,
                name: format!("probe-{i}"),
                spec: bad.spec(),
            };
            let refused = dry_run(&cp, dir.path(), &probe, i).expect_err(bad.what);
            assert!(refused.contains(bad.field), "{}: {refused}", probe.source);
        }

        let moto = MotoServer::start();
        let mut written = examples(&moto, cp.kubeconfig_path());
        let from_examples = written.len();
        written.extend(converted(&moto));
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        let mut refused = Vec::new();
        for (i, w) in written.iter().enumerate() {
            *by_kind.entry(w.kind.name()).or_default() += 1;
            if let Err(e) = dry_run(&cp, dir.path(), w, 1000 + i) {
                refused.push(format!(
                    "{} ({} {}): {e}\n{}",
                    w.source,
                    w.kind.name(),
                    w.name,
                    w.spec
                ));
            }
        }
        println!(
            "{} objects from the examples, {} from converted manifests: {by_kind:?}",
            from_examples,
            written.len() - from_examples
        );
        assert!(
            refused.is_empty(),
            "refused by kube-apiserver:\n{}",
            refused.join("\n")
        );
        for kind in ["NodePool", "NodeClass"] {
            assert!(by_kind.get(kind).is_some_and(|n| *n >= 3), "{by_kind:?}");
        }
    }
}
