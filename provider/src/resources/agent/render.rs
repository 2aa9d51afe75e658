//! The objects `joiner_agent` writes (contract B in the team's contracts): rendered as JSON
//! from the typed model so that a test can look at them without a cluster.

use serde_json::{json, Value as Json};

use crate::kubernetes::{kinds, Kind};
use crate::model::agent::AgentModel;

pub const NAME: &str = "joiner-agent";
pub const PRIORITY_CLASS: &str = "joiner-agent-critical";
pub const DEFAULT_NAMESPACE: &str = "joiner";
pub const IRSA_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
/// On the Deployment when pinned by digest: the configured `image`, whose tag the running
/// `REPOSITORY@DIGEST` no longer shows (so import and drift detection recover it).
pub const IMAGE_ANNOTATION: &str = "joiner.dev/image";

/// `public.ecr.aws/joiner/joiner-agent:<provider version>`.
pub fn default_image() -> String {
    format!(
        "public.ecr.aws/joiner/joiner-agent:{}",
        env!("CARGO_PKG_VERSION")
    )
}

/// What the Deployment runs: `image` as configured, or `REPOSITORY@DIGEST` when
/// `image_digest` pins it (the tag dropped: with a digest the runtime ignores it, and a
/// reader would take it for the version that runs).
pub fn container_image(m: &AgentModel) -> String {
    let image = m.image.clone().unwrap_or_else(default_image);
    match &m.image_digest {
        Some(digest) => format!("{}@{digest}", repository(&image)),
        None => image,
    }
}

/// The repository part of an image reference: without `@digest` and without `:tag` (a
/// colon after the last `/`; one before it belongs to a registry port).
pub fn repository(image: &str) -> &str {
    let image = image.split_once('@').map_or(image, |(r, _)| r);
    let name_start = image.rfind('/').map_or(0, |i| i + 1);
    match image[name_start..].rfind(':') {
        Some(i) => &image[..name_start + i],
        None => image,
    }
}

/// `sha256:` and 64 lowercase hex digits, the only digest form registries serve today.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn selector() -> Json {
    json!({"app.kubernetes.io/name": NAME})
}

fn meta(name: &str, namespace: Option<&str>) -> Json {
    let mut m = json!({
        "name": name,
        "labels": {
            "app.kubernetes.io/name": NAME,
            "app.kubernetes.io/managed-by": "terraform",
        },
    });
    if let Some(ns) = namespace {
        m["namespace"] = ns.into();
    }
    m
}

/// What the agent does in the cluster, and nothing more: it reads the pods it schedules and
/// drains, the DaemonSets whose pods every new node must fit and the PDBs that pace a drain;
/// manages nodes and its own CRDs; evicts pods; records events. Each rule is a call the
/// agent makes (its only typed and dynamic `Api`s are these kinds): no read of namespaces,
/// volumes, services or other workload controllers, which it does not look at.
///
/// Nodes and the joiner.dev objects are patched (registration labels, finalizers, cordon,
/// status), never replaced, so no `update`. Nodes are never created either: kubelets register
/// Nodes, and a credential that can create them can invent capacity that attracts any
/// workload. `agent_rbac` in the e2e suite runs the agent on a real API server with exactly
/// these rules, and checks what they refuse.
fn cluster_rules(m: &AgentModel) -> Json {
    let mut rules = json!([
        // delete: a drain's deadline (the NodePool's terminationGracePeriod) has come, and the
        // pods PodDisruptionBudgets or do-not-disrupt still hold are deleted, as Karpenter does.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
        // Volume topology: where a pod's claims let it run.
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
        // Attach limits (CSINodes) and, before an instance is terminated, its volumes'
        // detachment (VolumeAttachments): read only, the attach-detach controller writes them.
        {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes", "volumeattachments"], "verbs": ["get", "list", "watch"]},
    ]);
    if let Json::Array(r) = &mut rules {
        r.extend(crd_rules(m));
    }
    // Adopting Karpenter's nodes: reading its NodeClaims, then releasing (finalizer patch)
    // and deleting them. Only when asked for.
    if m.adopt_karpenter_namespace.is_some() {
        if let Json::Array(r) = &mut rules {
            r.push(json!({"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get", "list", "patch", "delete"]}));
        }
    }
    rules
}

