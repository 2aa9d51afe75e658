//! What `monitoring/` ships, held against a real Prometheus (Debian's build, in `.tools`):
//! the rules pass `promtool check rules` and their unit tests, in which every alert fires
//! once and stays quiet once; the PrometheusRule the agent prints is the rules file; and,
//! with Prometheus scraping an agent that launches, hits a limit, is refused, is
//! interrupted and drains, every dashboard query and every alert expression parses and
//! returns series.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use joiner_agent_world::{wait_for, Opts, World, ACCOUNT};
use joiner_test_support::prometheus::{install, monitoring_dir, with_bool, Prometheus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every alert of rules.yml: name and expression.
fn alerts() -> Vec<(String, String)> {
    let rules = yaml(&monitoring_dir().join("rules.yml"));
    let mut out = Vec::new();
    for g in rules["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            if let Some(name) = r["alert"].as_str() {
                out.push((
                    name.to_string(),
                    r["expr"].as_str().expect("expr").to_string(),
                ));
            }
        }
    }
    out
}

/// Every query of the dashboard: panel title and expression.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = monitoring_dir().join("dashboard.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                p["title"].as_str().unwrap_or("").to_string(),
                t["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    out
}

/// A dashboard query as Grafana sends it: its variables replaced by what they stand for
/// with every NodePool selected, rate windows wide enough for a short run.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$__interval", "15s")
        .replace("$nodepool", ".*")
}

fn promtool(args: &[&str]) -> String {
    let bin = install().expect("Prometheus installed").join("promtool");
    let out = Command::new(&bin)
        .args(args)
        .current_dir(monitoring_dir())
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_rules_check_and_every_alert_fires_and_stays_quiet_in_promtool() {
    let checked = promtool(&["check", "rules", "rules.yml"]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts().len())),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", "rules.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Each alert has a case where it fires and one where it does not.
    let tests = yaml(&monitoring_dir().join("rules.test.yml"));
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for t in tests["tests"].as_array().expect("tests") {
        for a in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = a["alertname"].as_str().unwrap().to_string();
            match a["exp_alerts"].as_array() {
                Some(e) if !e.is_empty() => firing.insert(name),
                _ => quiet.insert(name),
            };
        }
    }
    let names: BTreeSet<String> = alerts().into_iter().map(|(n, _)| n).collect();
    assert_eq!(firing, names, "alerts with a firing case");
    assert_eq!(quiet, names, "alerts with a not-firing case");
}

#[test]
fn the_prometheus_rule_the_agent_prints_is_the_rules_file() {
    let out = Command::new(joiner_test_support::agent_bin())
        .args(["prometheus-rule", "--namespace", "monitoring"])
        .output()
        .expect("run joiner-agent prometheus-rule");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_yaml::from_slice(&out.stdout).expect("YAML");
    assert_eq!(printed["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(printed["kind"], "PrometheusRule");
    assert_eq!(printed["metadata"]["namespace"], "monitoring");
    assert_eq!(printed["spec"], yaml(&monitoring_dir().join("rules.yml")));
}

#[test]
fn the_dashboard_is_importable() {
    let path = monitoring_dir().join("dashboard.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vars = d["templating"]["list"].as_array().expect("variables");
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus data source variable, so an import asks for none by uid"
    );
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_i64().expect("panel id")),
            "duplicate id {}",
            p["id"]
        );
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            assert!(
                p["description"].as_str().is_some_and(|s| !s.is_empty()),
                "{} says what it shows",
                p["title"]
            );
        }
    }
}

async fn series(prom: &Prometheus, expr: &str) -> Result<Vec<Value>, String> {
    let body = prom.query(expr).map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("{}: {}", v["errorType"], v["error"]));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The first sample value of `expr` once it returns a series.
async fn value_of(prom: &Prometheus, what: &str, expr: &str, timeout: Duration) -> f64 {
    wait_for(what, timeout, || async {
        let s = series(prom, expr).await.ok()?;
        s.first()?["value"][1].as_str()?.parse().ok()
    })
    .await
}

