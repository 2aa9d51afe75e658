//! The HTTP front: authentication, discovery, and the REST verbs on every served type.
//!
//! Routing is by hand rather than with a router table because the set of types changes at
//! run time when CRDs are registered, and because `/api/v1/namespaces/x/pods` and
//! `/api/v1/namespaces/x/status` can only be told apart by knowing which plurals exist.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Response, StatusCode, Uri};
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::patch::{apply_patch, parse_body, server_side_apply, PatchKind};
use crate::resources::ResourceType;
use crate::selectors::{parse_field_selector, parse_label_selector, Filter};
use crate::status::{success_status, ApiError, ApiResult};
use crate::store::{name_of, namespace_of, DeleteOptions, EventKind, Store, Write};
use crate::{eviction, table};

/// What every request handler shares.
pub struct AppState {
    pub store: Arc<Store>,
    pub token: String,
    /// A token that may only read: writes with it get 403 Forbidden.
    pub viewer_token: String,
    pub bookmark_interval: Duration,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    pub server_address: String,
    /// Container logs and the tokens issued to process-backed pods.
    pub runner: Arc<crate::runner::Shared>,
    /// Where EKS tokens (`k8s-aws-v1.`) are reviewed; without it they get 401.
    pub eks_webhook: Option<Arc<crate::eks_auth::TokenWebhook>>,
    /// The tokens TokenRequests issued.
    pub issued: crate::authn::IssuedTokens,
    /// The requests RBAC refused.
    pub refusals: Arc<crate::authz::Refusals>,
    /// What `/version` reports.
    pub version: Arc<crate::cluster_version::ClusterVersion>,
}

type Resp = Response<Body>;

fn json_response(code: u16, v: &Value) -> Resp {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("valid response")
}

fn error_response(e: &ApiError) -> Resp {
    json_response(e.code, &e.to_status())
}

/// Decoded query parameters (percent-decoding and `+` for space).
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        let decode = |s: &str| -> String {
            let bytes = s.as_bytes();
            let mut out = Vec::with_capacity(bytes.len());
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'+' => out.push(b' '),
                    b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    },
                    b => out.push(b),
                }
                i += 1;
            }
            String::from_utf8_lossy(&out).into_owned()
        };
        Query(
            q.unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (decode(k), decode(v)),
                    None => (decode(p), String::new()),
                })
                .collect(),
        )
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true") | Some("1"))
    }

    fn filter(&self) -> ApiResult<Filter> {
        Ok(Filter {
            labels: match self.get("labelSelector") {
                Some(s) => parse_label_selector(s)?,
                None => vec![],
            },
            fields: match self.get("fieldSelector") {
                Some(s) => parse_field_selector(s)?,
                None => vec![],
            },
        })
    }
}

/// A request aimed at a resource: which type, namespace, name and subresource.
struct Target {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch_path: bool,
}

fn not_found_path() -> ApiError {
    let mut e = ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    e.details = Some(json!({}));
    e
}

