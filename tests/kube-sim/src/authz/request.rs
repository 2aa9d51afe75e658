//! The attributes an authorizer sees, derived from the request alone, as kube-apiserver's
//! `RequestInfoFactory.NewRequestInfo` derives them (k8s.io/apiserver
//! pkg/endpoints/request/requestinfo.go): before routing, so a caller without rights is
//! refused even a type that does not exist.

/// What is being asked: the verb and either a resource or a non-resource path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`
    /// for resources; the lower-cased HTTP method for other paths.
    pub verb: String,
    pub resource_request: bool,
    pub path: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests. A Namespace's own name is its namespace too, so
    /// that a RoleBinding in `x` can grant `get` on the Namespace `x`.
    pub namespace: String,
    pub name: String,
}

/// The subresources that follow a Namespace's name directly (`/namespaces/x/status`);
/// any other segment there is a namespaced type's plural.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestInfo {
    /// `watch` is the `?watch=` flag; `field_selector` the raw `?fieldSelector=`.
    pub fn parse(
        method: &str,
        path: &str,
        watch: bool,
        field_selector: Option<&str>,
    ) -> RequestInfo {
        let mut info = RequestInfo {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
            ..Default::default()
        };
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let rest = match parts.as_slice() {
            ["api", version, rest @ ..] if !rest.is_empty() => {
                info.api_version = version.to_string();
                rest
            }
            ["apis", group, version, rest @ ..] if !rest.is_empty() => {
                info.api_group = group.to_string();
                info.api_version = version.to_string();
                rest
            }
            _ => return info,
        };
        info.resource_request = true;
        let rest = match rest {
            ["watch", rest @ ..] if !rest.is_empty() => {
                info.verb = "watch".into();
                rest
            }
            _ => {
                info.verb = verb_of_method(method).into();
                rest
            }
        };
        let rest = match rest {
            ["namespaces", ns, tail @ ..] => {
                info.namespace = ns.to_string();
                match tail.first() {
                    Some(sub) if !NAMESPACE_SUBRESOURCES.contains(sub) => tail,
                    _ => rest,
                }
            }
            _ => rest,
        };
        info.resource = rest.first().map(|s| s.to_string()).unwrap_or_default();
        info.name = rest.get(1).map(|s| s.to_string()).unwrap_or_default();
        info.subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
        info.collection_verbs(watch, field_selector);
        info
    }

    /// A `get` without a name lists (or watches), a `delete` without one deletes a
    /// collection; a list or watch narrowed to one `metadata.name` names that object.
    fn collection_verbs(&mut self, watch: bool, field_selector: Option<&str>) {
        if self.name.is_empty() && self.verb == "get" {
            self.verb = if watch { "watch" } else { "list" }.into();
        }
        if self.name.is_empty() && matches!(self.verb.as_str(), "list" | "watch") {
            if let Some(name) = field_selector.and_then(exact_name) {
                self.name = name;
            }
        }
        if self.name.is_empty() && self.verb == "delete" {
            self.verb = "deletecollection".into();
        }
    }
}

fn verb_of_method(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// The name a field selector pins `metadata.name` to (`=` or `==`), when it is a valid
/// path segment.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let value = term
            .trim()
            .strip_prefix("metadata.name")?
            .trim_start()
            .strip_prefix('=')?;
        let value = value.strip_prefix('=').unwrap_or(value).trim();
        let valid = !value.is_empty()
            && value != "."
            && value != ".."
            && !value.contains('/')
            && !value.contains('%');
        valid.then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(method: &str, path: &str) -> RequestInfo {
        RequestInfo::parse(method, path, false, None)
    }

    #[test]
    fn verbs_follow_method_name_and_watch() {
        assert_eq!(p("GET", "/api/v1/namespaces/a/pods/x").verb, "get");
        assert_eq!(p("GET", "/api/v1/namespaces/a/pods").verb, "list");
        assert_eq!(
            RequestInfo::parse("GET", "/api/v1/pods", true, None).verb,
            "watch"
        );
        assert_eq!(p("GET", "/api/v1/watch/namespaces/a/pods").verb, "watch");
        assert_eq!(p("POST", "/api/v1/namespaces/a/pods").verb, "create");
        assert_eq!(p("PUT", "/api/v1/nodes/n").verb, "update");
        assert_eq!(p("PATCH", "/api/v1/nodes/n/status").verb, "patch");
        assert_eq!(p("DELETE", "/api/v1/nodes/n").verb, "delete");
        assert_eq!(p("DELETE", "/api/v1/nodes").verb, "deletecollection");
    }

    #[test]
    fn resource_subresource_group_namespace_name() {
        let i = p("POST", "/api/v1/namespaces/a/pods/x/eviction");
        assert!(i.resource_request);
        assert_eq!(
            (
                i.api_group.as_str(),
                i.resource.as_str(),
                i.subresource.as_str(),
                i.namespace.as_str(),
                i.name.as_str()
            ),
            ("", "pods", "eviction", "a", "x")
        );
        let i = p("PATCH", "/apis/joiner.dev/v1/nodeclaims/c/status");
        assert_eq!(
            (
                i.api_group.as_str(),
                i.resource.as_str(),
                i.subresource.as_str()
            ),
            ("joiner.dev", "nodeclaims", "status")
        );
        assert_eq!(i.namespace, "");
    }

    #[test]
    fn a_namespace_is_in_itself() {
        let i = p("GET", "/api/v1/namespaces/a");
        assert_eq!(
            (i.resource.as_str(), i.name.as_str(), i.namespace.as_str()),
            ("namespaces", "a", "a")
        );
        let i = p("PUT", "/api/v1/namespaces/a/finalize");
        assert_eq!(
            (
                i.resource.as_str(),
                i.subresource.as_str(),
                i.namespace.as_str()
            ),
            ("namespaces", "finalize", "a")
        );
        let i = p("GET", "/api/v1/namespaces");
        assert_eq!((i.verb.as_str(), i.namespace.as_str()), ("list", ""));
    }

    #[test]
    fn discovery_and_other_paths_are_not_resources() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
        ] {
            let i = p("GET", path);
            assert!(!i.resource_request, "{path}");
            assert_eq!(i.verb, "get", "{path}");
            assert_eq!(i.path, path);
        }
    }

    #[test]
    fn a_list_for_one_name_names_it() {
        let i = RequestInfo::parse(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/k/leases",
            true,
            Some("metadata.name=leader"),
        );
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("watch", "leader"));
        let i = RequestInfo::parse(
            "GET",
            "/api/v1/pods",
            false,
            Some("spec.nodeName=n,metadata.name==p"),
        );
        assert_eq!(i.name, "p");
        let i = RequestInfo::parse("GET", "/api/v1/pods", false, Some("metadata.name!=p"));
        assert_eq!(i.name, "");
    }
}
