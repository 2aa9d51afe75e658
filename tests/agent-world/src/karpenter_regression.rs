//! Karpenter's regression suite (`test/suites/regression` of sigs.k8s.io/karpenter, the
//! version pinned in tools/go/karpenter-regression), its files unchanged and compiled with
//! `go test -c`, run against one controller on a fresh real control plane + KWOK with the
//! pin's CRDs. Shared by the `karpenter_regression` bench (`scripts/karpenter-regression`:
//! both controllers, every spec) and the world test that keeps a part of the suite in
//! `./scripts/test`.
//!
//! Karpenter's controller runs as `scripts/bench-perf-suite` runs it: out of cluster, with
//! the admin kubeconfig. joiner's agent runs under the roles `joiner_agent` renders for
//! `api = "karpenter"`, never as an admin, with two changes the KWOK cloud needs: its class
//! is the `KWOKNodeClass` (not the `EC2NodeClass` the rendered role names) and it creates
//! the Node objects KWOK then plays (where EC2 would launch an instance).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use joiner_agent::api::served::ApiFlavor;
use joiner_control_plane::Options;
use serde_json::{json, Value};

use crate::kwok::{control_plane_with, install_crds, Controller, KarpenterBuild, Kind};
use crate::rbac;

/// The compiled suite with the CRDs and KWOK stages of its pin, as `scripts/install-tools.sh
/// --go-karpenter-suite` leaves them (`.tools/bin/karpenter-regression.test`; `crds` and
/// `stages` in `karpenter/` next to its target).
pub struct Suite {
    pub bin: PathBuf,
    pub crds: PathBuf,
    /// The stages Karpenter installs in KWOK for its e2e suites (`hack/kwok/stages`): a
    /// pod-delete stage that waits the delay a pod's annotation asks for, and an unhealthy
    /// pod stage.
    pub stages: Vec<PathBuf>,
}

/// The feature gates Karpenter's e2e runs set on its controller (the module's `Makefile`,
/// `HELM_OPTS`); the rest stay at their defaults.
pub const KARPENTER_FEATURE_GATES: &str = "NodeRepair=true,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=true,CapacityBuffer=true";

impl Suite {
    pub fn find() -> Result<Suite, String> {
        let link = joiner_test_support::tools_dir().join("bin/karpenter-regression.test");
        let bin = std::fs::canonicalize(&link).map_err(|e| {
            format!(
                "{}: {e}. Build Karpenter's regression suite with `scripts/install-tools.sh --go-karpenter-suite`",
                link.display()
            )
        })?;
        let data = bin.parent().unwrap_or(Path::new(".")).join("karpenter");
        let stages: Vec<PathBuf> = std::fs::read_dir(data.join("stages"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        let crds = data.join("crds");
        if !crds.is_dir() || stages.is_empty() {
            return Err(format!(
                "{} has no CRDs or KWOK stages next to it: run `scripts/install-tools.sh --go-karpenter-suite` again",
                bin.display()
            ));
        }
        Ok(Suite { bin, crds, stages })
    }
}

/// Which specs to run: Ginkgo regular expressions over a spec's full text.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub focus: Option<String>,
    pub skip: Option<String>,
}

/// One spec's outcome for one controller.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub state: String,
    /// The first line of the failure message, and where it was raised.
    pub failure: Option<String>,
    pub seconds: f64,
}

