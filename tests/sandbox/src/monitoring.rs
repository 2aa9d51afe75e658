//! The sandbox's agents scraped by a real Prometheus (`.tools/bin/prometheus`) loaded with
//! `monitoring/rules.yml`, so the run ends by saying which alerts the storm set off: the
//! expected one, and none that should not fire on a healthy run.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::Value;

use joiner_test_support::prometheus::Prometheus;

/// What a Spot storm on a share of the Spot nodes sets off.
pub const EXPECTED: &[&str] = &["JoinerSpotInterruptionStorm"];

/// Starts Prometheus scraping every agent pod in `namespace` (port 8080 of its pod IP, a
/// loopback address under kube-sim's runner), every second.
pub async fn start(client: &Client, namespace: &str, dir: &Path) -> Result<Prometheus> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let targets: Vec<String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("{ip}:8080"))
        .collect();
    if targets.is_empty() {
        return Err(anyhow!("no agent pod with an IP in namespace {namespace}"));
    }
    Prometheus::start(dir, &targets, Duration::from_secs(1)).map_err(|e| anyhow!(e))
}

/// The alerts that were firing, and those only ever pending, at any time in the last hour.
pub fn alerts(prom: &Prometheus) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let names = |state: &str| -> Result<BTreeSet<String>> {
        let body = prom.query(&format!(
            "max by (alertname) (max_over_time(ALERTS{{alertstate=\"{state}\"}}[1h]))"
        ))?;
        let v: Value = serde_json::from_str(&body)?;
        if v["status"] != "success" {
            return Err(anyhow!("Prometheus: {}", v["error"]));
        }
        Ok(v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["metric"]["alertname"].as_str().map(str::to_string))
            .collect())
    };
    let firing = names("firing")?;
    let pending = names("pending")?.difference(&firing).cloned().collect();
    Ok((firing, pending))
}