/// Whether the agent serves Karpenter's API (`api = "karpenter"`).
pub fn serves_karpenter(m: &AgentModel) -> bool {
    m.api.as_deref() == Some("karpenter")
}

/// The served kinds' rules: joiner's group, or Karpenter's (NodePools, NodeClaims and
/// NodeOverlays in `karpenter.sh`, the classes as `karpenter.k8s.aws` EC2NodeClasses).
/// NodeOverlays are read, and their validation written on their status; never changed.
fn crd_rules(m: &AgentModel) -> Vec<Json> {
    if !serves_karpenter(m) {
        return vec![
            json!({"apiGroups": ["joiner.dev"], "resources": ["nodepools", "nodeclasses"], "verbs": ["get", "list", "watch", "patch"]}),
            json!({"apiGroups": ["joiner.dev"], "resources": ["nodepools/status", "nodeclasses/status", "nodeclaims/status"], "verbs": ["get", "patch"]}),
            json!({"apiGroups": ["joiner.dev"], "resources": ["nodeclaims"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}),
            json!({"apiGroups": ["joiner.dev"], "resources": ["nodeoverlays"], "verbs": ["get", "list", "watch"]}),
            json!({"apiGroups": ["joiner.dev"], "resources": ["nodeoverlays/status"], "verbs": ["get", "patch"]}),
        ];
    }
    vec![
        json!({"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["get", "list", "watch", "patch"]}),
        json!({"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": ["get", "list", "watch", "patch"]}),
        json!({"apiGroups": ["karpenter.sh"], "resources": ["nodepools/status", "nodeclaims/status", "nodeoverlays/status"], "verbs": ["get", "patch"]}),
        json!({"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses/status"], "verbs": ["get", "patch"]}),
        json!({"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}),
        json!({"apiGroups": ["karpenter.sh"], "resources": ["nodeoverlays"], "verbs": ["get", "list", "watch"]}),
    ]
}

/// The Role (and its binding) in Karpenter's namespace: reading its leader Lease, by name,
/// to know whether it still runs.
const KARPENTER_LEASE_ROLE: &str = "joiner-agent-karpenter-lease";

/// Every object with its kind and namespace, in the order they are applied (the namespace
/// first, the Deployment last).
pub fn objects(m: &AgentModel) -> Vec<(Kind, Option<String>, Json)> {
    let ns = m
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    let mut out: Vec<(Kind, Option<String>, Json)> = Vec::new();
    let mut push = |kind: Kind, namespaced: bool, body: Json| {
        out.push((kind, namespaced.then(|| ns.clone()), object(kind, body)));
    };
    push(
        kinds::NAMESPACE,
        false,
        json!({"metadata": meta(&ns, None)}),
    );
    // Under Karpenter's API the CRDs are Karpenter's, installed with its chart: replacing
    // them with joiner's schema would prune the fields joiner does not read.
    if !serves_karpenter(m) {
        for crd in crate::kubernetes::crds::all() {
            push(kinds::CRD, false, crd);
        }
    }
    for (kind, namespaced, body) in access(m, &ns) {
        push(kind, namespaced, body);
    }
    push(
        kinds::PRIORITY_CLASS,
        false,
        json!({
            "metadata": meta(PRIORITY_CLASS, None),
            "value": 1_000_000_000,
            "globalDefault": false,
            "description": "The joiner agent: it launches the nodes every other pod needs.",
        }),
    );
    push(
        kinds::PDB,
        true,
        json!({
            "metadata": meta(NAME, Some(&ns)),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector()}},
        }),
    );
    if let Some(kns) = &m.adopt_karpenter_namespace {
        out.extend(karpenter_lease_access(kns, &ns));
    }
    let rollout = object(kinds::DEPLOYMENT, json!(deployment(m, &ns)));
    out.push((kinds::DEPLOYMENT, Some(ns), rollout));
    out
}

/// `kind`'s apiVersion and kind, then `body`'s fields.
fn object(kind: Kind, body: Json) -> Json {
    let mut o = json!({"apiVersion": kind.api_version(), "kind": kind.kind});
    if let Json::Object(b) = body {
        for (k, v) in b {
            o[k] = v;
        }
    }
    o
}

/// Who the agent is and what it may do: its service account (with the IRSA role), its
/// cluster-wide rules and its leader election in its own namespace `ns`; each body with
/// whether it lives in `ns`.
fn access(m: &AgentModel, ns: &str) -> Vec<(Kind, bool, Json)> {
    let mut sa_meta = meta(NAME, Some(ns));
    if let Some(arn) = &m.role_arn {
        sa_meta["annotations"] = json!({});
        sa_meta["annotations"][IRSA_ANNOTATION] = arn.clone().into();
    }
    vec![
        (kinds::SERVICE_ACCOUNT, true, json!({"metadata": sa_meta})),
        (
            kinds::CLUSTER_ROLE,
            false,
            json!({"metadata": meta(NAME, None), "rules": cluster_rules(m)}),
        ),
        (
            kinds::CLUSTER_ROLE_BINDING,
            false,
            json!({
                "metadata": meta(NAME, None),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
            }),
        ),
        (
            kinds::ROLE,
            true,
            json!({
                "metadata": meta(NAME, Some(ns)),
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch", "create", "update", "patch"]},
                    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                ],
            }),
        ),
        (
            kinds::ROLE_BINDING,
            true,
            json!({
                "metadata": meta(NAME, Some(ns)),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
            }),
        ),
    ]
}

/// The Role and binding in Karpenter's namespace `kns` that let the agent (in `ns`) read
/// Karpenter's leader Lease; applied before the Deployment.
fn karpenter_lease_access(kns: &str, ns: &str) -> Vec<(Kind, Option<String>, Json)> {
    [
        (
            kinds::ROLE,
            json!({
                "metadata": meta(KARPENTER_LEASE_ROLE, Some(kns)),
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["karpenter-leader-election"], "verbs": ["get"]}],
            }),
        ),
        (
            kinds::ROLE_BINDING,
            json!({
                "metadata": meta(KARPENTER_LEASE_ROLE, Some(kns)),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": KARPENTER_LEASE_ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
            }),
        ),
    ]
    .into_iter()
    .map(|(kind, body)| (kind, Some(kns.to_string()), object(kind, body)))
    .collect()
}