fn route(store: &Store, group: &str, version: &str, rest: &[&str]) -> ApiResult<Target> {
    let (watch_path, rest) = match rest.first() {
        Some(&"watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let find = |plural: &str| store.find_type(group, version, plural);
    if rest.len() >= 3 && rest[0] == "namespaces" {
        if let Some(rt) = find(rest[2]).filter(|t| t.namespaced) {
            if rest.len() > 5 {
                return Err(not_found_path());
            }
            return Ok(Target {
                rt,
                ns: Some(rest[1].to_string()),
                name: rest.get(3).map(|s| s.to_string()),
                sub: rest.get(4).map(|s| s.to_string()),
                watch_path,
            });
        }
    }
    let plural = rest.first().ok_or_else(not_found_path)?;
    let rt = find(plural).ok_or_else(not_found_path)?;
    if rest.len() > 3 {
        return Err(not_found_path());
    }
    Ok(Target {
        rt,
        ns: None,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
        watch_path,
    })
}

/// The single entry point for every request.
pub async fn handle(
    st: Arc<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Resp {
    let path = uri.path().trim_end_matches('/').to_string();
    if matches!(path.as_str(), "/healthz" | "/readyz" | "/livez") {
        return Response::builder()
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from("ok"))
            .expect("response");
    }
    let user = match crate::authn::authenticate(&st, &headers).await {
        Ok(u) => u,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(uri.query());
    let info = crate::authz::request::RequestInfo::parse(
        method.as_str(),
        &path,
        query.flag("watch"),
        query.get("fieldSelector"),
    );
    if let Err(e) = crate::authz::authorize(&st.store, &st.refusals, &user, &info) {
        return error_response(&e);
    }
    let result = dispatch(&st, &method, &path, &query, &headers, body).await;
    match result {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%method, %uri, code = e.code, reason = e.reason, "request failed: {}", e.message);
            error_response(&e)
        }
    }
}

async fn dispatch(
    st: &Arc<AppState>,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Resp> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => return Ok(json_response(200, &st.version.info())),
        ["api"] => {
            return Ok(json_response(
                200,
                &json!({
                    "kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.server_address}],
                }),
            ))
        }
        ["apis"] => return Ok(json_response(200, &api_group_list(&st.store))),
        // An empty OpenAPI v2 document (an empty protobuf message): kubectl falls back to
        // it for kinds missing from v3 (a CRD applied in the same file), and skips
        // client-side validation for kinds it does not describe.
        ["openapi", "v2"] => {
            return Ok(Response::builder()
                .status(200)
                .header(
                    header::CONTENT_TYPE,
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                )
                .body(Body::empty())
                .expect("response"))
        }
        ["openapi", "v3"] => return Ok(json_response(200, &openapi_index(&st.store))),
        ["openapi", "v3", rest @ ..] => {
            let gv = rest.join("/");
            return openapi_gv(&st.store, &gv)
                .map(|d| json_response(200, &d))
                .ok_or_else(not_found_path);
        }
        ["api", "v1"] => return Ok(json_response(200, &resource_list(&st.store, "", "v1"))),
        ["apis", g] => {
            return api_group_list(&st.store)["groups"]
                .as_array()
                .and_then(|gs| gs.iter().find(|x| x["name"] == *g).cloned())
                .map(|mut x| {
                    x["kind"] = json!("APIGroup");
                    x["apiVersion"] = json!("v1");
                    json_response(200, &x)
                })
                .ok_or_else(not_found_path)
        }
        ["apis", g, v] => {
            if !st
                .store
                .types()
                .iter()
                .any(|t| t.group == *g && t.version == *v)
            {
                return Err(not_found_path());
            }
            return Ok(json_response(200, &resource_list(&st.store, g, v)));
        }
        _ => {}
    }
    let target = match segs.as_slice() {
        ["api", "v1", rest @ ..] => route(&st.store, "", "v1", rest)?,
        ["apis", g, v, rest @ ..] => route(&st.store, g, v, rest)?,
        _ => return Err(not_found_path()),
    };
    let rt = target.rt.clone();
    let ns = target.ns.as_deref();
    if rt.namespaced && ns.is_none() && target.name.is_some() {
        return Err(not_found_path());
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let as_table = accept.contains("as=Table");
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if let Some(sub) = &target.sub {
        if !rt.has_sub(sub) {
            return Err(not_found_path());
        }
    }
    let name = target.name.as_deref();
    let sub = target.sub.as_deref();
    match (method.clone(), name, sub) {
        (Method::GET, None, _) => {
            if target.watch_path || query.flag("watch") {
                watch(st, &rt, ns, query, as_table)
            } else {
                list(&st.store, &rt, ns, query, as_table, accept)
            }
        }
        (Method::GET, Some(name), None | Some("status")) => {
            let obj = st.store.get(&rt, ns, name)?;
            if as_table {
                let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                return Ok(json_response(
                    200,
                    &table::render(
                        &rt,
                        &[&obj],
                        meta,
                        query.get("includeObject").unwrap_or("Metadata"),
                    ),
                ));
            }
            Ok(json_response(200, &obj))
        }
        (Method::GET, Some(name), Some("log")) => crate::runner::logs::respond(
            &st.runner.logs,
            &st.store,
            ns.unwrap_or("default"),
            name,
            &query.0,
        ),
        (Method::GET, Some(name), Some("scale")) => {
            let obj = st.store.get(&rt, ns, name)?;
            Ok(json_response(200, &scale_of(&obj)))
        }
        (Method::POST, None, None) => {
            let obj = decode_body(&body, content_type)?;
            let ns = ns.map(str::to_string).or_else(|| {
                rt.namespaced
                    .then(|| namespace_of(&obj).to_string())
                    .filter(|n| !n.is_empty())
            });
            let created = st.store.create(&rt, ns.as_deref(), obj)?;
            Ok(json_response(201, &created))
        }
        (Method::POST, Some(name), Some("eviction")) => {
            let body = decode_body(&body, content_type)?;
            eviction::evict(&st.store, ns.unwrap_or("default"), name, &body)?;
            Ok(json_response(201, &success_status(201, None)))
        }
        (Method::POST, Some(name), Some("token")) => {
            let body = decode_body(&body, content_type)?;
            let issued = crate::authn::token_request(st, ns.unwrap_or("default"), name, &body)?;
            Ok(json_response(201, &issued))
        }
        (Method::POST, Some(name), Some("binding")) => {
            let body = decode_body(&body, content_type)?;
            let node = body["target"]["name"].as_str().unwrap_or("").to_string();
            if node.is_empty() {
                return Err(ApiError::invalid(
                    "Binding",
                    "",
                    name,
                    vec![("target.name".into(), "Required value".into())],
                ));
            }
            st.store.modify(&rt, ns, name, Write::Internal, |cur| {
                if cur["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
                {
                    return Err(ApiError::conflict(&rt.group, &rt.plural, name));
                }
                let mut p = cur.clone();
                p["spec"]["nodeName"] = json!(node);
                crate::controllers::set_condition(&mut p, "PodScheduled", "True", "", "");
                Ok(p)
            })?;
            Ok(json_response(201, &success_status(201, None)))
        }
        (Method::PUT, Some(name), None | Some("status")) => {
            let obj = decode_body(&body, content_type)?;
            let mode = if sub == Some("status") {
                Write::Status
            } else {
                Write::Main
            };
            let updated = st.store.update(&rt, ns, name, obj, mode)?;
            Ok(json_response(200, &updated))
        }
        (Method::PUT, Some(name), Some("scale")) => {
            let scale = decode_body(&body, content_type)?;
            let updated = set_replicas(&st.store, &rt, ns, name, |cur| {
                if let Some(rv) = scale["metadata"]["resourceVersion"].as_str() {
                    if !rv.is_empty()
                        && rv != cur["metadata"]["resourceVersion"].as_str().unwrap_or("")
                    {
                        return Err(ApiError::conflict(&rt.group, &rt.plural, name));
                    }
                }
                Ok(scale.clone())
            })?;
            Ok(json_response(200, &scale_of(&updated)))
        }
        (Method::PATCH, Some(name), sub) => {
            let kind = PatchKind::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type})"))
            })?;
            let patch = parse_body(kind, &body)?;
            let kind = if kind == PatchKind::Strategic && !rt.builtin {
                // Like the real server: custom resources have no strategic merge schema.
                return Err(ApiError::unsupported_media(format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (strategic merge patch is not supported for {})", rt.kind
                )));
            } else {
                kind
            };
            if sub == Some("scale") {
                let updated = set_replicas(&st.store, &rt, ns, name, |cur| {
                    apply_patch(kind, &scale_of(cur), &patch)
                })?;
                return Ok(json_response(200, &scale_of(&updated)));
            }
            let mode = if sub == Some("status") {
                Write::Status
            } else {
                Write::Main
            };
            if kind == PatchKind::Apply {
                let manager = query.get("fieldManager").unwrap_or("").to_string();
                if manager.is_empty() {
                    return Err(ApiError::bad_request(
                        "PATCH requests with apply content type must specify fieldManager",
                    ));
                }
                let pname = patch["metadata"]["name"].as_str().unwrap_or(name);
                if pname != name {
                    return Err(ApiError::bad_request(format!("the name of the object ({pname}) does not match the name on the URL ({name})")));
                }
                let api_version = rt.api_version();
                let (obj, created) = st.store.upsert(&rt, ns, name, mode, |cur| {
                    let mut p = patch.clone();
                    if p["metadata"]["name"].is_null() {
                        p["metadata"]["name"] = json!(name);
                    }
                    server_side_apply(cur, &p, &manager, &api_version)
                })?;
                return Ok(json_response(if created { 201 } else { 200 }, &obj));
            }
            // A resourceVersion in a merge or strategic patch is a precondition, as on the
            // real server: clients use it to patch read-modify-write lists (taints) safely.
            let precondition = match kind {
                PatchKind::Merge | PatchKind::Strategic => patch["metadata"]["resourceVersion"]
                    .as_str()
                    .filter(|rv| !rv.is_empty())
                    .map(str::to_string),
                _ => None,
            };
            let obj = st.store.modify(&rt, ns, name, mode, |cur| {
                if let Some(rv) = &precondition {
                    if cur["metadata"]["resourceVersion"].as_str() != Some(rv.as_str()) {
                        return Err(ApiError::conflict(&rt.group, &rt.plural, name));
                    }
                }
                apply_patch(kind, cur, &patch)
            })?;
            Ok(json_response(200, &obj))
        }
        (Method::DELETE, Some(name), None) => {
            let opts = delete_options(&body, query);
            let (obj, gone) = st.store.delete(&rt, ns, name, &opts)?;
            if gone {
                let details = json!({"name": name, "group": rt.group, "kind": rt.plural, "uid": obj["metadata"]["uid"]});
                Ok(json_response(200, &success_status(200, Some(details))))
            } else {
                Ok(json_response(200, &obj))
            }
        }
        (Method::DELETE, None, None) => {
            let filter = query.filter()?;
            let (items, _) = st.store.list(&rt, ns);
            let opts = DeleteOptions::default();
            let mut deleted = Vec::new();
            for o in items.iter().filter(|o| filter.matches(o)) {
                let ns = rt.namespaced.then(|| namespace_of(o));
                if let Ok((obj, _)) = st.store.delete(&rt, ns, name_of(o), &opts) {
                    deleted.push((*obj).clone());
                }
            }
            Ok(json_response(
                200,
                &json!({
                    "kind": rt.list_kind(), "apiVersion": rt.api_version(),
                    "metadata": {"resourceVersion": st.store.current_rv().to_string()}, "items": deleted,
                }),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method} {path})"
        ))),
    }
}

