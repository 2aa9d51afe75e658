//! Untyped object access: server-side apply, get and delete of any kind by its API
//! coordinates, so the resources need no discovery round-trip (which would fail for CRDs
//! applied moments earlier) and work for built-in and custom kinds alike.

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value as Json;

use super::connect::Kube;
use super::error::KubeError;

/// The field manager every write uses; `kubectl` shows it in `managedFields`.
pub const FIELD_MANAGER: &str = "joiner";

/// A kind's API coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
}

impl Kind {
    pub const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        namespaced: bool,
    ) -> Kind {
        Kind {
            group,
            version,
            kind,
            plural,
            namespaced,
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }
}

pub mod kinds {
    use super::Kind;
    pub const NAMESPACE: Kind = Kind::new("", "v1", "Namespace", "namespaces", false);
    pub const SERVICE_ACCOUNT: Kind =
        Kind::new("", "v1", "ServiceAccount", "serviceaccounts", true);
    pub const POD: Kind = Kind::new("", "v1", "Pod", "pods", true);
    pub const NODE: Kind = Kind::new("", "v1", "Node", "nodes", false);
    pub const EVENT: Kind = Kind::new("", "v1", "Event", "events", true);
    pub const CLUSTER_ROLE: Kind = Kind::new(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    );
    pub const CLUSTER_ROLE_BINDING: Kind = Kind::new(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    );
    pub const ROLE: Kind = Kind::new("rbac.authorization.k8s.io", "v1", "Role", "roles", true);
    pub const ROLE_BINDING: Kind = Kind::new(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    );
    pub const CRD: Kind = Kind::new(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    );
    pub const PRIORITY_CLASS: Kind = Kind::new(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
    );
    pub const PDB: Kind = Kind::new(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    );
    pub const DEPLOYMENT: Kind = Kind::new("apps", "v1", "Deployment", "deployments", true);
    pub const NODE_POOL: Kind = Kind::new("joiner.dev", "v1", "NodePool", "nodepools", false);
    pub const NODE_CLASS: Kind = Kind::new("joiner.dev", "v1", "NodeClass", "nodeclasses", false);
    pub const NODE_CLAIM: Kind = Kind::new("joiner.dev", "v1", "NodeClaim", "nodeclaims", false);
    pub const NODE_OVERLAY: Kind =
        Kind::new("joiner.dev", "v1", "NodeOverlay", "nodeoverlays", false);
}

impl Kube {
    fn api(&self, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        let ar = kind.resource();
        match (kind.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (true, None) => Api::all_with(self.client.clone(), &ar),
            (false, _) => Api::all_with(self.client.clone(), &ar),
        }
    }

    fn describe(kind: Kind, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if kind.namespaced => format!("{} {ns}/{name}", kind.kind),
            _ => format!("{} {name}", kind.kind),
        }
    }

    /// Server-side apply of `object` (which carries apiVersion, kind and metadata.name),
    /// taking ownership of every field it sets (`force`), as `kubectl apply
    /// --server-side --force-conflicts` does. Returns the object as stored.
    pub async fn apply(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        object: &Json,
    ) -> Result<Json, KubeError> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .api(kind, namespace)
            .patch(name, &params, &Patch::Apply(object))
            .await
        {
            Ok(o) => Ok(serde_json::to_value(o).unwrap_or_default()),
            Err(e) => Err(self
                .error(e, "apply", &Self::describe(kind, namespace, name))
                .await),
        }
    }

    /// The object, or None when it does not exist.
    pub async fn get(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Json>, KubeError> {
        match self.api(kind, namespace).get_opt(name).await {
            Ok(o) => Ok(o.map(|o| serde_json::to_value(o).unwrap_or_default())),
            Err(e) => {
                let e = self
                    .error(e, "get", &Self::describe(kind, namespace, name))
                    .await;
                if e.is_not_found() {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Objects of a kind, optionally filtered by a label selector.
    pub async fn list(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Json>, KubeError> {
        let mut lp = ListParams::default();
        if let Some(s) = label_selector {
            lp = lp.labels(s);
        }
        match self.api(kind, namespace).list(&lp).await {
            Ok(list) => Ok(list
                .items
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .collect()),
            Err(e) => {
                let e = self.error(e, "list", kind.plural).await;
                // A CRD not installed yet has no objects.
                if e.is_not_found() {
                    Ok(Vec::new())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Deletes (foreground for owners' dependants is the server's business); gone is success.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), KubeError> {
        match self
            .api(kind, namespace)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = self
                    .error(e, "delete", &Self::describe(kind, namespace, name))
                    .await;
                if e.is_not_found() {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// The last lines of a pod container's log (best effort: empty when unavailable).
    pub async fn log_tail(&self, namespace: &str, pod: &str, lines: i64) -> String {
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let lp = kube::api::LogParams {
            tail_lines: Some(lines),
            ..Default::default()
        };
        api.logs(pod, &lp).await.unwrap_or_default()
    }
}
