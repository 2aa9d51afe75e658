//! The agent's OCI image: built without a daemon by `scripts/image` from the statically
//! linked `joiner-agent` (`scripts/static-agent`), validated with oci-image-tool and umoci
//! (Debian's packages, installed into .tools by `scripts/install-oci-tool.sh`), unpacked with
//! umoci, and run by kube-sim's process runner in an empty root (the image's files only), as
//! `--version`, `crds` and the agent's Deployment. A second test packs the default,
//! dynamically linked build the same way and shows the empty root refuses it: the defect an
//! image test that runs the binary on this machine cannot see.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{kubectl, kubectl_json, kubectl_stdin, wait_for};
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

/// The statically linked agent: `JOINER_AGENT_STATIC_BIN` (scripts/test builds it once),
/// else `scripts/image --print-binary --profile dev` builds it.
fn static_agent() -> PathBuf {
    if let Some(p) = std::env::var_os("JOINER_AGENT_STATIC_BIN") {
        return PathBuf::from(p);
    }
    PathBuf::from(
        run(Command::new(root().join("scripts/image")).args([
            "--print-binary",
            "--profile",
            "dev",
        ]))
        .trim(),
    )
}

/// The default (dynamically linked) agent build: `JOINER_AGENT_BIN`, as the e2e tests use.
fn dynamic_agent() -> PathBuf {
    let bin = std::env::var_os("JOINER_AGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/debug/joiner-agent"));
    if !bin.is_file() {
        run(Command::new(env!("CARGO"))
            .current_dir(root())
            .args(["build", "-p", "joiner-agent"]));
    }
    bin
}

/// oci-image-tool and umoci, from Debian's packages.
fn oci_tools() -> (PathBuf, PathBuf) {
    let umoci = PathBuf::from(
        run(&mut Command::new(
            root().join("scripts/install-oci-tool.sh"),
        ))
        .trim(),
    );
    let validator = umoci.with_file_name("oci-image-tool");
    (umoci, validator)
}

