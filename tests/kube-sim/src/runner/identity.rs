//! What a pod is given to talk to the cluster and to AWS: a loopback pod IP of its own, a
//! service-account token the API accepts while the pod exists, a kubeconfig holding it, and
//! for IRSA a web-identity token file.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use base64::Engine;
use serde_json::json;

/// Bearer tokens issued to pods, accepted by the API server until the pod is gone.
#[derive(Default)]
pub struct TokenRegistry {
    tokens: Mutex<HashMap<String, String>>,
}

impl TokenRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The user (`system:serviceaccount:NS:NAME`) a token was issued to.
    pub fn user(&self, token: &str) -> Option<String> {
        self.lock().get(token).cloned()
    }

    pub fn insert(&self, token: String, user: String) {
        self.lock().insert(token, user);
    }

    pub fn revoke(&self, token: &str) {
        self.lock().remove(token);
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A token shaped like a projected service-account JWT (header, claims, signature), so that
/// clients which peek at its claims (AWS SDKs do not, STS does) see the usual fields. The
/// signature is random: kube-sim checks tokens by lookup, not by signature.
pub fn service_account_jwt(
    issuer: &str,
    audience: &str,
    ns: &str,
    sa: &str,
    pod: &str,
    pod_uid: &str,
) -> String {
    use rand::Rng;
    let now = jiff::Timestamp::now().as_second();
    let header = json!({"alg": "RS256", "kid": "kube-sim"});
    let claims = json!({
        "iss": issuer,
        "sub": format!("system:serviceaccount:{ns}:{sa}"),
        "aud": [audience],
        "iat": now, "nbf": now, "exp": now + 86_400,
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": {
            "namespace": ns,
            "pod": {"name": pod, "uid": pod_uid},
            "serviceaccount": {"name": sa},
        },
    });
    let sig: [u8; 32] = rand::rng().random();
    format!(
        "{}.{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes()),
        b64url(&sig)
    )
}

/// A kubeconfig for one pod: the API server, its CA, the pod's token, the pod's namespace.
pub fn pod_kubeconfig(server: &str, ca_pem: &str, token: &str, ns: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: pod
  user:
    token: {token}
contexts:
- name: in-cluster
  context:
    cluster: in-cluster
    user: pod
    namespace: {ns}
current-context: in-cluster
"
    )
}

/// Loopback addresses in use by pods of this process (every kube-sim in it).
fn used() -> &'static Mutex<HashSet<Ipv4Addr>> {
    static USED: OnceLock<Mutex<HashSet<Ipv4Addr>>> = OnceLock::new();
    USED.get_or_init(Default::default)
}

/// A pod IP in 127.0.0.0/8 that no other pod of this process holds. Random rather than
/// sequential so that kube-sims in other processes on the machine (parallel test runs)
/// rarely pick the same address; 127.0.x.x is left to everything else.
pub fn allocate_ip() -> Ipv4Addr {
    use rand::Rng;
    let mut r = rand::rng();
    let mut set = used().lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let ip = Ipv4Addr::new(
            127,
            r.random_range(1..=254),
            r.random_range(0..=255),
            r.random_range(1..=254),
        );
        if set.insert(ip) {
            return ip;
        }
    }
}

pub fn release_ip(ip: Ipv4Addr) {
    used().lock().unwrap_or_else(|p| p.into_inner()).remove(&ip);
}

/// Writes a file only its owner can read (tokens).
pub fn write_secret(path: &Path, contents: &str) -> std::io::Result<()> {
    crate::kubeconfig::write_private(path, contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwt_has_three_parts_and_the_service_account_subject() {
        let t = service_account_jwt(
            "https://kubernetes.default.svc",
            "sts.amazonaws.com",
            "joiner",
            "joiner-agent",
            "p",
            "u",
        );
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(parts[1])
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:joiner:joiner-agent");
        assert_eq!(claims["aud"][0], "sts.amazonaws.com");
    }

    #[test]
    fn pod_ips_are_distinct_loopback_addresses() {
        let ips: Vec<Ipv4Addr> = (0..200).map(|_| allocate_ip()).collect();
        let set: HashSet<_> = ips.iter().collect();
        assert_eq!(set.len(), ips.len());
        assert!(ips.iter().all(|ip| ip.is_loopback() && ip.octets()[1] != 0));
        for ip in ips {
            release_ip(ip);
        }
    }
}
