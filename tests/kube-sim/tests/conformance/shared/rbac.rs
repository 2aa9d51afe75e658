//! RBAC on every target: a ServiceAccount's TokenRequest token may do what its Role grants
//! in that namespace and nothing else, with kube-apiserver's 403 wording; resourceNames
//! allow only requests naming the object; unbinding takes effect; discovery stays open to
//! every authenticated user.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use kube_sim::{Options, TargetCluster};
use serde_json::{json, Value};

use common::wait_for_async;

async fn create(client: &Client, ns: &str, api_version: &str, kind: &str, body: Value) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let mut obj = body;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("create {kind}: {e}"));
}

/// A TokenRequest token of `ns/name`, in a client that holds nothing else.
async fn service_account_client(t: &TargetCluster, admin: &Client, ns: &str, name: &str) -> Client {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ServiceAccount"),
        "serviceaccounts",
    );
    let sas: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
    let answer: Value = sas
        .create_subresource(
            "token",
            name,
            &PostParams::default(),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await
        .expect("TokenRequest");
    assert_eq!(answer["kind"], "TokenRequest");
    let token = answer["status"]["token"].as_str().expect("status.token");
    let (url, ca) = t.server().expect("a target this process started");
    let yaml = kube_sim::runner::identity::pod_kubeconfig(&url, &ca, token, ns);
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn refusal(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_may_do_what_its_role_grants_and_nothing_else() {
    for t in TargetCluster::all(Options::default()).expect("start kube-sim") {
        if t.server().is_none() {
            continue;
        }
        let admin = t.client().await.unwrap();
        let ns = format!("rbac-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
        create(
            &admin,
            &ns,
            "v1",
            "ServiceAccount",
            json!({"metadata": {"name": "reader"}}),
        )
        .await;
        create(&admin, &ns, "rbac.authorization.k8s.io/v1", "Role", json!({
            "metadata": {"name": "reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["one"], "verbs": ["get"]},
            ],
        })).await;
        create(&admin, &ns, "rbac.authorization.k8s.io/v1", "RoleBinding", json!({
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        })).await;
        let sa = service_account_client(&t, &admin, &ns, "reader").await;
        let user = format!("system:serviceaccount:{ns}:reader");
        let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), &ns);

        // A real API server's RBAC caches catch up with new bindings within moments.
        wait_for_async("the binding in force", Duration::from_secs(30), || async {
            cms.list(&ListParams::default()).await.ok().map(|_| ())
        })
        .await;
        let e = refusal(
            cms.create(&PostParams::default(), &cm("x"))
                .await
                .unwrap_err(),
        );
        assert_eq!(
            e,
            (403, "Forbidden".into(), format!("configmaps is forbidden: User \"{user}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"{ns}\"")),
            "[{}]", t.name()
        );
        let elsewhere: Api<ConfigMap> = Api::namespaced(sa.clone(), "default");
        assert_eq!(
            refusal(elsewhere.list(&ListParams::default()).await.unwrap_err()).0,
            403,
            "[{}] a Role grants in its namespace only",
            t.name()
        );

        // resourceNames: the named secret may be read (it does not exist: 404), no other,
        // and no list (a list names nothing).
        let secrets: Api<Secret> = Api::namespaced(sa.clone(), &ns);
        assert_eq!(
            refusal(secrets.get("one").await.unwrap_err()).0,
            404,
            "[{}]",
            t.name()
        );
        let e = refusal(secrets.get("two").await.unwrap_err());
        assert_eq!(
            e.2,
            format!("secrets \"two\" is forbidden: User \"{user}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"{ns}\""),
            "[{}]", t.name()
        );
        assert_eq!(
            refusal(secrets.list(&ListParams::default()).await.unwrap_err()).0,
            403
        );

        let nodes: Api<Node> = Api::all(sa.clone());
        let e = refusal(nodes.list(&ListParams::default()).await.unwrap_err());
        assert_eq!(
            e.2,
            format!("nodes is forbidden: User \"{user}\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"),
            "[{}]", t.name()
        );
        let e = refusal(
            Api::<DynamicObject>::all_with(
                sa.clone(),
                &ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("joiner.example", "v1", "Widget"),
                    "widgets",
                ),
            )
            .list(&ListParams::default())
            .await
            .unwrap_err(),
        );
        assert_eq!(
            e.0,
            403,
            "[{}] refused before routing: no rights, no 404",
            t.name()
        );
        sa.list_api_groups()
            .await
            .expect("discovery is open to every authenticated user");

        // Unbound: refused again.
        let rbs = Api::<DynamicObject>::namespaced_with(
            admin.clone(),
            &ns,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
                "rolebindings",
            ),
        );
        rbs.delete("reader", &DeleteParams::default())
            .await
            .unwrap();
        wait_for_async(
            "the unbinding in force",
            Duration::from_secs(30),
            || async {
                cms.list(&ListParams::default())
                    .await
                    .err()
                    .map(|e| assert_eq!(refusal(e).0, 403))
            },
        )
        .await;
        let _ = nss.delete(&ns, &DeleteParams::default()).await;
    }
}