fn decode_body(body: &[u8], content_type: &str) -> ApiResult<Value> {
    if content_type.contains("yaml") {
        return serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")));
    }
    if content_type.contains("protobuf") {
        return crate::proto::decode(body).map_err(ApiError::unsupported_media);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
}

fn delete_options(body: &[u8], query: &Query) -> DeleteOptions {
    let v: Value = serde_json::from_slice(body)
        .ok()
        .or_else(|| crate::proto::decode(body).ok())
        .unwrap_or(Value::Null);
    DeleteOptions {
        uid: v["preconditions"]["uid"].as_str().map(str::to_string),
        resource_version: v["preconditions"]["resourceVersion"]
            .as_str()
            .or(query.get("resourceVersion"))
            .map(str::to_string),
    }
}

/// The OpenAPI v3 index: one document per group-version. kubectl reads it to learn that
/// the server validates fields itself (`fieldValidation`), so it skips client-side schema
/// validation, which kube-sim cannot offer (it has no schemas).
fn openapi_index(store: &Store) -> Value {
    let mut paths = serde_json::Map::new();
    for t in store.types() {
        let gv = if t.group.is_empty() {
            format!("api/{}", t.version)
        } else {
            format!("apis/{}/{}", t.group, t.version)
        };
        let url = format!("/openapi/v3/{gv}?hash={}", store.current_rv());
        paths.insert(gv, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

fn openapi_gv(store: &Store, gv: &str) -> Option<Value> {
    let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let types: Vec<_> = store
        .types()
        .into_iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = serde_json::Map::new();
    for t in types {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{prefix}/{}/{{name}}", t.plural)
        };
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        let op = json!({"operationId": format!("patch{}", t.kind), "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"200": {"description": "OK"}}});
        let mut put = op.clone();
        put["x-kubernetes-action"] = json!("put");
        put["operationId"] = json!(format!("replace{}", t.kind));
        paths.insert(path, json!({"patch": op, "put": put}));
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0-kube-sim"}, "paths": paths, "components": {"schemas": {}}}),
    )
}

fn api_group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for t in store.types() {
        if t.group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, vs)) => {
                if !vs.contains(&t.version) {
                    vs.push(t.version.clone())
                }
            }
            None => groups.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(store: &Store, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = store
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .flat_map(|t| t.discovery_entries())
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// The autoscaling/v1 Scale view of a Deployment.
fn scale_of(obj: &Value) -> Value {
    let selector = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(0)},
        "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}

fn set_replicas(
    store: &Store,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    new_scale: impl FnOnce(&Value) -> ApiResult<Value>,
) -> ApiResult<Arc<Value>> {
    store.modify(rt, ns, name, Write::Internal, |cur| {
        let scale = new_scale(cur)?;
        let replicas = scale["spec"]["replicas"].as_i64().ok_or_else(|| {
            ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                vec![("spec.replicas".into(), "Required value".into())],
            )
        })?;
        if replicas < 0 {
            return Err(ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                vec![(
                    "spec.replicas".into(),
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                )],
            ));
        }
        let mut o = cur.clone();
        o["spec"]["replicas"] = json!(replicas);
        Ok(o)
    })
}

/// Continue tokens carry the resourceVersion of the first page and the last key served.
fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"rv": rv, "ns": ns, "name": name}).to_string())
}

