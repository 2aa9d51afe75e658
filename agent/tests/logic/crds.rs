//! The CRD YAML in `agent/crds/` is generated from the Rust types and the rules
//! `joiner_agent::api::schema` adds (`rules`: what they refuse). This test regenerates it
//! and fails when the committed files are stale; `UPDATE_CRDS=1 cargo test -p joiner-agent
//! crds` rewrites them.

use std::path::PathBuf;

use joiner_agent::api::{schema, NodePool};

mod rules;

fn crds() -> Vec<(&'static str, String)> {
    let yaml = |crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
        format!(
            "# Generated from agent/src/api by `UPDATE_CRDS=1 cargo test -p joiner-agent crds`. Do not edit.\n{}",
            serde_yaml::to_string(&crd).expect("CRD serialises")
        )
    };
    vec![
        ("joiner.dev_nodepools.yaml", yaml(schema::node_pool())),
        ("joiner.dev_nodeclasses.yaml", yaml(schema::node_class())),
        ("joiner.dev_nodeclaims.yaml", yaml(schema::node_claim())),
        ("joiner.dev_nodeoverlays.yaml", yaml(schema::node_overlay())),
    ]
}

#[test]
fn crds_are_up_to_date() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds");
    let update = std::env::var_os("UPDATE_CRDS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (file, content) in crds() {
        let path = dir.join(file);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &content).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == content => {}
            _ => stale.push(file),
        }
    }
    assert!(
        stale.is_empty(),
        "CRDs in agent/crds are stale or missing: {stale:?}. Regenerate them with \
         `UPDATE_CRDS=1 cargo test -p joiner-agent crds` and commit the result."
    );
}

#[test]
fn crds_have_group_version_and_scope() {
    for crd in schema::crds() {
        assert_eq!(crd.spec.group, "joiner.dev");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.versions.len(), 1);
        assert_eq!(crd.spec.versions[0].name, "v1");
        assert!(crd.spec.versions[0].schema.is_some());
    }
    let np: NodePool = serde_yaml::from_str(
        r#"
apiVersion: joiner.dev/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5, r5], minValues: 2}
  limits: {cpu: "1000"}
"#,
    )
    .expect("a Karpenter-style manifest parses");
    assert_eq!(np.spec.template.spec.node_class_ref.kind, "NodeClass");
    assert_eq!(np.spec.template.spec.expire_after, "720h");
    assert_eq!(np.spec.disruption.budgets[0].nodes, "10%");
    assert_eq!(np.spec.template.spec.requirements[1].min_values, Some(2));
    assert!(joiner_agent::api::validate::node_pool(&np.spec, "spec").is_empty());
}