/// Alert name → state (pending or firing), from Prometheus's own rule evaluation.
fn alert_states(prom: &Prometheus) -> Vec<(String, String)> {
    let (_, body) = prom.get("/api/v1/alerts").expect("alerts");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    v["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                a["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn pool(weight: Option<i32>, limits: Value) -> Value {
    let mut spec = World::general_pool_spec("default");
    if let Some(w) = weight {
        spec["weight"] = json!(w);
    }
    if limits.as_object().is_some_and(|l| !l.is_empty()) {
        spec["limits"] = limits;
    }
    spec
}

fn on_pool(name: &str) -> Value {
    json!({"nodeSelector": {"karpenter.sh/nodepool": name}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_and_alert_returns_series_from_a_real_prometheus() {
    // Behind the fault proxy, so a launch can be refused as IAM refuses it.
    let w = World::start(Opts {
        proxy: true,
        ..Default::default()
    })
    .await;
    let proxy = w.proxy.as_ref().unwrap();
    w.node_class("default").await;
    w.node_pool("general", pool(Some(10), json!({}))).await;
    w.node_pool("limited", pool(None, json!({"cpu": "2"})))
        .await;
    w.node_pool("spare", pool(None, json!({}))).await;

    // The interruption queue, fed directly (the EventBridge envelope as SQS receives it).
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let sqs = aws_sdk_sqs::Client::new(&joiner_agent_world::sdk_config(&w.moto.endpoint()).await);
    let queue = sqs
        .create_queue()
        .queue_name("monitoring-interruptions")
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("queue URL");

    let agent = w.agent(&["--queue-url", &queue]).await;
    let dir = std::env::temp_dir().join(format!("joiner-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let prom = Prometheus::start(
        &dir,
        &[agent.metrics.to_string()],
        Duration::from_millis(500),
    )
    .expect("Prometheus starts");
    wait_for("the agent's target up", Duration::from_secs(30), || async {
        let (_, body) = prom.get("/api/v1/targets").ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["data"]["activeTargets"]
            .as_array()?
            .iter()
            .any(|t| t["health"] == "up")
            .then_some(())
    })
    .await;

    // A launch IAM refuses, then capacity: the refusal is retried into a node.
    proxy.fail("CreateFleet", 1, 403, "UnauthorizedOperation");
    w.deployment("app", 3, "500m", "512Mi").await;
    wait_for("3 app pods Running", Duration::from_secs(90), || async {
        (w.running("app").await == 3).then_some(())
    })
    .await;

    // A pool at its limits with pods waiting.
    w.deployment_with("capped", 3, "1", "512Mi", json!({}), on_pool("limited"))
        .await;
    value_of(
        &prom,
        "the limited pool at its limit",
        r#"joiner_nodepool_at_limit{nodepool="limited"} == 1"#,
        Duration::from_secs(90),
    )
    .await;

    // A pod whose eviction the API server cannot do (two PodDisruptionBudgets select it):
    // its node's drain meets a Kubernetes error.
    w.deployment_with("doubled", 1, "250m", "256Mi", json!({}), on_pool("spare"))
        .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.client.clone(), "default");
    for name in ["doubled-a", "doubled-b"] {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "doubled"}}},
        }))
        .unwrap();
        pdbs.create(&PostParams::default(), &pdb)
            .await
            .expect("PDB");
    }
    wait_for(
        "the doubled pod Running",
        Duration::from_secs(90),
        || async { (w.running("doubled").await == 1).then_some(()) },
    )
    .await;
    let spare = w
        .claims()
        .await
        .into_iter()
        .find(|c| c.labels()["joiner.dev/nodepool"] == "spare")
        .expect("the spare pool's claim");

    // A Spot interruption warning for a node of the general pool.
    let victim = w
        .claims()
        .await
        .into_iter()
        .find(|c| {
            c.labels()["joiner.dev/nodepool"] == "general"
                && c.labels()
                    .get("karpenter.sh/capacity-type")
                    .map(String::as_str)
                    == Some("spot")
        })
        .expect("a Spot claim in the general pool");
    let instance = victim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .expect("a launched instance")
        .to_string();
    let body = json!({
        "version": "0", "id": "7f0c1e36-2d5b-4a57-9d1c-1f6a3b8e9c01",
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": ACCOUNT, "time": jiff::Timestamp::now().to_string(), "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{instance}")],
        "detail": {"instance-id": instance, "instance-action": "terminate"},
    });
    sqs.send_message()
        .queue_url(&queue)
        .message_body(body.to_string())
        .send()
        .await
        .expect("SendMessage");
    let claims: Api<joiner_agent::api::NodeClaim> = Api::all(w.client.clone());
    wait_for(
        "the interrupted claim replaced and gone",
        Duration::from_secs(90),
        || async {
            claims
                .get_opt(&victim.name_any())
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    claims
        .delete(&spare.name_any(), &DeleteParams::default())
        .await
        .expect("delete the spare claim");

    // Everything above, seen through Prometheus.
    for (what, expr) in [
        ("a refused launch", "joiner_iam_refusals_total > 0"),
        (
            "a replacement",
            "joiner_interruption_replacements_total > 0",
        ),
        (
            "a terminated claim",
            "joiner_nodeclaims_termination_duration_seconds_count > 0",
        ),
        // Two samples at least: this counter's series starts at the first error, and the
        // panel's increase() over a range returns nothing for a series scraped only once.
        (
            "the eviction error, scraped twice",
            "count_over_time(joiner_kubernetes_errors_total[5m]) > 1",
        ),
        (
            "Spot nodes",
            r#"sum(joiner_nodes{capacity_type="spot"}) > 0"#,
        ),
        ("a price", "sum(joiner_nodes_price_usd_per_hour) > 0"),
        ("pods waiting", "joiner_pods_pending_oldest_seconds > 0"),
    ] {
        value_of(&prom, what, expr, Duration::from_secs(90)).await;
    }

    // Every dashboard query and every alert expression parses and returns series.
    let mut empty = Vec::new();
    for (title, expr) in dashboard_queries() {
        let q = as_grafana_sends(&expr);
        match series(&prom, &q).await {
            Ok(s) if !s.is_empty() => {}
            Ok(_) => empty.push(format!("panel {title:?}: {q}")),
            Err(e) => panic!("panel {title:?}: {q}: {e}"),
        }
    }
    for (name, expr) in alerts() {
        series(&prom, &expr)
            .await
            .unwrap_or_else(|e| panic!("alert {name}: {expr}: {e}"));
        let q = with_bool(&expr);
        match series(&prom, &q).await {
            Ok(s) if !s.is_empty() => {}
            Ok(_) => empty.push(format!("alert {name}: {q}")),
            Err(e) => panic!("alert {name}: {q}: {e}"),
        }
    }
    assert!(empty.is_empty(), "no series:\n{}", empty.join("\n"));

    // Prometheus's own evaluation of the rules: the refusal and the storm fire, the pool
    // at its limit is pending (its `for` is 5 minutes), and a leader is there.
    let states = wait_for("the alerts evaluated", Duration::from_secs(30), || async {
        let s = alert_states(&prom);
        let has = |n: &str, st: &str| s.iter().any(|(a, b)| a == n && b == st);
        (has("JoinerIamRefused", "firing")
            && has("JoinerSpotInterruptionStorm", "firing")
            && has("JoinerNodePoolAtLimit", "pending"))
        .then_some(s)
    })
    .await;
    for quiet in [
        "JoinerNoLeader",
        "JoinerInterruptionQueueBacklog",
        "JoinerNodesNotRegistering",
    ] {
        assert!(
            states.iter().all(|(a, _)| a != quiet),
            "{quiet} is not to fire here: {states:?}"
        );
    }
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
    agent.stop().await.expect("agent stops cleanly");
}
