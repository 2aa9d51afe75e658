//! The agent's OCI image, built without a daemon by `scripts/image` from the debug
//! `joiner-agent`, validated and unpacked with umoci (Debian's package, installed into
//! .tools by `scripts/install-oci-tool.sh`), its entrypoint run from the unpacked root
//! filesystem, and then run as the agent's Deployment by kube-sim's process runner.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{kubectl_json, kubectl_ok, kubectl_stdin, wait_for};
use kube_sim::{ImageSource, Options, TargetCluster};
use serde_json::{json, Value};

/// The workspace root, from this crate's own manifest directory (`tests/kube-sim`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn agent_version() -> String {
    let text = std::fs::read_to_string(root().join("agent/Cargo.toml")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("version in agent/Cargo.toml")
        .to_string()
}

/// The debug agent binary, built when missing.
fn agent_binary() -> PathBuf {
    let bin = root().join("target/debug/joiner-agent");
    if !bin.is_file() {
        run(Command::new(env!("CARGO"))
            .current_dir(root())
            .args(["build", "-p", "joiner-agent"]));
    }
    bin
}

fn blob(layout: &Path, digest: &str) -> Value {
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    serde_json::from_slice(&std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap()).unwrap()
}

fn files_under(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, base, out);
        } else {
            out.push(p.strip_prefix(base).unwrap().display().to_string());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_image_validates_unpacks_runs_and_runs_under_kube_sim() {
    let version = agent_version();
    let binary = agent_binary();
    let umoci = run(&mut Command::new(
        root().join("scripts/install-oci-tool.sh"),
    ))
    .trim()
    .to_string();
    let work = tempfile::tempdir().unwrap();
    let layout = work.path().join("layout");
    let reference = run(Command::new(root().join("scripts/image"))
        .arg("--binary")
        .arg(&binary)
        .arg("--out")
        .arg(&layout));
    assert_eq!(
        reference.trim(),
        format!("oci:{}:{version}", layout.display())
    );

    // The layout as the spec wants it, read the way a registry client would.
    let oci_layout: Value =
        serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).unwrap();
    assert_eq!(oci_layout["imageLayoutVersion"], "1.0.0");
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let desc = &index["manifests"][0];
    assert_eq!(
        desc["annotations"]["org.opencontainers.image.ref.name"],
        version.as_str()
    );
    let manifest = blob(&layout, desc["digest"].as_str().unwrap());
    let config = blob(&layout, manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], json!(["/joiner-agent"]));
    assert_eq!(config["config"]["Cmd"], json!(["run"]));
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.version"],
        version.as_str()
    );
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);

    // umoci checks every digest and size while it reads and unpacks.
    let image_arg = format!("{}:{version}", layout.display());
    let stat = run(Command::new(&umoci).args(["stat", "--json", "--image", &image_arg]));
    assert!(stat.contains("scripts/image"), "{stat}");
    let bundle = work.path().join("bundle");
    run(Command::new(&umoci)
        .args(["unpack", "--rootless", "--image", &image_arg])
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    let mut files = Vec::new();
    files_under(&rootfs, &rootfs, &mut files);
    files.sort();
    assert_eq!(
        files,
        vec!["etc/ssl/certs/ca-certificates.crt", "joiner-agent"],
        "only the binary and the CA certificates"
    );
    let runtime: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    assert_eq!(runtime["process"]["user"]["uid"], 65532);
    assert_eq!(runtime["process"]["args"], json!(["/joiner-agent", "run"]));

    // The entrypoint, from the unpacked root filesystem.
    let out = run(Command::new(rootfs.join("joiner-agent")).arg("--version"));
    assert_eq!(out.trim(), format!("joiner-agent {version}"));

    // Run as the agent's Deployment renders it (contract B), by kube-sim's process runner.
    let has_run = Command::new(rootfs.join("joiner-agent"))
        .args(["run", "--help"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let source = ImageSource::from_path(&bundle).unwrap();
    let moto = has_run.then(joiner_test_support::MotoServer::start);
    let target = TargetCluster::sim_with(Options {
        cluster_name: "image-test".into(),
        aws_endpoint: moto.as_ref().map(|m| m.endpoint()),
        images: vec![("public.ecr.aws/joiner/joiner-agent".into(), source)],
        ..Default::default()
    })
    .unwrap();
    common::add_fake_node(&target, "node-a", "4", "16Gi", &[]);
    kubectl_ok(&target, &["create", "namespace", "joiner"]);
    if has_run {
        // The CRDs come with the agent's install (joiner_agent applies them): from the image.
        let crds = run(Command::new(rootfs.join("joiner-agent")).arg("crds"));
        let out = kubectl_stdin(&target, &["apply", "-f", "-"], Some(&crds));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "joiner-agent", "namespace": "joiner",
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/joiner-agent"}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "joiner-agent", "namespace": "joiner"},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "joiner-agent"}},
          "template": {"metadata": {"labels": {"app.kubernetes.io/name": "joiner-agent"}}, "spec": {
            "serviceAccountName": "joiner-agent",
            "containers": [{"name": "agent", "image": format!("public.ecr.aws/joiner/joiner-agent:{version}"),
              "args": ["run"],
              "env": [
                {"name": "JOINER_CLUSTER_NAME", "value": "image-test"},
                {"name": "JOINER_LOG_FORMAT", "value": "text"},
                {"name": "JOINER_CLUSTER_ENDPOINT", "value": "https://127.0.0.1:443"},
                {"name": "JOINER_CLUSTER_CA", "value": "Y2E="},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "JOINER_METRICS_ADDR", "value": "$(POD_IP):8080"},
                {"name": "JOINER_HEALTH_ADDR", "value": "$(POD_IP):8081"},
              ],
              "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8081}, "periodSeconds": 1}}]}}}},
    ]});
    let out = kubectl_stdin(&target, &["apply", "-f", "-"], Some(&objects.to_string()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let pod = wait_for("the agent process started", Duration::from_secs(60), || {
        let pods = kubectl_json(&target, &["get", "pods", "-n", "joiner", "-o", "json"]);
        pods["items"].as_array()?.first().cloned().filter(|p| {
            let s = &p["status"]["containerStatuses"][0];
            s["state"]["running"].is_object() || s["lastState"]["terminated"].is_object()
        })
    });
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    if has_run {
        // `joiner-agent run` exists: the rollout must become Ready through /readyz.
        let ready = wait_for("the agent Ready", Duration::from_secs(90), || {
            let d = kubectl_json(
                &target,
                &[
                    "get",
                    "deployment",
                    "joiner-agent",
                    "-n",
                    "joiner",
                    "-o",
                    "json",
                ],
            );
            (d["status"]["readyReplicas"] == 1).then_some(d)
        });
        assert_eq!(ready["status"]["availableReplicas"], 1);
    } else {
        // Until `run` lands, the binary refuses the subcommand: what it printed proves the
        // runner started the image's entrypoint with the pod's args.
        let log = wait_for("the agent's output", Duration::from_secs(30), || {
            let out = common::kubectl(&target, &["logs", "-n", "joiner", &name]);
            let prev = common::kubectl(&target, &["logs", "-n", "joiner", &name, "--previous"]);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&prev.stdout)
            );
            (!text.is_empty()).then_some(text)
        });
        assert!(
            log.contains("run"),
            "the agent saw its `run` argument: {log}"
        );
    }
}
