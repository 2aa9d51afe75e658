//! Authentication: who a request is (a user name and groups), from its bearer token, as
//! kube-apiserver's authenticators decide it. Four kinds of tokens are recognised:
//!
//! - kube-sim's admin token (the cluster creator's credential): `kube-sim-admin`, in
//!   `system:masters`;
//! - its viewer token: `kube-sim-viewer`, which the bootstrap RBAC lets read only;
//! - service-account tokens: those the runner mounts into pods, and those a TokenRequest
//!   (`POST .../serviceaccounts/<name>/token`) issues, each for
//!   `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
//!   `system:serviceaccounts:<ns>` (k8s.io/apiserver pkg/authentication/serviceaccount
//!   `UserInfo`);
//! - EKS tokens (`k8s-aws-v1.`), whose user and groups the TokenReview webhook gives
//!   (see [`crate::eks_auth`]).
//!
//! Every authenticated user is also in `system:authenticated`, as kube-apiserver's
//! `AuthenticatedGroupAdder` makes it. Anything else is 401.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use serde_json::{json, Value};

use crate::api::AppState;
use crate::authz::bootstrap::VIEWER;
use crate::status::{ApiError, ApiResult};
use crate::store::Store;

pub const AUTHENTICATED: &str = "system:authenticated";
pub const ADMIN: &str = "kube-sim-admin";
const SA_PREFIX: &str = "system:serviceaccount:";

/// A TokenRequest's lifetime when it asks for none, and the shortest it may ask for
/// (k8s.io/kubernetes pkg/apis/authentication/validation: 10 minutes).
const DEFAULT_EXPIRATION: u64 = 3600;
const MIN_EXPIRATION: u64 = 600;

/// Who a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    pub fn new(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// The cluster creator's credential.
    pub fn admin() -> UserInfo {
        UserInfo::new(ADMIN, &[crate::authz::MASTERS, AUTHENTICATED])
    }

    pub fn service_account(namespace: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("{SA_PREFIX}{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
        }
    }

    /// A `system:serviceaccount:<ns>:<name>` user name as that service account.
    pub fn from_service_account_name(user: &str) -> Option<UserInfo> {
        let (ns, name) = user.strip_prefix(SA_PREFIX)?.split_once(':')?;
        (!ns.is_empty() && !name.is_empty()).then(|| UserInfo::service_account(ns, name))
    }

    /// With `system:authenticated` added unless present.
    fn authenticated(mut self) -> UserInfo {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

/// The tokens TokenRequests issued, until they expire. Like a bound token, one stops
/// working when its service account is deleted.
#[derive(Default)]
pub struct IssuedTokens {
    tokens: Mutex<HashMap<String, (String, String, Instant)>>,
}

impl IssuedTokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String, Instant)>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn user(&self, store: &Store, token: &str) -> Option<UserInfo> {
        let (ns, name, expires) = self.lock().get(token).cloned()?;
        if Instant::now() >= expires {
            self.lock().remove(token);
            return None;
        }
        let rt = store.find_type("", "v1", "serviceaccounts")?;
        store.get(&rt, Some(&ns), &name).ok()?;
        Some(UserInfo::service_account(&ns, &name))
    }
}

/// The user of a request, or 401.
pub async fn authenticate(st: &AppState, headers: &HeaderMap) -> ApiResult<UserInfo> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)?;
    if token == st.token {
        return Ok(UserInfo::admin());
    }
    if token == st.viewer_token {
        return Ok(UserInfo::new(VIEWER, &[AUTHENTICATED]));
    }
    if let Some(user) = st.runner.tokens.user(token) {
        return UserInfo::from_service_account_name(&user).ok_or_else(ApiError::unauthorized);
    }
    if let Some(user) = st.issued.user(&st.store, token) {
        return Ok(user);
    }
    if token.starts_with(crate::eks_auth::TOKEN_PREFIX) {
        let Some(webhook) = &st.eks_webhook else {
            tracing::warn!("EKS token refused: 401 (no --eks-token-webhook configured)");
            return Err(ApiError::unauthorized());
        };
        let a = webhook.authenticate(token).await;
        if !a.authenticated {
            return Err(ApiError::unauthorized());
        }
        let groups: Vec<&str> = a.groups.iter().map(String::as_str).collect();
        return Ok(UserInfo::new(a.username.as_deref().unwrap_or(""), &groups).authenticated());
    }
    Err(ApiError::unauthorized())
}

fn random_token() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    hex::encode(bytes)
}

/// `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`: a token for an existing
/// service account, valid `spec.expirationSeconds` (at least 10 minutes; an hour when not
/// asked). kube-sim's tokens are opaque strings, not JWTs: clients never read them.
pub fn token_request(st: &AppState, ns: &str, name: &str, body: &Value) -> ApiResult<Value> {
    let rt = st
        .store
        .find_type("", "v1", "serviceaccounts")
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
    st.store.get(&rt, Some(ns), name)?;
    let seconds = match &body["spec"]["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION,
        v => v.as_u64().filter(|s| *s >= MIN_EXPIRATION).ok_or_else(|| {
            ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                vec![(
                    "spec.expirationSeconds".into(),
                    format!("Invalid value: {v}: may not specify a duration less than 10 minutes"),
                )],
            )
        })?,
    };
    let token = random_token();
    st.issued.lock().insert(
        token.clone(),
        (
            ns.to_string(),
            name.to_string(),
            Instant::now() + Duration::from_secs(seconds),
        ),
    );
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds as i64);
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": {
            "audiences": body["spec"]["audiences"].as_array().cloned().unwrap_or_default(),
            "expirationSeconds": seconds,
            "boundObjectRef": body["spec"]["boundObjectRef"],
        },
        "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_users_carry_their_groups() {
        let u = UserInfo::from_service_account_name("system:serviceaccount:joiner:joiner-agent")
            .unwrap();
        assert_eq!(u, UserInfo::service_account("joiner", "joiner-agent"));
        assert_eq!(
            u.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:joiner",
                AUTHENTICATED
            ]
        );
        assert!(UserInfo::from_service_account_name("system:serviceaccount:x").is_none());
        assert!(UserInfo::from_service_account_name("alice").is_none());
        let eks = UserInfo::new("system:node:ip-10-0-0-1", &["system:nodes"]).authenticated();
        assert_eq!(eks.groups, ["system:nodes", AUTHENTICATED]);
    }
}
