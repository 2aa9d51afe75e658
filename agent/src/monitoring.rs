//! The alert rules the repository ships (`monitoring/rules.yml`), compiled in so the agent
//! can print them as a prometheus-operator `PrometheusRule` (`joiner-agent
//! prometheus-rule`): the rules file stays the one source of both.

/// `monitoring/rules.yml`, as it is in the tree the agent was built from.
pub const RULES: &str = include_str!("../../monitoring/rules.yml");

/// The rules as a `monitoring.coreos.com/v1` PrometheusRule in `namespace`. Its `spec` is
/// the rules file itself (the two formats share `groups`).
pub fn prometheus_rule(namespace: &str) -> Result<serde_json::Value, String> {
    let spec: serde_json::Value =
        serde_yaml::from_str(RULES).map_err(|e| format!("monitoring/rules.yml: {e}"))?;
    Ok(serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "joiner-agent",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "joiner-agent"},
        },
        "spec": spec,
    }))
}
