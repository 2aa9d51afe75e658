//! The agent's Kubernetes identity in a world: the ServiceAccount, ClusterRole, Role and
//! bindings `joiner_agent` renders (the provider's own `render::objects`, never copied by
//! hand), applied by the admin, and a TokenRequest token of that ServiceAccount in a
//! kubeconfig that holds nothing else. kube-sim and the real API server both enforce RBAC,
//! so the agent may do what those roles grant and no more, as on a real cluster; tests and
//! every other client of the world keep the admin credential.

use std::path::PathBuf;

use joiner_agent::api::served::ApiFlavor;
use joiner_provider::model::agent::AgentModel;
use joiner_provider::resources::agent::render;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

/// The agent's namespace (`--namespace`) and ServiceAccount.
pub const NAMESPACE: &str = render::DEFAULT_NAMESPACE;
pub const SERVICE_ACCOUNT: &str = render::NAME;

const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The RBAC objects `joiner_agent` renders for this world's cluster, with Karpenter's
/// namespace when the agent adopts from it.
pub fn rendered(cluster: &str, adopt_karpenter_namespace: Option<&str>) -> Vec<Value> {
    rendered_for(cluster, adopt_karpenter_namespace, ApiFlavor::Joiner)
}

/// [`rendered`], for an agent serving `api`.
pub fn rendered_for(
    cluster: &str,
    adopt_karpenter_namespace: Option<&str>,
    api: ApiFlavor,
) -> Vec<Value> {
    let model = AgentModel {
        cluster_name: Some(cluster.to_string()),
        namespace: Some(NAMESPACE.to_string()),
        adopt_karpenter_namespace: adopt_karpenter_namespace.map(str::to_string),
        api: Some(match api {
            ApiFlavor::Joiner => "joiner".into(),
            ApiFlavor::Karpenter => "karpenter".into(),
        }),
        ..Default::default()
    };
    render::objects(&model)
        .into_iter()
        .filter(|(kind, _, _)| RBAC_KINDS.contains(&kind.kind))
        .map(|(_, _, obj)| obj)
        .collect()
}

/// The rendered ClusterRole.
pub fn cluster_role(objects: &[Value]) -> Value {
    objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole")
        .cloned()
        .expect("joiner_agent renders a ClusterRole")
}

/// `role` with `verb` taken out of the rules on `resource` (the refused-permission tests);
/// panics when no rule grants it, so a test cannot silently remove nothing.
pub fn without_verb(mut role: Value, resource: &str, verb: &str) -> Value {
    let mut removed = false;
    for rule in role["rules"].as_array_mut().expect("rules") {
        let on_resource = rule["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == resource));
        if let (true, Some(verbs)) = (on_resource, rule["verbs"].as_array_mut()) {
            let before = verbs.len();
            verbs.retain(|v| v != verb);
            removed |= verbs.len() < before;
        }
    }
    assert!(removed, "no rule grants {verb} on {resource}");
    role
}

fn api_for(client: &kube::Client, obj: &Value) -> Api<DynamicObject> {
    let (group, version) = match obj["apiVersion"].as_str().unwrap_or("").split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap_or("").to_string(),
        ),
    };
    let kind = obj["kind"].as_str().unwrap_or("");
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, &version, kind), &plural);
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Applies `objects` as the provider does (server-side apply, its field manager); a role
/// applied again replaces its rules.
pub async fn apply(client: &kube::Client, objects: &[Value]) {
    let pp = PatchParams::apply("terraform-provider-joiner").force();
    for obj in objects {
        let name = obj["metadata"]["name"].as_str().expect("metadata.name");
        api_for(client, obj)
            .patch(name, &pp, &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("apply {} {name}: {e}", obj["kind"]));
    }
}

/// A TokenRequest token of the agent's ServiceAccount, as `kubectl create token` gets one.
pub async fn token(client: &kube::Client) -> String {
    token_valid_for(client, 3600).await
}

/// [`token`], valid for `seconds` (a run of hours).
pub async fn token_valid_for(client: &kube::Client, seconds: i64) -> String {
    let sas: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ServiceAccount"),
            "serviceaccounts",
        ),
    );
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    });
    let answer: Value = sas
        .create_subresource("token", SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .expect("TokenRequest for the agent's ServiceAccount");
    answer["status"]["token"]
        .as_str()
        .expect("status.token")
        .to_string()
}

/// The agent's kubeconfig file, removed (with its directory) on drop.
pub struct AgentKubeconfig {
    pub path: PathBuf,
}

impl Drop for AgentKubeconfig {
    fn drop(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Writes the agent's kubeconfig (owner-only) in a directory of its own.
pub fn write_kubeconfig(server: &str, ca_pem: &str, token: &str) -> AgentKubeconfig {
    let dir = std::env::temp_dir().join(format!(
        "joiner-agent-world-{}-{}",
        std::process::id(),
        joiner_test_support::free_port()
    ));
    let path = dir.join("agent.kubeconfig");
    let text = kube_sim::runner::identity::pod_kubeconfig(server, ca_pem, token, NAMESPACE);
    kube_sim::runner::identity::write_secret(&path, &text).expect("write the agent's kubeconfig");
    AgentKubeconfig { path }
}
