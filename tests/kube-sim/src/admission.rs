//! Validation and defaulting for the fields clients rely on: names, Deployment selectors,
//! PodDisruptionBudget shape, CRD names, and the defaults a real server fills in
//! (pod phase, Deployment replicas, Service clusterIP, CRD acceptance).

use serde_json::{json, Value};

use crate::meta::{meta_str, now_rfc3339};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// apimachinery's `IsDNS1123Subdomain`: at most 253 characters of dot-separated parts, each
/// shaped like a label but with no length of its own (a VolumeAttachment's name, `csi-` and
/// 64 hex digits, is one part of 68).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

/// Rejects what the real server rejects with 422 Invalid, naming the field.
pub fn validate(rt: &ResourceType, obj: &Value, _old: Option<&Value>) -> ApiResult<()> {
    let name = meta_str(obj, "name").unwrap_or("");
    let mut causes: Vec<(String, String)> = Vec::new();
    if name.is_empty() {
        causes.push((
            "metadata.name".into(),
            "Required value: name or generateName is required".into(),
        ));
    } else {
        let label_only = matches!(rt.plural.as_str(), "namespaces" | "services");
        let rbac_name = (rt.group == "rbac.authorization.k8s.io")
            .then(|| crate::authz::rbac_name_problems(name));
        let ok = if let Some(problems) = rbac_name {
            causes.extend(problems.into_iter().map(|p| {
                (
                    "metadata.name".to_string(),
                    format!("Invalid value: \"{name}\": {p}"),
                )
            }));
            true
        } else if label_only {
            is_dns_label(name)
        } else {
            is_dns_subdomain(name)
        };
        if !ok {
            causes.push((
                "metadata.name".into(),
                format!("Invalid value: \"{name}\": a lowercase RFC 1123 {} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", if label_only { "label" } else { "subdomain" }),
            ));
        }
    }
    if let Some(labels) = obj["metadata"].get("labels") {
        match labels.as_object() {
            Some(m) => {
                for (k, v) in m {
                    match v.as_str() {
                        Some(s) if is_label_key(k) && is_label_value(s) => {}
                        _ => causes.push((
                            "metadata.labels".to_string(),
                            format!("Invalid value: \"{k}\": {v}: labels must be a valid key and a string value of at most 63 characters"),
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => causes.push((
                "metadata.labels".into(),
                "Invalid value: must be a map of strings".into(),
            )),
        }
    }
    match rt.key().as_str() {
        "apiextensions.k8s.io/customresourcedefinitions" => {
            let plural = obj["spec"]["names"]["plural"].as_str().unwrap_or("");
            let group = obj["spec"]["group"].as_str().unwrap_or("");
            if name != format!("{plural}.{group}") {
                causes.push((
                    "metadata.name".into(),
                    format!(
                        "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                    ),
                ));
            }
        }
        "apps/deployments" | "apps/daemonsets" => {
            let selector = &obj["spec"]["selector"];
            if selector.is_null() {
                causes.push(("spec.selector".into(), "Required value".into()));
            } else {
                let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
                if !crate::selectors::label_selector_matches(selector, &labels).unwrap_or(false) {
                    causes.push((
                        "spec.template.metadata.labels".into(),
                        format!(
                            "Invalid value: {labels}: `selector` does not match template `labels`"
                        ),
                    ));
                }
            }
            if obj["spec"]["replicas"].as_i64().is_some_and(|r| r < 0) {
                causes.push((
                    "spec.replicas".into(),
                    "Invalid value: must be greater than or equal to 0".into(),
                ));
            }
            let containers = &obj["spec"]["template"]["spec"]["containers"];
            if containers.as_array().is_none_or(|c| c.is_empty()) {
                causes.push((
                    "spec.template.spec.containers".into(),
                    "Required value".into(),
                ));
            }
        }
        "/pods"
            if obj["spec"]["containers"]
                .as_array()
                .is_none_or(|c| c.is_empty()) =>
        {
            causes.push(("spec.containers".into(), "Required value".into()));
        }
        "policy/poddisruptionbudgets"
            if !obj["spec"]["minAvailable"].is_null()
                && !obj["spec"]["maxUnavailable"].is_null() =>
        {
            causes.push((
                "spec".into(),
                "Invalid value: minAvailable and maxUnavailable cannot be both set".into(),
            ));
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&rt.kind, &rt.group, name, causes))
    }
}

fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, p) in path.iter().enumerate() {
        if !cur.is_object() {
            return;
        }
        if i == path.len() - 1 {
            if cur.get(*p).is_none_or(Value::is_null) {
                cur[*p] = value;
            }
            return;
        }
        if cur.get(*p).is_none_or(Value::is_null) {
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
}

/// Fills in what a real server defaults on create.
pub fn default_on_create(rt: &ResourceType, obj: &mut Value) {
    // Like the real strategies: status is the server's on create, except for Nodes,
    // which the kubelet registers with their capacity.
    if rt.has_sub("status") && rt.key() != "/nodes" {
        if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
    }
    match rt.key().as_str() {
        "/pods" => {
            set_default(obj, &["spec", "schedulerName"], json!("default-scheduler"));
            set_default(obj, &["spec", "restartPolicy"], json!("Always"));
            set_default(obj, &["spec", "terminationGracePeriodSeconds"], json!(30));
            set_default(obj, &["spec", "dnsPolicy"], json!("ClusterFirst"));
            set_default(obj, &["spec", "serviceAccountName"], json!("default"));
            set_default(obj, &["spec", "priority"], json!(0));
            // The DefaultTolerationSeconds admission plugin adds these to every pod.
            let tolerations = obj["spec"]["tolerations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut tolerations = tolerations;
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                if !tolerations.iter().any(|t| t["key"] == key) {
                    tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
                }
            }
            obj["spec"]["tolerations"] = json!(tolerations);
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        "/namespaces" => {
            obj["status"] = json!({"phase": "Active"});
        }
        "/services" => {
            set_default(obj, &["spec", "type"], json!("ClusterIP"));
            set_default(obj, &["spec", "sessionAffinity"], json!("None"));
            if obj["spec"]["clusterIP"].is_null() {
                use rand::Rng;
                let mut r = rand::rng();
                let ip = format!(
                    "10.96.{}.{}",
                    r.random_range(0..255),
                    r.random_range(1..255)
                );
                obj["spec"]["clusterIP"] = json!(ip);
                obj["spec"]["clusterIPs"] = json!([ip]);
            }
            set_default(obj, &["status", "loadBalancer"], json!({}));
        }
        "/secrets" if obj["type"].as_str().is_none_or(str::is_empty) => {
            obj["type"] = json!("Opaque");
        }
        "apps/deployments" => {
            set_default(obj, &["spec", "replicas"], json!(1));
            set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
            set_default(obj, &["spec", "progressDeadlineSeconds"], json!(600));
            set_default(
                obj,
                &["spec", "strategy"],
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            set_default(obj, &["status"], json!({}));
        }
        "apps/daemonsets" => {
            set_default(
                obj,
                &["spec", "updateStrategy"],
                json!({"type": "RollingUpdate"}),
            );
            set_default(
                obj,
                &["status"],
                json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}),
            );
        }
        // pkg/apis/apps/v1/defaults.go, pkg/apis/core/v1/defaults.go and
        // pkg/apis/storage/v1/defaults.go.
        "apps/statefulsets" => {
            set_default(obj, &["spec", "replicas"], json!(1));
            set_default(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
            set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
            set_default(
                obj,
                &["spec", "updateStrategy"],
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                obj,
                &["spec", "persistentVolumeClaimRetentionPolicy"],
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            set_default(obj, &["status"], json!({"replicas": 0}));
        }
        "/persistentvolumeclaims" => {
            set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
            obj["status"] = json!({"phase": "Pending"});
        }
        "/persistentvolumes" => {
            set_default(
                obj,
                &["spec", "persistentVolumeReclaimPolicy"],
                json!("Retain"),
            );
            set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
            obj["status"] = json!({"phase": "Pending"});
        }
        "storage.k8s.io/storageclasses" => {
            set_default(obj, &["reclaimPolicy"], json!("Delete"));
            set_default(obj, &["volumeBindingMode"], json!("Immediate"));
        }
        "apiextensions.k8s.io/customresourcedefinitions" => {
            let names = obj["spec"]["names"].clone();
            let mut accepted = names.clone();
            if accepted["singular"].is_null() {
                if let Some(k) = names["kind"].as_str() {
                    accepted["singular"] = json!(k.to_lowercase());
                }
            }
            set_default(
                obj,
                &["spec", "names", "singular"],
                accepted["singular"].clone(),
            );
            if accepted["listKind"].is_null() {
                if let Some(k) = names["kind"].as_str() {
                    accepted["listKind"] = json!(format!("{k}List"));
                    set_default(
                        obj,
                        &["spec", "names", "listKind"],
                        json!(format!("{k}List")),
                    );
                }
            }
            let stored: Vec<Value> = obj["spec"]["versions"]
                .as_array()
                .map(|vs| {
                    vs.iter()
                        .filter(|v| v["storage"] == true)
                        .map(|v| v["name"].clone())
                        .collect()
                })
                .unwrap_or_default();
            let now = now_rfc3339();
            obj["status"] = json!({
                "acceptedNames": accepted,
                "storedVersions": stored,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
            });
        }
        _ => {}
    }
}
