//! The converter on every manifest in `provider/tests/karpenter-manifests/`: the output is
//! compared with the `.tf` beside it (`UPDATE_GOLDEN=1` rewrites them; review the diff), and
//! the conversions that matter are asserted one by one. `tests/e2e/tests/e2e/convert.rs` plans
//! the same output with the real Terraform CLI.

use super::{convert, Options};
use std::path::PathBuf;

fn manifests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/karpenter-manifests")
}

fn converted(file: &str) -> String {
    let yaml = std::fs::read_to_string(manifests().join(file)).expect("manifest");
    convert(&yaml, file, &Options::default()).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The output with runs of spaces squeezed, so that assertions do not depend on alignment.
fn squeezed(file: &str) -> String {
    let out = converted(file);
    let mut s = String::with_capacity(out.len());
    for c in out.chars() {
        if !(c == ' ' && s.ends_with(' ')) {
            s.push(c);
        }
    }
    s
}

#[test]
fn every_manifest_matches_its_golden_output() {
    let mut seen = 0;
    for entry in std::fs::read_dir(manifests()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let file = path.file_name().unwrap().to_str().unwrap();
        let out = converted(file);
        let golden = path.with_extension("tf");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &out).unwrap();
        }
        let want = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", golden.display()));
        assert_eq!(
            out,
            want,
            "{file}: output differs from {}",
            golden.display()
        );
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} manifests");
}

#[test]
fn v1alpha5_provisioners_become_a_pool_and_a_class() {
    let out = squeezed("002-provisioner-v1alpha5.yaml");
    assert!(
        out.contains("resource \"joiner_node_class\" \"default\""),
        "{out}"
    );
    assert!(
        out.contains("node_class = joiner_node_class.default.name"),
        "{out}"
    );
    // The instance profile keeps its name with the cluster substituted.
    assert!(
        out.contains("instance_profile = \"KarpenterNodeInstanceProfile-${var.cluster_name}\""),
        "{out}"
    );
    // ttlSecondsAfterEmpty 30 is WhenEmpty after 30 s.
    assert!(
        out.contains("consolidation_policy = \"WhenEmpty\""),
        "{out}"
    );
    assert!(out.contains("consolidate_after = \"30s\""), "{out}");
    // No subnet or security-group selector in the manifest: a discovery term, said so.
    assert!(out.contains("the manifest has no subnetSelector"), "{out}");

    let out = squeezed("003-provisioner-v1alpha5.yaml");
    assert!(
        out.contains("expire_after 720h is joiner's default"),
        "{out}"
    );
    assert!(
        out.contains("ttlSecondsUntilExpired 2592000 is expire_after"),
        "{out}"
    );
    assert!(out.contains("consolidate_after = \"Never\""), "{out}");
    assert!(
        out.contains("tags = { \"karpenter.sh/discovery\" = var.cluster_name }"),
        "{out}"
    );
    assert!(out.contains("role = var.node_role_name"), "{out}");
}

#[test]
fn v1beta1_names_are_renamed_with_a_comment() {
    let out = squeezed("004-nodepool-v1beta1.yaml");
    assert!(
        out.contains("consolidation_policy = \"WhenEmptyOrUnderutilized\""),
        "{out}"
    );
    assert!(
        out.contains("WhenUnderutilized (v1beta1) was renamed"),
        "{out}"
    );
    assert!(
        out.contains("expire_after 720h is joiner's default"),
        "{out}"
    );
    assert!(out.contains("node_class = \"default\""), "{out}");
    assert!(!out.contains("WhenUnderutilized\""), "{out}");

    let out = squeezed("v1beta1-pool-and-class.yaml");
    assert!(out.contains("alias = \"bottlerocket@latest\""), "{out}");
    assert!(out.contains("kubelet moved to the node class"), "{out}");
    assert!(out.contains("expire_after = \"Never\""), "{out}");
}

#[test]
fn unmodelled_keys_and_fields_are_commented_not_dropped() {
    let out = squeezed("v1-general.yaml");
    // A requirement joiner would refuse is kept out, with why.
    assert!(
        out.contains("not converted: requirement karpenter.k8s.aws/placement-group-id")
            && out.contains("no placement group"),
        "{out}"
    );
    assert!(!out.contains("key = \"karpenter.k8s.aws/placement-group-id\""));
    // Every well-known key Karpenter derives from the instance type converts.
    assert!(
        out.contains("key = \"karpenter.k8s.aws/instance-gpu-memory\""),
        "{out}"
    );
    assert!(
        out.contains("not converted: kubelet.imageGCHighThresholdPercent"),
        "{out}"
    );
    assert!(
        out.contains("not converted: tag kubernetes.io/cluster/prod"),
        "{out}"
    );
    assert!(out.contains("instance_store_policy = \"RAID0\""), "{out}");
    assert!(!out.contains("instanceStorePolicy"), "{out}");
    assert!(out.contains("min_values = 2"), "{out}");
    assert!(
        out.contains("reasons = [\"Underutilized\", \"Drifted\"]"),
        "{out}"
    );

    let out = squeezed("v1alpha5-provider-ref.yaml");
    assert!(out.contains("id = \"subnet-0fedcba9876543210\""), "{out}");
    assert!(out.contains("not converted: launchTemplate"), "{out}");
    assert!(
        out.contains("node_class = joiner_node_class.legacy.name"),
        "{out}"
    );
}

#[test]
fn bad_documents_name_the_document() {
    let e = convert("kind: [", "x", &Options::default()).unwrap_err();
    assert!(e.to_string().starts_with("document 0: not YAML"), "{e}");
    let e = convert(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec: {template: {spec: {}}}\n",
        "x",
        &Options::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("NodePool \"p\""), "{e}");
    assert!(e.to_string().contains("nodeClassRef"), "{e}");
    let out = convert(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        "x",
        &Options::default(),
    )
    .unwrap();
    assert!(out.contains("# skipped: ConfigMap \"c\" (v1)"), "{out}");
}

#[test]
fn a_static_balanced_pool_keeps_its_replicas_and_policy() {
    let yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: fixed}\n\
                spec:\n  replicas: 3\n  disruption: {consolidationPolicy: Balanced}\n  \
                template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}}\n";
    let out = convert(yaml, "x", &Options::default()).unwrap();
    let squeezed: String = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(squeezed.contains("replicas = 3"), "{out}");
    assert!(
        squeezed.contains("consolidation_policy = \"Balanced\""),
        "{out}"
    );
    assert!(
        !out.contains("spec.replicas has no joiner equivalent"),
        "{out}"
    );
}
