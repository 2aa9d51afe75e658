//! The roles and bindings every cluster starts with, as kube-apiserver's RBAC bootstrap
//! writes them (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy
//! policy.go `ClusterRoles`, `ClusterRoleBindings`): only those a kube-sim client needs,
//! plus kube-sim's read-only viewer.

use serde_json::{json, Value};

use crate::store::Store;

/// The read-only user of kube-sim's kubeconfig (context `<cluster>-viewer`).
pub const VIEWER: &str = "kube-sim-viewer";

fn bootstrap_meta(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": bootstrap_meta(name), "rules": rules})
}

fn binding(name: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, n)| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": n}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": bootstrap_meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects})
}

/// The bootstrap ClusterRoles and their ClusterRoleBindings.
pub fn objects() -> (Vec<Value>, Vec<Value>) {
    let info = ["/livez", "/readyz", "/healthz", "/version", "/version/"];
    let mut discovery: Vec<&str> = info.to_vec();
    discovery.extend([
        "/openapi",
        "/openapi/*",
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
    ]);
    let roles = vec![
        role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
        ),
        role(
            "system:discovery",
            json!([{"nonResourceURLs": discovery, "verbs": ["get"]}]),
        ),
        role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": info, "verbs": ["get"]}]),
        ),
        role(
            VIEWER,
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]),
        ),
    ];
    let bindings = vec![
        binding("cluster-admin", &[("Group", "system:masters")]),
        binding("system:discovery", &[("Group", "system:authenticated")]),
        binding(
            "system:public-info-viewer",
            &[
                ("Group", "system:authenticated"),
                ("Group", "system:unauthenticated"),
            ],
        ),
        binding(VIEWER, &[("User", VIEWER)]),
    ];
    (roles, bindings)
}

/// Writes [`objects`] into a new store.
pub fn install(store: &Store) {
    let (roles, bindings) = objects();
    for (plural, items) in [("clusterroles", roles), ("clusterrolebindings", bindings)] {
        let rt = store
            .find_type("rbac.authorization.k8s.io", "v1", plural)
            .expect("RBAC types are built in");
        for o in items {
            store.create(&rt, None, o).expect("bootstrap RBAC object");
        }
    }
}