/// Runs the selected specs against `kind`'s controller on a control plane of their own and
/// returns every `It` of the suite's report by its full text (the unselected as skipped).
/// `karpenter` is Karpenter's KWOK controller of the suite's pin, needed for
/// [`Kind::Karpenter`] only. Logs and the Ginkgo report are left in `out`.
pub async fn run(
    kind: Kind,
    suite: &Suite,
    karpenter: Option<&KarpenterBuild>,
    select: &Selection,
    out: &Path,
) -> BTreeMap<String, Outcome> {
    std::fs::create_dir_all(out).expect("the run's directory");
    // The control plane's defaults otherwise, as the suite's kind cluster has them.
    let (cp, client) = control_plane_with(Options {
        kwok_stages: suite.stages.clone(),
        ..Default::default()
    })
    .await;
    install_crds(&cp, Kind::Karpenter, Some(&suite.crds));
    // Held to the end: the agent's kubeconfig file and the controller process.
    let (_kubeconfig, ctrl) = match kind {
        Kind::Karpenter => {
            let build = karpenter.expect("Karpenter's KWOK controller of the suite's pin");
            let gates = [("FEATURE_GATES", KARPENTER_FEATURE_GATES)];
            (None, Controller::karpenter_with(&cp, build, out, &gates))
        }
        Kind::Joiner => {
            let kubeconfig = agent_identity(&cp, &client).await;
            let ctrl = Controller::joiner_at(&kubeconfig.path, out, &["--api", "karpenter"]);
            (Some(kubeconfig), ctrl)
        }
    };
    let ctrl = tokio::task::spawn_blocking(move || {
        let mut ctrl = ctrl;
        ctrl.wait_ready(Duration::from_secs(120));
        ctrl
    })
    .await
    .unwrap();
    let report = out.join("report.json");
    let log = std::fs::File::create(out.join("suite.log")).unwrap();
    let mut args = vec![
        "-test.timeout=0".to_string(),
        "-ginkgo.timeout=24h".to_string(),
        "-ginkgo.v".to_string(),
        format!("-ginkgo.json-report={}", report.display()),
    ];
    args.extend(select.focus.iter().map(|f| format!("-ginkgo.focus={f}")));
    args.extend(select.skip.iter().map(|s| format!("-ginkgo.skip={s}")));
    let bin = suite.bin.clone();
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let dir = out.to_path_buf();
    eprintln!(
        "karpenter-regression: {}: running the suite (its log: {})",
        kind.name(),
        out.join("suite.log").display()
    );
    let status = tokio::task::spawn_blocking(move || {
        Command::new(&bin)
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env("OUTPUT_DIR", &dir)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .expect("run the regression suite")
    })
    .await
    .unwrap();
    eprintln!(
        "karpenter-regression: {}: suite exited {status}",
        kind.name()
    );
    drop(ctrl);
    read_report(&report)
}

/// The agent's ServiceAccount under the roles rendered for `api = "karpenter"`, with the
/// KWOK cloud's two changes (see the module doc), and its kubeconfig.
async fn agent_identity(
    cp: &joiner_control_plane::ControlPlane,
    client: &kube::Client,
) -> rbac::AgentKubeconfig {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": rbac::NAMESPACE}})).unwrap();
    namespaces
        .create(&Default::default(), &ns)
        .await
        .expect("the agent's namespace");
    let mut objects = rbac::rendered_for("perf", None, ApiFlavor::Karpenter);
    for o in &mut objects {
        if o["kind"] == "ClusterRole" {
            kwok_cloud_rules(&mut o["rules"]);
        }
    }
    rbac::apply(client, &objects).await;
    let token = rbac::token_valid_for(client, 24 * 3600).await;
    rbac::write_kubeconfig(cp.url(), cp.ca_pem(), &token)
}

fn kwok_cloud_rules(rules: &mut Value) {
    let Some(rules) = rules.as_array_mut() else {
        return;
    };
    for r in rules.iter_mut() {
        if r["apiGroups"] == json!(["karpenter.k8s.aws"]) {
            r["apiGroups"] = json!(["karpenter.kwok.sh"]);
            let resources: Vec<Value> = r["resources"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|x| {
                    json!(x
                        .as_str()
                        .unwrap_or_default()
                        .replace("ec2nodeclasses", "kwoknodeclasses"))
                })
                .collect();
            r["resources"] = Value::Array(resources);
        }
    }
    rules.push(json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["create"]}));
}

/// Every `It` of Ginkgo's JSON report, by its full text.
fn read_report(path: &Path) -> BTreeMap<String, Outcome> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let suites: Value = serde_json::from_str(&text).unwrap_or(json!([]));
    let mut out = BTreeMap::new();
    for suite in suites.as_array().into_iter().flatten() {
        for s in suite["SpecReports"].as_array().into_iter().flatten() {
            if s["LeafNodeType"] != "It" {
                continue;
            }
            let mut name: Vec<String> = s["ContainerHierarchyTexts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect();
            name.push(s["LeafNodeText"].as_str().unwrap_or_default().to_string());
            out.insert(
                name.join(" / "),
                Outcome {
                    state: s["State"].as_str().unwrap_or("unknown").to_string(),
                    failure: first_failure_line(s),
                    seconds: s["RunTime"].as_f64().unwrap_or_default() / 1e9,
                },
            );
        }
    }
    out
}

fn first_failure_line(spec: &Value) -> Option<String> {
    let message = spec["Failure"]["Message"].as_str()?;
    let first = message
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let at = &spec["Failure"]["Location"];
    let file = at["FileName"]
        .as_str()
        .unwrap_or_default()
        .rsplit('/')
        .next()
        .unwrap_or_default();
    Some(format!("{} ({file}:{})", first.trim(), at["LineNumber"]))
}