fn env(m: &AgentModel) -> Json {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let mut env = vec![
        json!({"name": "JOINER_CLUSTER_NAME", "value": m.cluster_name.clone().unwrap_or_default()}),
    ];
    if let Some(q) = &m.queue_url {
        env.push(json!({"name": "JOINER_QUEUE_URL", "value": q}));
    }
    env.push(json!({"name": "JOINER_LOG_LEVEL", "value": m.log_level.clone().unwrap_or_else(|| "info".into())}));
    if let Some(ns) = &m.adopt_karpenter_namespace {
        env.push(json!({"name": "JOINER_ADOPT_KARPENTER_NAMESPACE", "value": ns}));
    }
    if serves_karpenter(m) {
        env.push(json!({"name": "JOINER_API", "value": "karpenter"}));
    }
    env.push(json!({"name": "POD_NAME", "valueFrom": field("metadata.name")}));
    env.push(json!({"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")}));
    env.push(json!({"name": "POD_IP", "valueFrom": field("status.podIP")}));
    env.push(json!({"name": "JOINER_METRICS_ADDR", "value": "$(POD_IP):8080"}));
    env.push(json!({"name": "JOINER_HEALTH_ADDR", "value": "$(POD_IP):8081"}));
    for (k, v) in &m.env {
        env.push(json!({"name": k, "value": v}));
    }
    Json::Array(env)
}

