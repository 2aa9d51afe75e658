//! Karpenter's regression suite (`test/suites/regression` of sigs.k8s.io/karpenter, the
//! version pinned in tools/go/karpenter-regression), its files unchanged, run for
//! Karpenter's KWOK controller and for joiner's agent (`--api karpenter --cloud kwok`), one
//! after the other, each on a fresh real control plane + KWOK with Karpenter's CRDs of the
//! same pin. Not a benchmark: a bench target so that it is built only when asked for
//! (`scripts/karpenter-regression`), never by the test suite.
//!
//! Karpenter's controller runs as `scripts/bench-perf-suite` runs it: out of cluster, with
//! the admin kubeconfig. joiner's agent runs under the roles `joiner_agent` renders for
//! `api = "karpenter"`, never as an admin, with two changes the KWOK cloud needs and says:
//! its class is the `KWOKNodeClass` (not the `EC2NodeClass` the rendered role names) and it
//! creates the Node objects KWOK then plays (where EC2 would launch an instance).
//!
//! Prints one line per spec (passed, failed with its first failure line, or skipped) for
//! each controller, then the totals. Knobs: `CONTROLLERS=karpenter,joiner`, `FOCUS` and
//! `SKIP` (Ginkgo regular expressions over the spec's full text), `JOINER_REGRESSION_OUT`
//! (logs and reports; `target/karpenter-regression/<time>` by default).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use joiner_agent::api::served::ApiFlavor;
use joiner_agent_world::kwok::*;
use joiner_agent_world::rbac;
use serde_json::{json, Value};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

/// One spec's outcome for one controller.
#[derive(Clone, Debug)]
struct Outcome {
    state: String,
    /// The first line of the failure message, and where it was raised.
    failure: Option<String>,
    seconds: f64,
}

async fn run() {
    let controllers: Vec<Kind> = std::env::var("CONTROLLERS")
        .unwrap_or_else(|_| "karpenter,joiner".into())
        .split(',')
        .map(|c| match c.trim() {
            "karpenter" => Kind::Karpenter,
            "joiner" => Kind::Joiner,
            other => panic!("CONTROLLERS: unknown controller {other:?} (karpenter, joiner)"),
        })
        .collect();
    let build = regression_build();
    let suite = build
        .bin
        .parent()
        .expect("the build's directory")
        .join("regression.test");
    assert!(
        suite.is_file(),
        "{} missing: run scripts/install-tools.sh --go-karpenter-regression",
        suite.display()
    );
    let stamp = jiff::Timestamp::now().as_second();
    let out_root: PathBuf = std::env::var_os("JOINER_REGRESSION_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            joiner_test_support::workspace_root()
                .join(format!("target/karpenter-regression/{stamp}"))
        });
    eprintln!(
        "karpenter-regression: controllers {:?}, focus {:?}, logs in {}",
        controllers.iter().map(|k| k.name()).collect::<Vec<_>>(),
        std::env::var("FOCUS").unwrap_or_default(),
        out_root.display()
    );
    let mut columns: Vec<(Kind, BTreeMap<String, Outcome>)> = Vec::new();
    for kind in controllers {
        let out = out_root.join(kind.name());
        std::fs::create_dir_all(&out).unwrap();
        let outcomes = one_controller(kind, &build, &suite, &out).await;
        for (spec, o) in &outcomes {
            eprintln!("karpenter-regression: {}: {} {spec}", kind.name(), o.state);
        }
        columns.push((kind, outcomes));
    }
    print_table(&columns);
}

/// Karpenter's KWOK controller of the regression pin, with its CRDs beside it.
fn regression_build() -> KarpenterBuild {
    if std::env::var_os("JOINER_KARPENTER_BIN").is_none() {
        std::env::set_var(
            "JOINER_KARPENTER_BIN",
            joiner_test_support::tools_dir().join("bin/karpenter-kwok-regression"),
        );
    }
    KarpenterBuild::find().unwrap_or_else(|e| {
        panic!("{e} (for this suite: scripts/install-tools.sh --go-karpenter-regression)")
    })
}

/// A fresh control plane with Karpenter's CRDs, `kind`'s controller, and the suite.
async fn one_controller(
    kind: Kind,
    build: &KarpenterBuild,
    suite: &Path,
    out: &Path,
) -> BTreeMap<String, Outcome> {
    let (cp, client) = control_plane().await;
    install_crds(&cp, Kind::Karpenter, Some(build));
    // Held to the end: the agent's kubeconfig file and the controller process.
    let (_kubeconfig, mut ctrl) = match kind {
        Kind::Karpenter => (None, Controller::karpenter(&cp, build, out)),
        Kind::Joiner => {
            let kubeconfig = agent_identity(&cp, &client).await;
            let ctrl = Controller::joiner_at(&kubeconfig.path, out, &["--api", "karpenter"]);
            (Some(kubeconfig), ctrl)
        }
    };
    let ctrl = tokio::task::spawn_blocking(move || {
        ctrl.wait_ready(std::time::Duration::from_secs(120));
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
    if let Ok(f) = std::env::var("FOCUS") {
        args.push(format!("-ginkgo.focus={f}"));
    }
    if let Ok(s) = std::env::var("SKIP") {
        args.push(format!("-ginkgo.skip={s}"));
    }
    let suite = suite.to_path_buf();
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let dir = out.to_path_buf();
    eprintln!(
        "karpenter-regression: {}: running the suite (its log: {})",
        kind.name(),
        out.join("suite.log").display()
    );
    let status = tokio::task::spawn_blocking(move || {
        Command::new(&suite)
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
            let failure = s["Failure"]["Message"].as_str().map(|m| {
                let first = m.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
                let at = &s["Failure"]["Location"];
                format!(
                    "{} ({}:{})",
                    first.trim(),
                    at["FileName"]
                        .as_str()
                        .unwrap_or_default()
                        .rsplit('/')
                        .next()
                        .unwrap_or_default(),
                    at["LineNumber"]
                )
            });
            let seconds = s["RunTime"].as_f64().unwrap_or_default() / 1e9;
            out.insert(
                name.join(" / "),
                Outcome {
                    state: s["State"].as_str().unwrap_or("unknown").to_string(),
                    failure,
                    seconds,
                },
            );
        }
    }
    out
}

fn print_table(columns: &[(Kind, BTreeMap<String, Outcome>)]) {
    let specs: std::collections::BTreeSet<&String> =
        columns.iter().flat_map(|(_, c)| c.keys()).collect();
    let header: Vec<&str> = columns.iter().map(|(k, _)| k.name()).collect();
    println!("\n| spec | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(columns.len()));
    for spec in &specs {
        let cells: Vec<String> = columns
            .iter()
            .map(|(_, c)| match c.get(*spec) {
                None => "not run".into(),
                Some(o) => match &o.failure {
                    Some(f) if o.state != "passed" && o.state != "skipped" => {
                        format!("{} ({:.0} s): {}", o.state, o.seconds, f.replace('|', "/"))
                    }
                    _ => format!("{} ({:.0} s)", o.state, o.seconds),
                },
            })
            .collect();
        println!("| {spec} | {} |", cells.join(" | "));
    }
    for (k, c) in columns {
        let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
        for o in c.values() {
            *by_state.entry(o.state.as_str()).or_default() += 1;
        }
        println!("{}: {by_state:?}", k.name());
    }
}
