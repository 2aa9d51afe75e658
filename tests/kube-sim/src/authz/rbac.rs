//! RBAC, evaluated as kube-apiserver's RBAC authorizer evaluates it
//! (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go `RuleAllows`, the matchers of
//! pkg/apis/rbac/v1/evaluation_helpers.go, and the binding walk of
//! pkg/registry/rbac/validation/rule.go `VisitRulesFor`/`appliesToUser`): a request is
//! allowed when one rule of one role bound to the user allows it; nothing is ever denied
//! explicitly, so what no rule allows is refused.

use serde_json::Value;

use super::request::RequestInfo;
use super::UserInfo;

/// Reads the RBAC objects a decision needs (kube-sim's store in the server; plain lists
/// in tests).
pub trait Policies {
    fn cluster_role_bindings(&self) -> Vec<Value>;
    /// The RoleBindings of one namespace.
    fn role_bindings(&self, namespace: &str) -> Vec<Value>;
    fn cluster_role(&self, name: &str) -> Option<Value>;
    fn role(&self, namespace: &str, name: &str) -> Option<Value>;
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn verb_matches(rule: &Value, verb: &str) -> bool {
    strings(&rule["verbs"]).any(|v| v == "*" || v == verb)
}

fn api_group_matches(rule: &Value, group: &str) -> bool {
    strings(&rule["apiGroups"]).any(|g| g == "*" || g == group)
}

/// `*`, the exact `resource/subresource`, or `*/subresource`.
fn resource_matches(rule: &Value, combined: &str, subresource: &str) -> bool {
    strings(&rule["resources"]).any(|r| {
        r == "*"
            || r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

/// No names means every object; otherwise the request must name one of them, so a rule
/// with names never allows a list (a list names nothing) nor a create.
fn resource_name_matches(rule: &Value, name: &str) -> bool {
    let mut names = strings(&rule["resourceNames"]).peekable();
    names.peek().is_none() || names.any(|n| n == name)
}

/// `*`, the exact path, or a prefix ending in `*`.
fn non_resource_url_matches(rule: &Value, path: &str) -> bool {
    strings(&rule["nonResourceURLs"]).any(|u| {
        u == "*"
            || u == path
            || u.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// Whether one PolicyRule allows the request.
pub fn rule_allows(req: &RequestInfo, rule: &Value) -> bool {
    if !verb_matches(rule, &req.verb) {
        return false;
    }
    if !req.resource_request {
        return non_resource_url_matches(rule, &req.path);
    }
    let combined = if req.subresource.is_empty() {
        req.resource.clone()
    } else {
        format!("{}/{}", req.resource, req.subresource)
    };
    api_group_matches(rule, &req.api_group)
        && resource_matches(rule, &combined, &req.subresource)
        && resource_name_matches(rule, &req.name)
}

/// Whether a binding's subject is the user. A ServiceAccount subject without a namespace
/// means the binding's own (none for a ClusterRoleBinding: it then matches nobody).
fn subject_is(user: &UserInfo, subject: &Value, binding_namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or("");
    match subject["kind"].as_str() {
        Some("User") => user.name == name,
        Some("Group") => user.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// The rules a binding's roleRef grants, or why it grants none (the role is missing).
fn referenced_rules(
    policies: &dyn Policies,
    binding: &Value,
    binding_namespace: &str,
) -> Result<Vec<Value>, String> {
    let role_ref = &binding["roleRef"];
    let name = role_ref["name"].as_str().unwrap_or("");
    let role = match role_ref["kind"].as_str() {
        Some("ClusterRole") => policies
            .cluster_role(name)
            .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io \"{name}\" not found")),
        Some("Role") if !binding_namespace.is_empty() => policies
            .role(binding_namespace, name)
            .ok_or_else(|| format!("role.rbac.authorization.k8s.io \"{name}\" not found")),
        other => Err(format!("unsupported role reference kind: {other:?}")),
    }?;
    Ok(role["rules"].as_array().cloned().unwrap_or_default())
}

/// Allowed, or the reasons collected on the way (bindings whose role is missing), which
/// kube-apiserver appends to its refusal as `RBAC: ...`.
pub fn authorize(
    policies: &dyn Policies,
    user: &UserInfo,
    req: &RequestInfo,
) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let mut bindings: Vec<(Value, String)> = policies
        .cluster_role_bindings()
        .into_iter()
        .map(|b| (b, String::new()))
        .collect();
    if !req.namespace.is_empty() {
        bindings.extend(
            policies
                .role_bindings(&req.namespace)
                .into_iter()
                .map(|b| (b, req.namespace.clone())),
        );
    }
    for (binding, ns) in &bindings {
        let applies = strings_of_subjects(binding).any(|s| subject_is(user, s, ns));
        if !applies {
            continue;
        }
        match referenced_rules(policies, binding, ns) {
            Ok(rules) if rules.iter().any(|r| rule_allows(req, r)) => return Ok(()),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    Err(errors)
}

fn strings_of_subjects(binding: &Value) -> impl Iterator<Item = &Value> {
    binding["subjects"].as_array().into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn path(verb: &str, p: &str) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            path: p.into(),
            ..Default::default()
        }
    }

    #[test]
    fn verbs_groups_and_resources_must_all_match() {
        let rule = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
        assert!(rule_allows(&req("get", "", "pods", "", "a", "x"), &rule));
        assert!(rule_allows(&req("list", "", "pods", "", "a", ""), &rule));
        assert!(!rule_allows(&req("watch", "", "pods", "", "a", ""), &rule));
        assert!(!rule_allows(
            &req("get", "apps", "pods", "", "a", "x"),
            &rule
        ));
        assert!(!rule_allows(&req("get", "", "nodes", "", "", "x"), &rule));
        let any = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(
            &req("deletecollection", "joiner.dev", "nodeclaims", "", "", ""),
            &any
        ));
        assert!(rule_allows(
            &req("create", "", "pods", "eviction", "a", "x"),
            &any
        ));
    }

    #[test]
    fn a_subresource_is_its_own_resource() {
        let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]});
        assert!(!rule_allows(
            &req("create", "", "pods", "eviction", "a", "x"),
            &pods
        ));
        let eviction =
            json!({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]});
        assert!(rule_allows(
            &req("create", "", "pods", "eviction", "a", "x"),
            &eviction
        ));
        assert!(!rule_allows(
            &req("create", "", "pods", "", "a", ""),
            &eviction
        ));
        let scale = json!({"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["patch"]});
        assert!(rule_allows(
            &req("patch", "apps", "deployments", "scale", "a", "d"),
            &scale
        ));
        assert!(!rule_allows(
            &req("patch", "apps", "deployments", "status", "a", "d"),
            &scale
        ));
        assert!(!rule_allows(
            &req("patch", "apps", "deployments", "", "a", "d"),
            &scale
        ));
    }

    #[test]
    fn resource_names_only_allow_requests_naming_them() {
        let rule = json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["leader"], "verbs": ["get", "list", "create"]});
        assert!(rule_allows(
            &req("get", "coordination.k8s.io", "leases", "", "k", "leader"),
            &rule
        ));
        assert!(!rule_allows(
            &req("get", "coordination.k8s.io", "leases", "", "k", "other"),
            &rule
        ));
        assert!(!rule_allows(
            &req("list", "coordination.k8s.io", "leases", "", "k", ""),
            &rule
        ));
        assert!(!rule_allows(
            &req("create", "coordination.k8s.io", "leases", "", "k", ""),
            &rule
        ));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_star_prefix() {
        let rule = json!({"nonResourceURLs": ["/api", "/apis/*", "/version"], "verbs": ["get"]});
        assert!(rule_allows(&path("get", "/api"), &rule));
        assert!(!rule_allows(&path("get", "/api/v1"), &rule));
        assert!(rule_allows(&path("get", "/apis/apps/v1"), &rule));
        assert!(!rule_allows(&path("post", "/version"), &rule));
        // A resource rule says nothing about paths, and the reverse.
        let res = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(!rule_allows(&path("get", "/version"), &res));
        assert!(!rule_allows(&req("get", "", "pods", "", "a", "x"), &rule));
    }

    struct Fixed(Vec<Value>);

    impl Fixed {
        fn of(&self, kind: &str) -> impl Iterator<Item = &Value> {
            let kind = kind.to_string();
            self.0.iter().filter(move |o| o["kind"] == kind.as_str())
        }
    }

    impl Policies for Fixed {
        fn cluster_role_bindings(&self) -> Vec<Value> {
            self.of("ClusterRoleBinding").cloned().collect()
        }
        fn role_bindings(&self, ns: &str) -> Vec<Value> {
            self.of("RoleBinding")
                .filter(|b| b["metadata"]["namespace"] == ns)
                .cloned()
                .collect()
        }
        fn cluster_role(&self, name: &str) -> Option<Value> {
            self.of("ClusterRole")
                .find(|r| r["metadata"]["name"] == name)
                .cloned()
        }
        fn role(&self, ns: &str, name: &str) -> Option<Value> {
            self.of("Role")
                .find(|r| r["metadata"]["name"] == name && r["metadata"]["namespace"] == ns)
                .cloned()
        }
    }

    fn sa(ns: &str, name: &str) -> UserInfo {
        UserInfo::service_account(ns, name)
    }

    fn policies() -> Fixed {
        let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
        Fixed(vec![
            json!({"kind": "ClusterRole", "metadata": {"name": "read-pods"}, "rules": pods}),
            json!({"kind": "Role", "metadata": {"name": "leases", "namespace": "k"},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}]}),
            // A ClusterRole through a RoleBinding: its rules, in that namespace only.
            json!({"kind": "RoleBinding", "metadata": {"name": "b1", "namespace": "a"},
                "roleRef": {"kind": "ClusterRole", "name": "read-pods"},
                "subjects": [{"kind": "ServiceAccount", "name": "agent"}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "b2", "namespace": "k"},
                "roleRef": {"kind": "Role", "name": "leases"},
                "subjects": [{"kind": "Group", "name": "system:serviceaccounts:a"}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b3"},
                "roleRef": {"kind": "ClusterRole", "name": "read-pods"},
                "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "nobody"}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "dangling"},
                "roleRef": {"kind": "ClusterRole", "name": "gone"},
                "subjects": [{"kind": "User", "name": "bob"}]}),
        ])
    }

    #[test]
    fn role_bindings_grant_in_their_namespace_only() {
        let p = policies();
        let agent = sa("a", "agent");
        assert!(authorize(&p, &agent, &req("get", "", "pods", "", "a", "x")).is_ok());
        assert!(authorize(&p, &agent, &req("get", "", "pods", "", "b", "x")).is_err());
        assert!(authorize(&p, &agent, &req("get", "", "pods", "", "", "x")).is_err());
        // The binding's SA subject without a namespace is the binding's namespace's SA.
        assert!(authorize(&p, &sa("b", "agent"), &req("get", "", "pods", "", "a", "x")).is_err());
        // Through the group every SA of the namespace has.
        let lease = req("get", "coordination.k8s.io", "leases", "", "k", "l");
        assert!(authorize(&p, &agent, &lease).is_ok());
        assert!(authorize(&p, &sa("c", "agent"), &lease).is_err());
    }

    #[test]
    fn cluster_role_bindings_grant_everywhere_to_their_subjects() {
        let p = policies();
        let alice = UserInfo::new("alice", &["system:authenticated"]);
        assert!(authorize(&p, &alice, &req("get", "", "pods", "", "z", "x")).is_ok());
        assert!(authorize(&p, &alice, &req("get", "", "pods", "", "", "x")).is_ok());
        assert!(authorize(&p, &alice, &req("delete", "", "pods", "", "z", "x")).is_err());
        // A namespaceless SA subject in a ClusterRoleBinding names no one.
        let nobody = sa("default", "nobody");
        assert!(authorize(&p, &nobody, &req("get", "", "pods", "", "z", "x")).is_err());
    }

    #[test]
    fn a_binding_to_a_missing_role_is_a_reason() {
        let bob = UserInfo::new("bob", &[]);
        let e = authorize(&policies(), &bob, &req("get", "", "pods", "", "a", "x")).unwrap_err();
        assert_eq!(
            e,
            vec!["clusterrole.rbac.authorization.k8s.io \"gone\" not found".to_string()]
        );
        // Nothing bound at all: refused, with no reason.
        let eve = UserInfo::new("eve", &[]);
        assert_eq!(
            authorize(&policies(), &eve, &req("get", "", "pods", "", "a", "x")),
            Err(vec![])
        );
    }
}