/// AWS_REGION is set from the provider's region by the caller (it is not in the model).
pub fn deployment(m: &AgentModel, ns: &str) -> Json {
    let mut labels = selector();
    for (k, v) in &m.labels {
        labels[k] = v.clone().into();
    }
    let tolerations: Vec<Json> = m
        .tolerations
        .iter()
        .map(|t| {
            let mut o = json!({});
            for (k, v) in [
                ("key", &t.key),
                ("operator", &t.operator),
                ("value", &t.value),
                ("effect", &t.effect),
            ] {
                if let Some(v) = v {
                    o[k] = v.clone().into();
                }
            }
            o
        })
        .collect();
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": 8081}, "initialDelaySeconds": 5, "periodSeconds": 10});
    let mut metadata = meta(NAME, Some(ns));
    if m.image_digest.is_some() {
        metadata["annotations"] =
            json!({ IMAGE_ANNOTATION: m.image.clone().unwrap_or_else(default_image) });
    }
    json!({
        "metadata": metadata,
        "spec": {
            "replicas": m.replicas.unwrap_or(2),
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": selector()},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": PRIORITY_CLASS,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": selector()},
                    }],
                    "tolerations": tolerations,
                    "containers": [{
                        "name": "agent",
                        "image": container_image(m),
                        "args": ["run"],
                        "env": env(m),
                        "ports": [
                            {"name": "metrics", "containerPort": 8080},
                            {"name": "health", "containerPort": 8081},
                        ],
                        "livenessProbe": probe("/healthz"),
                        "readinessProbe": probe("/readyz"),
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"memory": "256Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_drops_tag_and_digest_but_not_a_registry_port() {
        assert_eq!(
            repository("public.ecr.aws/joiner/joiner-agent:0.1.0"),
            "public.ecr.aws/joiner/joiner-agent"
        );
        assert_eq!(
            repository("localhost:5000/joiner-agent"),
            "localhost:5000/joiner-agent"
        );
        assert_eq!(
            repository("localhost:5000/joiner-agent:1@sha256:ab"),
            "localhost:5000/joiner-agent"
        );
        assert_eq!(repository("joiner-agent"), "joiner-agent");
        assert!(is_digest(&format!("sha256:{}", "a".repeat(64))));
        assert!(!is_digest(&format!("sha256:{}", "A".repeat(64))));
        assert!(!is_digest("sha256:abc"));
    }

    #[test]
    fn contract_b() {
        let m = AgentModel {
            cluster_name: Some("prod".into()),
            queue_url: Some("https://sqs/q".into()),
            role_arn: Some("arn:aws:iam::1:role/a".into()),
            env: [("EXTRA".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let objs = objects(&m);
        let kinds: Vec<&str> = objs.iter().map(|(k, _, _)| k.kind).collect();
        assert_eq!(kinds.first(), Some(&"Namespace"));
        assert_eq!(kinds.last(), Some(&"Deployment"));
        for k in [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "PriorityClass",
            "PodDisruptionBudget",
        ] {
            assert!(kinds.contains(&k), "{k}");
        }
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == "CustomResourceDefinition")
                .count(),
            4,
            "NodePool, NodeClass, NodeClaim, NodeOverlay"
        );
        let sa = &objs
            .iter()
            .find(|o| o.0.kind == "ServiceAccount")
            .unwrap()
            .2;
        assert_eq!(
            sa["metadata"]["annotations"][IRSA_ANNOTATION],
            "arn:aws:iam::1:role/a"
        );
        let d = &objs.last().unwrap().2;
        assert_eq!(d["metadata"]["namespace"], "joiner");
        assert_eq!(d["spec"]["replicas"], 2);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["name"], "agent");
        assert_eq!(c["args"], json!(["run"]));
        assert_eq!(c["image"], default_image());
        assert_eq!(c["resources"]["requests"]["cpu"], "100m");
        assert_eq!(c["resources"]["limits"]["memory"], "256Mi");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        let env = c["env"].as_array().unwrap();
        let get = |n: &str| env.iter().find(|e| e["name"] == n).cloned();
        assert_eq!(get("JOINER_CLUSTER_NAME").unwrap()["value"], "prod");
        assert_eq!(get("JOINER_QUEUE_URL").unwrap()["value"], "https://sqs/q");
        assert_eq!(
            get("JOINER_HEALTH_ADDR").unwrap()["value"],
            "$(POD_IP):8081"
        );
        assert_eq!(
            get("POD_IP").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
            "status.podIP"
        );
        assert_eq!(get("EXTRA").unwrap()["value"], "1");
        // No annotation without a role (Pod Identity).
        let objs = objects(&AgentModel::default());
        let sa = &objs
            .iter()
            .find(|o| o.0.kind == "ServiceAccount")
            .unwrap()
            .2;
        assert!(sa["metadata"].get("annotations").is_none());
    }

    /// Pods: read, and deleted only once a drain's deadline has come; never created,
    /// changed or bound by the agent, and no other subresource than eviction.
    #[test]
    fn pods_are_read_evicted_and_deleted_and_nothing_more() {
        let rules = cluster_rules(&AgentModel::default());
        let verbs = |resource: &str| -> Vec<String> {
            rules
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["apiGroups"] == json!([""]))
                .filter(|r| {
                    r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(resource))
                })
                .flat_map(|r| r["verbs"].as_array().unwrap().clone())
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(verbs("pods"), ["get", "list", "watch", "delete"]);
        assert_eq!(verbs("pods/eviction"), ["create"]);
        let pod_subresources: Vec<&Json> = rules
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_array().unwrap())
            .filter(|r| r.as_str().is_some_and(|r| r.starts_with("pods/")))
            .collect();
        assert_eq!(pod_subresources, [&json!("pods/eviction")]);
    }

    /// Attach limits and volume detachment are read, never written: the kubelet writes
    /// CSINodes and the attach-detach controller VolumeAttachments.
    #[test]
    fn karpenters_api_grants_karpenters_groups_and_installs_no_crd() {
        let m = AgentModel {
            cluster_name: Some("prod".into()),
            api: Some("karpenter".into()),
            ..Default::default()
        };
        let objects = objects(&m);
        assert!(
            objects
                .iter()
                .all(|(k, _, _)| k.kind != "CustomResourceDefinition"),
            "Karpenter's CRDs stay Karpenter's"
        );
        let rules = cluster_rules(&m);
        let groups: Vec<&str> = rules
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["apiGroups"].as_array().unwrap().iter())
            .filter_map(|g| g.as_str())
            .collect();
        assert!(!groups.contains(&"joiner.dev"), "{groups:?}");
        assert!(groups.contains(&"karpenter.sh") && groups.contains(&"karpenter.k8s.aws"));
        let grants = |group: &str, resource: &str, verb: &str| {
            rules.as_array().unwrap().iter().any(|r| {
                r["apiGroups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|g| g == group)
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x == resource)
                    && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
            })
        };
        assert!(grants("karpenter.sh", "nodeclaims", "create"));
        assert!(grants(
            "karpenter.k8s.aws",
            "ec2nodeclasses/status",
            "patch"
        ));
        assert!(
            !grants("karpenter.sh", "nodepools", "create"),
            "pools are the user's"
        );
        let env = env(&m);
        assert!(env
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "JOINER_API" && e["value"] == "karpenter"));
        let joiner = objects_of_kind(&AgentModel::default(), "CustomResourceDefinition");
        assert!(joiner > 0, "joiner's API installs its CRDs");
    }

    fn objects_of_kind(m: &AgentModel, kind: &str) -> usize {
        objects(m).iter().filter(|(k, _, _)| k.kind == kind).count()
    }

    #[test]
    fn storage_objects_are_only_read() {
        let rules = cluster_rules(&AgentModel::default());
        for resource in ["csinodes", "volumeattachments", "storageclasses"] {
            let verbs: Vec<String> = rules
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["apiGroups"] == json!(["storage.k8s.io"]))
                .filter(|r| {
                    r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(resource))
                })
                .flat_map(|r| r["verbs"].as_array().unwrap().clone())
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            assert_eq!(verbs, ["get", "list", "watch"], "{resource}");
        }
    }
}