/// Packs `binary` with scripts/image into `layout`; returns the manifest digest.
fn pack(binary: &Path, layout: &Path, extra: &[&str]) -> String {
    let reference = run(Command::new(root().join("scripts/image"))
        .arg("--binary")
        .arg(binary)
        .arg("--out")
        .arg(layout)
        .args(extra));
    assert_eq!(
        reference.trim(),
        format!("oci:{}:{}", layout.display(), agent_version())
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Validates the layout and unpacks it; returns the runtime bundle's directory.
fn validate_and_unpack(layout: &Path, bundle: &Path) -> PathBuf {
    let (umoci, validator) = oci_tools();
    let version = agent_version();
    // The image spec's schemas, every descriptor's digest and size, the ref name.
    let out = run(Command::new(&validator)
        .args([
            "validate",
            "--type",
            "image",
            "--ref",
            &format!("name={version}"),
        ])
        .arg(layout));
    assert!(out.contains("Validation succeeded"), "{out}");
    // umoci checks digests and sizes again while it reads and unpacks.
    let image_arg = format!("{}:{version}", layout.display());
    let stat = run(Command::new(&umoci).args(["stat", "--json", "--image", &image_arg]));
    assert!(stat.contains("scripts/image"), "{stat}");
    run(Command::new(&umoci)
        .args(["unpack", "--rootless", "--image", &image_arg])
        .arg(bundle));
    bundle.to_path_buf()
}

/// A kube-sim that runs the agent's image from `bundle` (with the emulator for its AWS half).
fn sim(bundle: &Path, moto: Option<&joiner_test_support::MotoServer>) -> TargetCluster {
    let target = TargetCluster::sim_with(Options {
        cluster_name: "image-test".into(),
        aws_endpoint: moto.map(|m| m.endpoint()),
        images: vec![(
            "public.ecr.aws/joiner/joiner-agent".into(),
            ImageSource::from_path(bundle).unwrap(),
        )],
        ..Default::default()
    })
    .unwrap();
    common::add_fake_node(&target, "node-a", "4", "16Gi", &[]);
    target
}

fn apply(target: &TargetCluster, doc: &Value) {
    let out = kubectl_stdin(target, &["apply", "-f", "-"], Some(&doc.to_string()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The security contexts joiner_agent renders for the agent (provider/src/resources/agent/render.rs).
fn pod_security() -> Value {
    json!({"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
}
fn container_security() -> Value {
    json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}})
}

/// A one-shot pod of the agent's image with `args`; returns its final state once it has one.
fn run_once(target: &TargetCluster, name: &str, args: &[&str]) -> Value {
    apply(
        target,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "joiner"},
            "spec": {"restartPolicy": "Never", "securityContext": pod_security(),
                "containers": [{"name": "agent", "image": format!("public.ecr.aws/joiner/joiner-agent:{}", agent_version()),
                    "args": args, "securityContext": container_security()}]}}),
    );
    wait_for(
        &format!("pod {name} settled"),
        Duration::from_secs(60),
        || {
            let p = kubectl_json(target, &["get", "pod", name, "-n", "joiner", "-o", "json"]);
            let phase = p["status"]["phase"].as_str().unwrap_or("");
            let waiting = p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                .as_str()
                .unwrap_or("ContainerCreating");
            (phase == "Succeeded" || phase == "Failed" || waiting != "ContainerCreating")
                .then_some(p)
        },
    )
}

fn pod_logs(target: &TargetCluster, name: &str) -> String {
    String::from_utf8_lossy(&kubectl(target, &["logs", "-n", "joiner", name]).stdout).into_owned()
}

fn blob(layout: &Path, digest: &str) -> Value {
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    serde_json::from_slice(&std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap()).unwrap()
}

/// The ClusterRole, Role and bindings `joiner_agent` renders for the namespace `joiner`.
fn agent_roles() -> Vec<Value> {
    use joiner_provider::resources::agent::render;
    let model = joiner_provider::model::agent::AgentModel {
        cluster_name: Some("kube-sim".into()),
        namespace: Some("joiner".into()),
        ..Default::default()
    };
    render::objects(&model)
        .into_iter()
        .filter(|(kind, _, _)| {
            ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].contains(&kind.kind)
        })
        .map(|(_, _, obj)| obj)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_image_is_self_contained_and_runs_in_an_empty_root() {
    let version = agent_version();
    let binary = static_agent();
    let work = tempfile::tempdir().unwrap();
    let layout = work.path().join("layout");
    let digest = pack(&binary, &layout, &[]);
    // Reproducible: the same binary and commit give the same manifest, byte for byte.
    let again = pack(&binary, &work.path().join("layout-again"), &[]);
    assert_eq!(digest, again, "two builds of one commit, two digests");

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
    assert_eq!(
        desc["platform"],
        json!({"architecture": "amd64", "os": "linux"})
    );
    let manifest = blob(&layout, desc["digest"].as_str().unwrap());
    let config = blob(&layout, manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], json!(["/joiner-agent"]));
    assert_eq!(config["config"]["Cmd"], json!(["run"]));
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], version.as_str());
    assert_eq!(labels["dev.joiner.linkage"], "static");
    assert_eq!(
        labels["dev.joiner.crates"],
        "/usr/share/doc/joiner-agent/crates.tsv"
    );
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);

    // The layer's entries: owners 0, modes, nothing else.
    let layer = layout.join("blobs/sha256").join(
        manifest["layers"][0]["digest"]
            .as_str()
            .unwrap()
            .strip_prefix("sha256:")
            .unwrap(),
    );
    let listing = run(Command::new("tar").arg("-tvzf").arg(&layer));
    let entries: Vec<(String, String, String)> = listing
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].to_string(),
                f[1].to_string(),
                f[f.len() - 1].to_string(),
            )
        })
        .collect();
    let files: Vec<&(String, String, String)> =
        entries.iter().filter(|e| !e.0.starts_with('d')).collect();
    assert_eq!(
        files
            .iter()
            .map(|e| (e.0.as_str(), e.1.as_str(), e.2.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("-rw-r--r--", "0/0", "etc/nsswitch.conf"),
            ("-rw-r--r--", "0/0", "etc/ssl/certs/ca-certificates.crt"),
            ("-rwxr-xr-x", "0/0", "joiner-agent"),
            ("-rw-r--r--", "0/0", "usr/share/doc/joiner-agent/crates.tsv"),
        ],
        "only the static binary, the CA bundle, nsswitch.conf and the crate list:\n{listing}"
    );

    let bundle = validate_and_unpack(&layout, &work.path().join("bundle"));
    let rootfs = bundle.join("rootfs");
    let runtime: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    assert_eq!(runtime["process"]["user"]["uid"], 65532);
    assert_eq!(runtime["process"]["args"], json!(["/joiner-agent", "run"]));
    // The crate list names what is linked in, with versions, and matches its label's digest.
    let crates =
        std::fs::read_to_string(rootfs.join("usr/share/doc/joiner-agent/crates.tsv")).unwrap();
    for name in [
        "joiner-agent",
        "kube-client",
        "aws-sdk-ec2",
        "rustls",
        "ring",
        "tokio",
    ] {
        assert!(
            crates.lines().any(|l| l.starts_with(&format!("{name}\t"))),
            "{name} not in the crate list:\n{crates}"
        );
    }
    assert!(
        crates
            .lines()
            .any(|l| l == format!("joiner-agent\t{version}\tApache-2.0")),
        "{crates}"
    );
    let sum =
        run(Command::new("sha256sum").arg(rootfs.join("usr/share/doc/joiner-agent/crates.tsv")));
    assert_eq!(
        labels["dev.joiner.crates.digest"],
        format!("sha256:{}", sum.split_whitespace().next().unwrap())
    );

    // From here on everything runs in kube-sim's empty root: the image's files only.
    let moto = joiner_test_support::MotoServer::start();
    let target = sim(&bundle, Some(&moto));
    kubectl(&target, &["create", "namespace", "joiner"]);
    let v = run_once(&target, "version", &["--version"]);
    assert_eq!(v["status"]["phase"], "Succeeded", "{v}");
    assert_eq!(
        pod_logs(&target, "version").trim(),
        format!("joiner-agent {version}")
    );
    // The CRDs come with the agent's install (joiner_agent applies them): from the image.
    let c = run_once(&target, "crds", &["crds"]);
    assert_eq!(c["status"]["phase"], "Succeeded", "{c}");
    let crds = pod_logs(&target, "crds");
    let out = kubectl_stdin(&target, &["apply", "-f", "-"], Some(&crds));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // kube-sim enforces RBAC: the agent's roles and bindings, as `joiner_agent` renders them.
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "List", "items": agent_roles()}),
    );
    // `run` as the agent's Deployment renders it (contract B): in-cluster config from the
    // token volume, IRSA against the emulator, TLS to kube-sim with the volume's CA, the
    // health server on the pod's IP; Ready through /readyz.
    apply(
        &target,
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "joiner-agent", "namespace": "joiner",
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/joiner-agent"}}},
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "joiner-agent", "namespace": "joiner"},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "joiner-agent"}},
              "template": {"metadata": {"labels": {"app.kubernetes.io/name": "joiner-agent"}}, "spec": {
                "serviceAccountName": "joiner-agent",
                "securityContext": pod_security(),
                "containers": [{"name": "agent", "image": format!("public.ecr.aws/joiner/joiner-agent:{version}"),
                  "args": ["run"],
                  "securityContext": container_security(),
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
        ]}),
    );
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
    let pods = kubectl_json(
        &target,
        &[
            "get",
            "pods",
            "-n",
            "joiner",
            "-l",
            "app.kubernetes.io/name=joiner-agent",
            "-o",
            "json",
        ],
    );
    let status = &pods["items"][0]["status"]["containerStatuses"][0];
    assert_eq!(status["restartCount"], 0, "{status}");
}

