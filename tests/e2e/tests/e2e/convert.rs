//! `terraform-provider-joiner convert` on every Karpenter manifest in
//! `provider/tests/karpenter-manifests/` (the seed documents' v1alpha5 Provisioners and
//! v1beta1 NodePool, and v1 objects), as a migrating user runs it: the binary's output goes
//! into a configuration as is, and the real Terraform CLI must format-check it and plan it,
//! every pool admitting instance types at plan time. The text itself is checked by the
//! provider's unit tests (`provider/src/convert/tests.rs`).

use joiner_e2e::{provider_bin, MotoServer, Workspace};
use std::path::PathBuf;
use std::process::Command;

/// What the converted resources refer to (the converter's defaults).
pub(crate) const VARIABLES: &str = r#"
variable "cluster_name" {
  type    = string
  default = "prod"
}
variable "node_role_name" {
  type    = string
  default = "prod-nodes"
}
"#;

pub(crate) fn manifests() -> Vec<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../provider/tests/karpenter-manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

pub(crate) fn convert(file: &PathBuf) -> String {
    let out = Command::new(provider_bin())
        .arg("convert")
        .arg(file)
        .output()
        .expect("run terraform-provider-joiner convert");
    assert!(
        out.status.success(),
        "convert {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 HCL")
}

#[test]
fn converted_manifests_format_check_and_plan() {
    let moto = MotoServer::start();
    let files = manifests();
    assert!(files.len() >= 6, "{files:?}");
    for file in &files {
        let hcl = convert(file);
        let tf = Workspace::new(&moto);
        tf.write_config(&format!("{hcl}{VARIABLES}"));
        let fmt = tf.terraform(&["fmt", "-check", "-diff", "-no-color"]);
        assert!(
            fmt.success(),
            "{}: the output is not in terraform fmt style:\n{}",
            file.display(),
            fmt
        );
        let plan = tf.plan();
        let pools: Vec<String> = hcl
            .lines()
            .filter_map(|l| l.strip_prefix("resource \"joiner_node_pool\" \""))
            .map(|rest| format!("joiner_node_pool.{}", rest.trim_end_matches("\" {")))
            .collect();
        assert!(!pools.is_empty(), "{}: no pool converted", file.display());
        for pool in &pools {
            assert_eq!(plan.actions(pool), ["create"], "{}: {pool}", file.display());
            let admitted = &plan.after(pool).expect("planned values")["admitted_instance_types"];
            let count = admitted["count"].as_i64().unwrap_or(0);
            assert!(
                count > 0,
                "{}: {pool} admits no instance type at plan time: {admitted}",
                file.display()
            );
            println!("{}: {pool} admits {count} types", file.display());
        }
    }
}

/// The converted resources, applied into a cluster, then forgotten by Terraform and taken
/// back with the import commands the converter printed: the next plan shows no change, so
/// the HCL says exactly what the provider reads back from the objects it describes.
#[test]
fn converted_resources_import_back_with_no_change() {
    use kube::api::DynamicObject;

    let moto = MotoServer::start();
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        cluster_name: "prod".into(),
        ..Default::default()
    })
    .expect("start kube-sim");
    // The CRDs `joiner_agent` would install; no agent runs, so no finalizer holds anything.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let crds: kube::Api<DynamicObject> = kube::Api::all_with(
            sim.client().await.expect("client"),
            &kube::discovery::ApiResource {
                group: "apiextensions.k8s.io".into(),
                version: "v1".into(),
                api_version: "apiextensions.k8s.io/v1".into(),
                kind: "CustomResourceDefinition".into(),
                plural: "customresourcedefinitions".into(),
            },
        );
        for crd in [
            joiner_agent::api::schema::node_pool(),
            joiner_agent::api::schema::node_class(),
        ] {
            let crd: DynamicObject =
                serde_json::from_value(serde_json::to_value(crd).unwrap()).unwrap();
            crds.create(&Default::default(), &crd)
                .await
                .expect("create a CRD");
        }
    });
    let provider = format!(
        "provider \"joiner\" {{\n  kubernetes {{\n    config_path = \"{}\"\n  }}\n}}\n",
        sim.kubeconfig_path().display()
    );
    for file in manifests().iter().filter(|f| {
        f.to_string_lossy().contains("v1-general") || f.to_string_lossy().contains("002-")
    }) {
        let hcl = convert(file);
        let tf = Workspace::new(&moto);
        tf.write_config(&format!("{provider}{hcl}{VARIABLES}"));
        tf.apply();
        let imports: Vec<(String, String)> = hcl
            .lines()
            .filter_map(|l| l.strip_prefix("#   terraform import '"))
            .map(|rest| {
                let (address, id) = rest.split_once("' \"").expect("an import line");
                (
                    address.to_string(),
                    id.trim_end_matches('"').replace("$CLUSTER", "prod"),
                )
            })
            .collect();
        let resources = hcl.matches("\nresource \"").count();
        assert_eq!(
            imports.len(),
            resources,
            "{}: an import per resource",
            file.display()
        );
        for (address, id) in &imports {
            let rm = tf.state_rm(address);
            assert!(rm.success(), "{rm}");
            let imported = tf.import(address, id);
            assert!(imported.success(), "{imported}");
        }
        tf.plan_is_empty();
        println!(
            "{}: {} resources imported back, no change",
            file.display(),
            imports.len()
        );
    }
}
