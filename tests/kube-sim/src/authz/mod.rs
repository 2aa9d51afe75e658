//! Authorization: every authenticated request is checked before it is routed, as
//! kube-apiserver's `--authorization-mode=RBAC` checks it, with the privileged-group
//! authorizer first (members of `system:masters` may do anything, whatever RBAC says:
//! k8s.io/kubernetes pkg/kubeapiserver/authorizer/config.go). See docs/kube-sim.md.

pub mod bootstrap;
pub mod rbac;
pub mod request;

use std::sync::Arc;

use serde_json::{json, Value};

pub use crate::authn::UserInfo;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::Store;
use request::RequestInfo;

/// The group whose members are never refused (k8s.io/apiserver pkg/authentication/user
/// `SystemPrivilegedGroup`).
pub const MASTERS: &str = "system:masters";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// kube-sim's store as RBAC's source of roles and bindings: changes apply to the next
/// request, as the real authorizer's informers apply them within moments.
pub struct StorePolicies<'a>(pub &'a Store);

impl StorePolicies<'_> {
    fn kind(&self, plural: &str) -> Option<Arc<ResourceType>> {
        self.0.find_type(RBAC_GROUP, "v1", plural)
    }

    fn all(&self, plural: &str, ns: Option<&str>) -> Vec<Value> {
        self.kind(plural)
            .map(|rt| {
                self.0
                    .list(&rt, ns)
                    .0
                    .iter()
                    .map(|o| (**o).clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn one(&self, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let rt = self.kind(plural)?;
        self.0.get(&rt, ns, name).ok().map(|o| (*o).clone())
    }
}

impl rbac::Policies for StorePolicies<'_> {
    fn cluster_role_bindings(&self) -> Vec<Value> {
        self.all("clusterrolebindings", None)
    }
    fn role_bindings(&self, namespace: &str) -> Vec<Value> {
        self.all("rolebindings", Some(namespace))
    }
    fn cluster_role(&self, name: &str) -> Option<Value> {
        self.one("clusterroles", None, name)
    }
    fn role(&self, namespace: &str, name: &str) -> Option<Value> {
        self.one("roles", Some(namespace), name)
    }
}

/// One refused request: who, and the refusal's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub user: String,
    pub message: String,
}

/// Every refusal so far, so a test can say which permission a client lacked (the API
/// server's audit log would; kube-sim keeps them in memory).
#[derive(Default)]
pub struct Refusals(std::sync::Mutex<Vec<Refusal>>);

impl Refusals {
    pub fn all(&self) -> Vec<Refusal> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn record(&self, r: Refusal) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }
}

/// Allowed, or the 403 kube-apiserver answers (recorded in `refusals`).
pub fn authorize(
    store: &Store,
    refusals: &Refusals,
    user: &UserInfo,
    req: &RequestInfo,
) -> Result<(), ApiError> {
    if user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    rbac::authorize(&StorePolicies(store), user, req).map_err(|reasons| {
        let e = forbidden(user, req, &reasons);
        tracing::debug!(user = %user.name, "RBAC: {}", e.message);
        refusals.record(Refusal {
            user: user.name.clone(),
            message: e.message.clone(),
        });
        e
    })
}

/// The refusal as kube-apiserver words it (k8s.io/apiserver
/// pkg/endpoints/handlers/responsewriters/errors.go `forbiddenMessage`, wrapped by
/// apimachinery's `NewForbidden`): `<resource>[.<group>] ["<name>"] is forbidden: User
/// "<user>" cannot <verb> resource "<resource>[/<sub>]" in API group "<group>" in the
/// namespace "<ns>"` (or `at the cluster scope`), then `: RBAC: <reasons>` if any.
pub fn forbidden(user: &UserInfo, req: &RequestInfo, reasons: &[String]) -> ApiError {
    let who = &user.name;
    let mut why = if !req.resource_request {
        format!("User \"{who}\" cannot {} path \"{}\"", req.verb, req.path)
    } else {
        let resource = if req.subresource.is_empty() {
            req.resource.clone()
        } else {
            format!("{}/{}", req.resource, req.subresource)
        };
        let scope = if req.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", req.namespace)
        };
        format!(
            "User \"{who}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            req.verb, req.api_group
        )
    };
    if !reasons.is_empty() {
        why = format!("{why}: RBAC: {}", aggregate(reasons));
    }
    let qualified = match (req.resource.as_str(), req.api_group.as_str()) {
        ("", _) => String::new(),
        (r, "") => r.to_string(),
        (r, g) => format!("{r}.{g}"),
    };
    let message = match (qualified.is_empty(), req.name.is_empty()) {
        (true, _) => format!("forbidden: {why}"),
        (false, true) => format!("{qualified} is forbidden: {why}"),
        (false, false) => format!("{qualified} \"{}\" is forbidden: {why}", req.name),
    };
    let mut e = ApiError::new(403, "Forbidden", message);
    let mut details = json!({"kind": req.resource});
    if !req.api_group.is_empty() {
        details["group"] = json!(req.api_group);
    }
    if !req.name.is_empty() {
        details["name"] = json!(req.name);
    }
    e.details = Some(details);
    e
}

/// What is wrong with an RBAC object's name: RBAC names are path segments, not DNS names,
/// so `system:discovery` is valid (k8s.io/kubernetes pkg/apis/rbac/validation
/// `ValidateRBACName`, apimachinery's `path.IsValidPathSegmentName`).
pub fn rbac_name_problems(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(**c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// apimachinery's `utilerrors.NewAggregate(...).Error()`: one error as is, several in
/// brackets.
fn aggregate(reasons: &[String]) -> String {
    match reasons {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_like_kube_apiservers() {
        let sa = UserInfo::service_account("joiner", "joiner-agent");
        let req = RequestInfo::parse("POST", "/apis/joiner.dev/v1/nodeclaims", false, None);
        let e = forbidden(&sa, &req, &[]);
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "nodeclaims.joiner.dev is forbidden: User \"system:serviceaccount:joiner:joiner-agent\" cannot create resource \"nodeclaims\" in API group \"joiner.dev\" at the cluster scope"
        );
        let req = RequestInfo::parse("POST", "/api/v1/namespaces/a/pods/p/eviction", false, None);
        assert_eq!(
            forbidden(&sa, &req, &["role.rbac.authorization.k8s.io \"x\" not found".into()]).message,
            "pods \"p\" is forbidden: User \"system:serviceaccount:joiner:joiner-agent\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"a\": RBAC: role.rbac.authorization.k8s.io \"x\" not found"
        );
        let req = RequestInfo::parse("GET", "/version", false, None);
        assert_eq!(
            forbidden(&sa, &req, &[]).message,
            "forbidden: User \"system:serviceaccount:joiner:joiner-agent\" cannot get path \"/version\""
        );
    }
}
