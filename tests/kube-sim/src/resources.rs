//! What kube-sim serves: each resource type's names, scope and subresources.
//!
//! Discovery, routing, list kinds and short names all come from this one table, so that a
//! CRD registered at run time is served exactly like a built-in type.

use serde_json::{json, Value};

/// One served resource (a group, version and plural), as discovery describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Subresources such as `status`, `scale`, `eviction`.
    pub subresources: Vec<String>,
    /// Only spec changes bump `metadata.generation` for types with a status subresource;
    /// types without one bump it on any non-metadata change, as the real server does.
    pub builtin: bool,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Storage key: one collection per group and plural, whatever the version.
    pub fn key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    pub fn has_sub(&self, sub: &str) -> bool {
        self.subresources.iter().any(|s| s == sub)
    }

    /// The discovery `APIResource` entries for this type and its subresources.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let verbs = json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ]);
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
            "categories": self.categories,
            "storageVersionHash": "",
        })];
        for sub in &self.subresources {
            let (kind, group, version, verbs) = match sub.as_str() {
                "scale" => (
                    "Scale",
                    "autoscaling",
                    "v1",
                    json!(["get", "patch", "update"]),
                ),
                "eviction" => ("Eviction", "policy", "v1", json!(["create"])),
                "binding" => ("Binding", "", "v1", json!(["create"])),
                "token" => (
                    "TokenRequest",
                    "authentication.k8s.io",
                    "v1",
                    json!(["create"]),
                ),
                _ => (
                    self.kind.as_str(),
                    self.group.as_str(),
                    self.version.as_str(),
                    json!(["get", "patch", "update"]),
                ),
            };
            let mut e = json!({
                "name": format!("{}/{}", self.plural, sub),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if matches!(sub.as_str(), "scale" | "eviction" | "token") {
                e["group"] = json!(group);
                e["version"] = json!(version);
            }
            out.push(e);
        }
        out
    }
}

struct B(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
);

/// The built-in types kube-sim serves.
pub fn builtin_types() -> Vec<ResourceType> {
    let table = [
        B(
            "",
            "namespaces",
            "Namespace",
            "namespace",
            false,
            &["ns"],
            &["status"],
        ),
        B(
            "",
            "pods",
            "Pod",
            "pod",
            true,
            &["po"],
            &["status", "eviction", "binding", "log"],
        ),
        B("", "nodes", "Node", "node", false, &["no"], &["status"]),
        B(
            "",
            "services",
            "Service",
            "service",
            true,
            &["svc"],
            &["status"],
        ),
        B(
            "",
            "configmaps",
            "ConfigMap",
            "configmap",
            true,
            &["cm"],
            &[],
        ),
        B("", "secrets", "Secret", "secret", true, &[], &[]),
        B(
            "",
            "serviceaccounts",
            "ServiceAccount",
            "serviceaccount",
            true,
            &["sa"],
            &["token"],
        ),
        B("", "events", "Event", "event", true, &["ev"], &[]),
        B(
            "apps",
            "deployments",
            "Deployment",
            "deployment",
            true,
            &["deploy"],
            &["status", "scale"],
        ),
        B(
            "apps",
            "daemonsets",
            "DaemonSet",
            "daemonset",
            true,
            &["ds"],
            &["status"],
        ),
        B(
            "apps",
            "statefulsets",
            "StatefulSet",
            "statefulset",
            true,
            &["sts"],
            &["status", "scale"],
        ),
        B(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            "persistentvolumeclaim",
            true,
            &["pvc"],
            &["status"],
        ),
        B(
            "",
            "persistentvolumes",
            "PersistentVolume",
            "persistentvolume",
            false,
            &["pv"],
            &["status"],
        ),
        B(
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            "storageclass",
            false,
            &["sc"],
            &[],
        ),
        B(
            "storage.k8s.io",
            "csinodes",
            "CSINode",
            "csinode",
            false,
            &[],
            &[],
        ),
        B(
            "storage.k8s.io",
            "volumeattachments",
            "VolumeAttachment",
            "volumeattachment",
            false,
            &[],
            &["status"],
        ),
        B(
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            "poddisruptionbudget",
            true,
            &["pdb"],
            &["status"],
        ),
        // The agent's Deployment runs at PriorityClass joiner-agent-critical (joiner_agent
        // applies it); stored, not used for preemption.
        B(
            "scheduling.k8s.io",
            "priorityclasses",
            "PriorityClass",
            "priorityclass",
            false,
            &["pc"],
            &[],
        ),
        B(
            "coordination.k8s.io",
            "leases",
            "Lease",
            "lease",
            true,
            &[],
            &[],
        ),
        B(
            "rbac.authorization.k8s.io",
            "roles",
            "Role",
            "role",
            true,
            &[],
            &[],
        ),
        B(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            "rolebinding",
            true,
            &[],
            &[],
        ),
        B(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            "clusterrole",
            false,
            &[],
            &[],
        ),
        B(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            "clusterrolebinding",
            false,
            &[],
            &[],
        ),
        B(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            "customresourcedefinition",
            false,
            &["crd", "crds"],
            &["status"],
        ),
    ];
    table
        .into_iter()
        .map(
            |B(group, plural, kind, singular, namespaced, short, subs)| ResourceType {
                group: group.into(),
                version: "v1".into(),
                plural: plural.into(),
                singular: singular.into(),
                kind: kind.into(),
                namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                categories: if ["pods", "services", "deployments", "daemonsets"].contains(&plural) {
                    vec!["all".into()]
                } else {
                    vec![]
                },
                subresources: subs.iter().map(|s| s.to_string()).collect(),
                builtin: true,
            },
        )
        .collect()
}

/// The resource types a CRD object asks to be served (one per served version).
pub fn types_from_crd(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec["group"].as_str().ok_or("spec.group: Required value")?;
    let names = &spec["names"];
    let plural = names["plural"]
        .as_str()
        .ok_or("spec.names.plural: Required value")?;
    let kind = names["kind"]
        .as_str()
        .ok_or("spec.names.kind: Required value")?;
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let scope = spec["scope"].as_str().unwrap_or("Namespaced");
    if scope != "Namespaced" && scope != "Cluster" {
        return Err(format!("spec.scope: Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""));
    }
    let versions = spec["versions"]
        .as_array()
        .ok_or("spec.versions: Required value")?;
    if versions.is_empty() {
        return Err(
            "spec.versions: Invalid value: must have exactly one version marked as storage version"
                .into(),
        );
    }
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for v in versions {
        if v["served"].as_bool() == Some(false) {
            continue;
        }
        let name = v["name"]
            .as_str()
            .ok_or("spec.versions[].name: Required value")?;
        let mut subs = Vec::new();
        if v["subresources"].get("status").is_some() {
            subs.push("status".to_string());
        }
        if v["subresources"].get("scale").is_some() {
            subs.push("scale".to_string());
        }
        out.push(ResourceType {
            group: group.into(),
            version: name.into(),
            plural: plural.into(),
            singular: singular.clone(),
            kind: kind.into(),
            namespaced: scope == "Namespaced",
            short_names: strs(&names["shortNames"]),
            categories: strs(&names["categories"]),
            subresources: subs,
            builtin: false,
        });
    }
    Ok(out)
}