/// The default build is dynamically linked against glibc: packed the same way (scripts/image
/// refuses it unless told), its image cannot start in an empty root, and the pod's status says
/// which file is missing. Running the unpacked binary on this machine, as the image test once
/// did, succeeds and proves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamically_linked_agent_image_does_not_start_in_an_empty_root() {
    let binary = dynamic_agent();
    let work = tempfile::tempdir().unwrap();
    let layout = work.path().join("layout");
    let refused = Command::new(root().join("scripts/image"))
        .arg("--binary")
        .arg(&binary)
        .arg("--out")
        .arg(&layout)
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "scripts/image packed a dynamic binary"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is dynamically linked"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    pack(&binary, &layout, &["--allow-dynamic"]);
    let bundle = validate_and_unpack(&layout, &work.path().join("bundle"));
    let config = blob(
        &layout,
        blob(&layout, &{
            let index: Value =
                serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
            index["manifests"][0]["digest"]
                .as_str()
                .unwrap()
                .to_string()
        })["config"]["digest"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(config["config"]["Labels"]["dev.joiner.linkage"], "dynamic");
    // On this machine, which has glibc, the unpacked binary runs: the old test's blind spot.
    let host = run(Command::new(bundle.join("rootfs/joiner-agent")).arg("--version"));
    assert!(host.starts_with("joiner-agent "), "{host}");

    let target = sim(&bundle, None);
    kubectl(&target, &["create", "namespace", "joiner"]);
    let p = run_once(&target, "version", &["--version"]);
    let state = &p["status"]["containerStatuses"][0]["state"];
    assert_eq!(state["waiting"]["reason"], "RunContainerError", "{p}");
    let message = state["waiting"]["message"].as_str().unwrap_or("");
    eprintln!("the empty root refused the dynamically linked image: {message}");
    assert!(
        message.contains("exec /joiner-agent: no such file or directory")
            && message.contains("ld-linux-x86-64.so.2"),
        "{message}"
    );
    assert_eq!(p["status"]["containerStatuses"][0]["started"], false, "{p}");
}
