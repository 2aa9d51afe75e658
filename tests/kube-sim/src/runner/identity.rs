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

/// The issuer of kube-sim's own service-account tokens when it plays no EKS cluster (the
/// in-cluster issuer of a plain cluster).
pub const IN_CLUSTER_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The service-account issuer's signing key, made when kube-sim starts.
///
/// ES256 (ECDSA P-256): STS accepts RS256/384/512 and ES256/384/512, and kube-apiserver signs
/// with ES256 when its service-account key is an EC key. ring, the crypto the workspace
/// already builds, can generate EC keys but not RSA keys.
pub struct SigningKey {
    pair: ring::signature::EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
    kid: String,
}

impl SigningKey {
    pub fn generate() -> SigningKey {
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        use sha2::Digest;
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("the system's random source makes a P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("a key ring just generated parses");
        // Like kube-apiserver's key ids: a digest of the public key, so a token names the key
        // of the JWKS that verifies it.
        let kid = b64url(&sha2::Sha256::digest(pair.public_key().as_ref()));
        SigningKey { pair, rng, kid }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as the issuer's JSON Web Key Set (`jwks_uri`) serves it.
    pub fn jwks(&self) -> serde_json::Value {
        use ring::signature::KeyPair;
        // An uncompressed SEC1 point: 0x04 || X (32 bytes) || Y (32 bytes).
        let point = self.pair.public_key().as_ref();
        json!({"keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": self.kid,
            "x": b64url(&point[1..33]), "y": b64url(&point[33..65]),
        }]})
    }

    /// A compact JWS of `claims`, signed ES256 with this key's `kid` in the header.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let sig = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .expect("ECDSA signing with the system's random source");
        format!("{input}.{}", b64url(sig.as_ref()))
    }
}

/// A projected service-account JWT (header, claims, signature) for a pod, signed by the
/// issuer's key: STS verifies it against the JWKS kube-sim published for `issuer`, and checks
/// `iss`, `aud`, `exp` and `sub` against the OIDC provider and the role's trust. The API
/// server itself accepts its tokens by lookup ([`TokenRegistry`]).
pub fn service_account_jwt(
    key: &SigningKey,
    issuer: &str,
    audience: &str,
    ns: &str,
    sa: &str,
    pod: &str,
    pod_uid: &str,
) -> String {
    let now = jiff::Timestamp::now().as_second();
    key.sign(&json!({
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
    }))
}

/// Publishes the issuer's keys to the local world (`joiner_local.oidc_keys`), which stands in
/// for the discovery document STS reads at `<issuer>/.well-known/openid-configuration`.
pub async fn publish_keys(
    aws_endpoint: &str,
    issuer: &str,
    jwks: &serde_json::Value,
) -> Result<(), String> {
    let url = format!(
        "{}/joiner-local/oidc/keys",
        aws_endpoint.trim_end_matches('/')
    );
    crate::eks_auth::post_json(&url, &json!({"issuer": issuer, "jwks": jwks}))
        .await
        .map(|_| ())
        .map_err(|e| format!("POST {url}: {e}"))
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
    fn jwt_is_signed_by_the_key_its_header_names_and_carries_the_service_account() {
        let key = SigningKey::generate();
        let t = service_account_jwt(
            &key,
            "https://oidc.eks.us-east-1.amazonaws.com/id/ABC",
            "sts.amazonaws.com",
            "joiner",
            "joiner-agent",
            "p",
            "u",
        );
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |s: &str| -> serde_json::Value {
            serde_json::from_slice(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(s)
                    .unwrap(),
            )
            .unwrap()
        };
        let (header, claims) = (decode(parts[0]), decode(parts[1]));
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"], key.kid());
        assert_eq!(claims["sub"], "system:serviceaccount:joiner:joiner-agent");
        assert_eq!(claims["aud"][0], "sts.amazonaws.com");
        // The JWKS's point verifies the signature (what STS does with the published keys).
        let jwk = &key.jwks()["keys"][0];
        let coord = |k: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(jwk[k].as_str().unwrap())
                .unwrap()
        };
        let mut point = vec![4u8];
        point.extend(coord("x"));
        point.extend(coord("y"));
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            point,
        );
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[2])
            .unwrap();
        let signed = format!("{}.{}", parts[0], parts[1]);
        public.verify(signed.as_bytes(), &sig).expect("verifies");
        let other = format!("{}.{}x", parts[0], parts[1]);
        assert!(public.verify(other.as_bytes(), &sig).is_err());
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