fn decode_continue(tok: &str) -> ApiResult<(u64, String, String)> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: illegal base64 data");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().unwrap_or(0),
        v["ns"].as_str().unwrap_or("").to_string(),
        v["name"].as_str().unwrap_or("").to_string(),
    ))
}

fn list(
    store: &Store,
    rt: &ResourceType,
    ns: Option<&str>,
    query: &Query,
    as_table: bool,
    _accept: &str,
) -> ApiResult<Resp> {
    let filter = query.filter()?;
    let (items, rv) = store.list(rt, ns);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let (list_rv, start) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(tok) => {
            let (rv0, ns0, name0) = decode_continue(tok)?;
            (rv0, Some((ns0, name0)))
        }
        None => (rv, None),
    };
    let mut selected: Vec<&Value> = Vec::new();
    let mut remaining = 0usize;
    for o in items.iter() {
        if let Some((sns, sname)) = &start {
            if (namespace_of(o), name_of(o)) <= (sns.as_str(), sname.as_str()) {
                continue;
            }
        }
        if !filter.matches(o) {
            continue;
        }
        if selected.len() < limit {
            selected.push(o);
        } else {
            remaining += 1;
        }
    }
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if remaining > 0 {
        if let Some(last) = selected.last() {
            meta["continue"] = json!(encode_continue(list_rv, namespace_of(last), name_of(last)));
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    if as_table {
        return Ok(json_response(
            200,
            &table::render(
                rt,
                &selected,
                meta,
                query.get("includeObject").unwrap_or("Metadata"),
            ),
        ));
    }
    // Written by hand so that a large list is serialised once, without cloning the items.
    let mut out = Vec::with_capacity(256 + selected.len() * 1024);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            rt.list_kind(),
            rt.api_version(),
            meta
        )
        .as_bytes(),
    );
    for (i, o) in selected.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, o)
            .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))?;
    }
    out.extend_from_slice(b"]}");
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(out))
        .expect("response"))
}

/// Streams watch events as newline-delimited JSON until the timeout, the client leaves,
/// or the server shuts down. A watcher that falls too far behind is ended; its client
/// resumes from the last resourceVersion it saw, as it would after any dropped stream.
fn watch(
    st: &Arc<AppState>,
    rt: &Arc<ResourceType>,
    ns: Option<&str>,
    query: &Query,
    as_table: bool,
) -> ApiResult<Resp> {
    let filter = query.filter()?;
    let since = match query.get("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: \"{v}\": must be a non-negative integer"
            ))
        })?),
    };
    let send_initial = query.flag("sendInitialEvents");
    let since = if send_initial { None } else { since };
    let bookmarks = query.flag("allowWatchBookmarks");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (replay, mut rx, start_rv) = match st.store.watch_from(rt, since) {
        Ok(x) => x,
        // Like the real server: a watch from a compacted version starts (200) and carries a
        // single ERROR event with the 410 Status, which is what makes informers re-list.
        Err(e) if e.code == 410 => {
            let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()}))
                .unwrap_or_default();
            line.push(b'\n');
            return Ok(Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(line))
                .expect("response"));
        }
        Err(e) => return Err(e),
    };
    let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let rt = rt.clone();
    let ns = ns.map(str::to_string);
    let key = rt.key();
    let include = query.get("includeObject").unwrap_or("Metadata").to_string();
    let mut shutdown = st.shutdown.clone();
    let bookmark_every = st.bookmark_interval;
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last_rv = start_rv.max(since.unwrap_or(0));
        // Serialised straight from the shared object, without cloning it per watcher.
        let render = |kind: &str, obj: &Value| -> Bytes {
            let mut line = Vec::with_capacity(1024);
            line.extend_from_slice(b"{\"type\":\"");
            line.extend_from_slice(kind.as_bytes());
            line.extend_from_slice(b"\",\"object\":");
            if as_table && kind != "BOOKMARK" {
                let t = table::render(
                    &rt,
                    &[obj],
                    json!({"resourceVersion": obj["metadata"]["resourceVersion"]}),
                    &include,
                );
                let _ = serde_json::to_writer(&mut line, &t);
            } else {
                let _ = serde_json::to_writer(&mut line, obj);
            }
            line.extend_from_slice(b"}\n");
            Bytes::from(line)
        };
        let bookmark = |rv: u64, initial_end: bool| -> Bytes {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            render(
                "BOOKMARK",
                &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta}),
            )
        };
        let in_scope =
            |o: &Value| ns.as_deref().is_none_or(|n| namespace_of(o) == n) && filter.matches(o);
        for ev in &replay {
            if in_scope(&ev.object) {
                last_rv = last_rv.max(ev.rv);
                if tx
                    .send(Ok(render(ev.kind.as_str(), &ev.object)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
        last_rv = last_rv.max(replay.iter().map(|e| e.rv).max().unwrap_or(0));
        if send_initial && tx.send(Ok(bookmark(last_rv, true))).await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval(bookmark_every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = shutdown.changed() => return,
                _ = tick.tick(), if bookmarks => {
                    if tx.send(Ok(bookmark(last_rv, false))).await.is_err() { return; }
                }
                ev = rx.recv() => {
                    let ev = match ev {
                        Ok(ev) => ev,
                        Err(RecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "watcher fell behind; ending its stream");
                            return;
                        }
                        Err(RecvError::Closed) => return,
                    };
                    if ev.key != key || ev.rv <= last_rv {
                        continue;
                    }
                    last_rv = ev.rv;
                    let now_in = in_scope(&ev.object);
                    let was_in = ev.previous.as_deref().map(&in_scope);
                    let kind = match (ev.kind, now_in, was_in) {
                        (EventKind::Modified, true, Some(false)) => EventKind::Added,
                        (EventKind::Modified, false, Some(true)) => EventKind::Deleted,
                        (EventKind::Deleted, _, Some(true)) => EventKind::Deleted,
                        (k, true, _) => k,
                        _ => continue,
                    };
                    if tx.send(Ok(render(kind.as_str(), &ev.object))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(body_rx);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .expect("response"))
}
