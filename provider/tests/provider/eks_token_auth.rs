//! The provider's EKS token, end to end: presigned by `eks_token::token` with real SDK
//! credentials, sent as a bearer token to an API server of the local world (kube-sim, and
//! the real kube-apiserver when its binaries are installed), which asks the local world's
//! TokenReview webhook (`tests/aws-local/joiner_local/eks_token.py`: botocore's SigV4,
//! independent of the Rust signer) and maps the caller through the cluster's access entries.
//!
//! Each refusal asserts the 401 and the verifier's reason, read from the webhook's log (the
//! API server, like EKS's, never tells the client why).

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use joiner_provider::kubernetes::connect::{pem_to_der, Connector, KubeSettings};
use joiner_provider::kubernetes::eks_token;
use joiner_provider::kubernetes::error::KubeError;
use joiner_provider::kubernetes::objects::kinds;
use joiner_test_support::MotoServer;
use serde_json::Value;

const REGION: &str = "us-east-1";
const ADMIN: &str = "arn:aws:iam::123456789012:user/local-admin";

/// The emulator with clusters `a` and `b` (API authentication mode, so the creator,
/// local-admin, has the bootstrap admin entry), a role `deployer` with an entry on `a`
/// (group `team-a`, username from the session), and a user `nobody` with no entry.
struct World {
    moto: MotoServer,
    config: aws_config::SdkConfig,
    nobody: Credentials,
}

fn admin_credentials() -> Credentials {
    // Long-term key of the IAM user local-admin: no session token (STS refuses one with a
    // long-term key, and so does the local world's verifier).
    Credentials::new("testing", "testing", None, None, "test")
}

async fn sdk_config(moto: &MotoServer, creds: Credentials) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(joiner_provider::aws::client::http_client())
        .region(aws_config::Region::new(REGION))
        .endpoint_url(moto.endpoint())
        .credentials_provider(creds)
        .load()
        .await
}

impl World {
    async fn start() -> World {
        let moto = MotoServer::start();
        let config = sdk_config(&moto, admin_credentials()).await;
        let iam = aws_sdk_iam::Client::new(&config);
        let eks = aws_sdk_eks::Client::new(&config);
        let role = iam
            .create_role()
            .role_name("cluster")
            .assume_role_policy_document("{}")
            .send()
            .await
            .unwrap()
            .role
            .unwrap()
            .arn;
        for name in ["a", "b"] {
            eks.create_cluster()
                .name(name)
                .role_arn(&role)
                .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
                .access_config(
                    aws_sdk_eks::types::CreateAccessConfigRequest::builder()
                        .authentication_mode(aws_sdk_eks::types::AuthenticationMode::Api)
                        .build(),
                )
                .send()
                .await
                .unwrap();
        }
        let deployer = iam
            .create_role()
            .role_name("deployer")
            .assume_role_policy_document("{}")
            .send()
            .await
            .unwrap()
            .role
            .unwrap()
            .arn;
        eks.create_access_entry()
            .cluster_name("a")
            .principal_arn(&deployer)
            .kubernetes_groups("team-a")
            .username("deployer:{{SessionName}}")
            .send()
            .await
            .unwrap();
        iam.create_user().user_name("nobody").send().await.unwrap();
        let key = iam
            .create_access_key()
            .user_name("nobody")
            .send()
            .await
            .unwrap()
            .access_key
            .unwrap();
        let nobody = Credentials::new(key.access_key_id, key.secret_access_key, None, None, "test");
        World {
            moto,
            config,
            nobody,
        }
    }

    fn webhook(&self, cluster: &str) -> String {
        format!(
            "{}/joiner-local/eks/{REGION}/{cluster}/authenticate",
            self.moto.endpoint()
        )
    }

    /// The verifier's decisions for `cluster`, newest last.
    fn decisions(&self, cluster: &str) -> Vec<Value> {
        let (status, body) = self
            .moto
            .request(
                "GET",
                &format!("/joiner-local/eks/{REGION}/{cluster}/authentications"),
                "",
            )
            .unwrap();
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["authentications"].as_array().cloned().unwrap_or_default()
    }

    /// Binds the EKS cluster's endpoint and CA to an API server of the local world.
    fn bind(&self, cluster: &str, url: &str, ca_pem: &str) {
        use base64::Engine;
        let body = serde_json::json!({
            "endpoint": url,
            "certificateAuthority": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        });
        let (status, answer) = self
            .moto
            .request(
                "POST",
                &format!("/joiner-local/eks/{REGION}/clusters/{cluster}/endpoint"),
                &body.to_string(),
            )
            .unwrap();
        assert_eq!(status, 200, "{answer}");
    }

    async fn assume_deployer(&self, session: &str) -> Credentials {
        let sts = aws_sdk_sts::Client::new(&self.config);
        let c = sts
            .assume_role()
            .role_arn("arn:aws:iam::123456789012:role/deployer")
            .role_session_name(session)
            .send()
            .await
            .unwrap()
            .credentials
            .unwrap();
        Credentials::new(
            c.access_key_id,
            c.secret_access_key,
            Some(c.session_token),
            None,
            "test",
        )
    }
}

/// An API server under test: its URL and CA.
struct Server {
    url: String,
    ca_pem: String,
}

/// Sends `GET /api/v1/namespaces` with the bearer token; Ok, or the HTTP status of the
/// refusal.
async fn list_namespaces(server: &Server, token: &str) -> Result<(), u16> {
    let mut config = kube::Config::new(server.url.parse().unwrap());
    config.root_cert = Some(pem_to_der(&server.ca_pem).unwrap());
    config.auth_info.token = Some(token.to_string().into());
    let client = kube::Client::try_from(config).unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    match api.list(&Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(s.code),
        Err(e) => panic!("no answer from {}: {e}", server.url),
    }
}

fn token(creds: &Credentials, cluster: &str, at: SystemTime) -> String {
    eks_token::token(creds, REGION, cluster, at).unwrap()
}

/// A good token for `a` with the last hex digit of its signature changed.
fn tampered(creds: &Credentials) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let t = token(creds, "a", SystemTime::now());
    let mut url = String::from_utf8(
        b64.decode(t.strip_prefix(eks_token::TOKEN_PREFIX).unwrap())
            .unwrap(),
    )
    .unwrap();
    let last = url.pop().unwrap();
    url.push(if last == '0' { '1' } else { '0' });
    format!("{}{}", eks_token::TOKEN_PREFIX, b64.encode(url))
}

/// Asserts a 401 and that the verifier's last decision on `a` is the refusal `kind` with a
/// message containing `says`.
async fn assert_refused(world: &World, server: &Server, token: &str, kind: &str, says: &str) {
    assert_eq!(list_namespaces(server, token).await, Err(401));
    let last = world.decisions("a").pop().expect("the webhook was asked");
    assert_eq!(last["authenticated"], false, "{last}");
    assert_eq!(last["reason"], kind, "{last}");
    let error = last["error"].as_str().unwrap();
    assert!(error.contains(says), "{error:?} should say {says:?}");
}

// ---------------------------------------------------------------------------------------
// kube-sim

async fn kube_sim(world: &World) -> (kube_sim::KubeSim, Server) {
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        eks_token_webhook: Some(world.webhook("a")),
        ..Default::default()
    })
    .unwrap();
    let server = Server {
        url: sim.url(),
        ca_pem: sim.ca_pem().to_string(),
    };
    (sim, server)
}

#[tokio::test]
async fn kube_sim_accepts_a_good_token_as_its_access_entry_says() {
    let world = World::start().await;
    let (sim, server) = kube_sim(&world).await;
    let admin = admin_credentials();
    assert_eq!(
        list_namespaces(&server, &token(&admin, "a", SystemTime::now())).await,
        Ok(())
    );
    let who = sim.eks_authentications().pop().unwrap();
    assert!(who.authenticated, "{who:?}");
    assert_eq!(who.username.as_deref(), Some(ADMIN));
    // The bootstrap admin entry carries AmazonEKSClusterAdminPolicy.
    assert_eq!(who.groups, vec!["system:masters".to_string()]);

    // An assumed role: the entry is the role's, the username names the session.
    let deployer = world.assume_deployer("ci-42").await;
    let t = token(&deployer, "a", SystemTime::now());
    // Authenticated, then authorized by RBAC: its group holds no rights until bound.
    assert_eq!(list_namespaces(&server, &t).await, Err(403));
    let who = sim.eks_authentications().pop().unwrap();
    assert_eq!(who.username.as_deref(), Some("deployer:ci-42"), "{who:?}");
    assert_eq!(who.groups, vec!["team-a".to_string()]);
    bind_group_to_list_namespaces(&sim, "team-a").await;
    assert_eq!(list_namespaces(&server, &t).await, Ok(()));
}

/// A ClusterRole that lists Namespaces, bound to `group` (by kube-sim's admin).
async fn bind_group_to_list_namespaces(sim: &kube_sim::KubeSim, group: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let admin = sim.client().await.unwrap();
    let pp = kube::api::PostParams::default();
    let role = serde_json::json!({"metadata": {"name": "list-namespaces"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]});
    kube::Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &serde_json::from_value(role).unwrap())
        .await
        .unwrap();
    let binding = serde_json::json!({"metadata": {"name": "list-namespaces"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "list-namespaces"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]});
    kube::Api::<ClusterRoleBinding>::all(admin)
        .create(&pp, &serde_json::from_value(binding).unwrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn kube_sim_refuses_a_token_for_another_cluster() {
    let world = World::start().await;
    let (_sim, server) = kube_sim(&world).await;
    let t = token(&admin_credentials(), "b", SystemTime::now());
    assert_refused(
        &world,
        &server,
        &t,
        "wrong-cluster",
        "presigned for cluster 'b'",
    )
    .await;
}

#[tokio::test]
async fn kube_sim_refuses_an_expired_token() {
    let world = World::start().await;
    let (_sim, server) = kube_sim(&world).await;
    let t = token(
        &admin_credentials(),
        "a",
        SystemTime::now() - Duration::from_secs(20 * 60),
    );
    assert_refused(
        &world,
        &server,
        &t,
        "expired",
        "X-Amz-Date parameter is expired (15 minute expiration)",
    )
    .await;
}

#[tokio::test]
async fn kube_sim_refuses_a_tampered_signature() {
    let world = World::start().await;
    let (_sim, server) = kube_sim(&world).await;
    assert_refused(
        &world,
        &server,
        &tampered(&admin_credentials()),
        "bad-signature",
        "SignatureDoesNotMatch",
    )
    .await;
}

#[tokio::test]
async fn kube_sim_refuses_an_unknown_access_key() {
    let world = World::start().await;
    let (_sim, server) = kube_sim(&world).await;
    let stranger = Credentials::new("AKIAUNKNOWN000000000", "secret", None, None, "test");
    assert_refused(
        &world,
        &server,
        &token(&stranger, "a", SystemTime::now()),
        "unknown-key",
        "access key AKIAUNKNOWN000000000 is not known to STS",
    )
    .await;
}

#[tokio::test]
async fn kube_sim_refuses_a_principal_without_an_access_entry() {
    let world = World::start().await;
    let (_sim, server) = kube_sim(&world).await;
    assert_refused(
        &world,
        &server,
        &token(&world.nobody, "a", SystemTime::now()),
        "no-access-entry",
        "no access entry for arn:aws:iam::123456789012:user/nobody on cluster 'a'",
    )
    .await;
}

#[tokio::test]
async fn kube_sim_refuses_a_long_term_key_with_a_session_token() {
    let world = World::start().await;
    let (_sim, server) = kube_sim(&world).await;
    let with_token = Credentials::new("testing", "testing", Some("testing".into()), None, "t");
    assert_refused(
        &world,
        &server,
        &token(&with_token, "a", SystemTime::now()),
        "unknown-key",
        "carries an X-Amz-Security-Token",
    )
    .await;
}

/// The provider's own path (no `kubernetes {}` block): DescribeCluster gives kube-sim's
/// endpoint and CA (bound in the local world), the token is presigned from the provider's
/// credentials; refused, the error names the cluster and the principal and says what it
/// ruled out.
#[tokio::test]
async fn the_provider_reaches_the_cluster_from_eks_and_explains_a_refusal() {
    let world = World::start().await;
    let (sim, server) = kube_sim(&world).await;
    world.bind("a", &server.url, &server.ca_pem);

    let connector = Connector::new(
        KubeSettings::FromEks,
        joiner_provider::aws::client::AwsClients::from_config(world.config.clone()),
        REGION.into(),
    );
    let kube = connector.client("a").await.unwrap();
    let ns = kube.get(kinds::NAMESPACE, None, "default").await.unwrap();
    assert!(ns.is_some());
    assert_eq!(
        sim.eks_authentications().pop().unwrap().username.as_deref(),
        Some(ADMIN)
    );

    let as_nobody = Connector::new(
        KubeSettings::FromEks,
        joiner_provider::aws::client::AwsClients::from_config(
            sdk_config(&world.moto, world.nobody.clone()).await,
        ),
        REGION.into(),
    );
    let kube = as_nobody.client("a").await.unwrap();
    let err = kube
        .get(kinds::NAMESPACE, None, "default")
        .await
        .unwrap_err();
    assert!(matches!(err, KubeError::Unauthorized { .. }), "{err:?}");
    let text = err.to_string();
    eprintln!("the provider's error:\n{text}");
    for says in [
        "EKS cluster \"a\"",
        "presigned as arn:aws:iam::123456789012:user/nobody",
        "no access entry for arn:aws:iam::123456789012:user/nobody on cluster \"a\"",
        "joiner_access_entry",
        "ruled out:",
        "an expired token or clock skew",
        "a token for another cluster",
    ] {
        assert!(text.contains(says), "{text}\nshould say {says:?}");
    }
    assert_eq!(
        world.decisions("a").pop().unwrap()["reason"],
        "no-access-entry"
    );
}

// ---------------------------------------------------------------------------------------
// The real control plane: the same token and refusals through kube-apiserver's
// --authentication-token-webhook-config-file (when its binaries are installed).

/// Who the API server says the token is (SelfSubjectReview, allowed to every
/// authenticated user).
async fn self_subject(server: &Server, token: &str) -> Value {
    let mut config = kube::Config::new(server.url.parse().unwrap());
    config.root_cert = Some(pem_to_der(&server.ca_pem).unwrap());
    config.auth_info.token = Some(token.to_string().into());
    let client = kube::Client::try_from(config).unwrap();
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
    });
    let request = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let answer: Value = client.request(request).await.unwrap();
    answer["status"]["userInfo"].clone()
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn eks_token_authenticates() {
        let world = World::start().await;
        let webhook = world.webhook("a");
        let cp = std::thread::spawn(move || {
            joiner_control_plane::ControlPlane::start(joiner_control_plane::Options {
                controller_manager: false,
                scheduler: false,
                kwok: false,
                token_webhook: Some(webhook),
                ..Default::default()
            })
        })
        .join()
        .unwrap()
        .unwrap();
        let server = Server {
            url: cp.url().to_string(),
            ca_pem: cp.ca_pem().to_string(),
        };
        let admin = admin_credentials();

        // Accepted, and RBAC is real here: system:masters (the admin policy) may list.
        assert_eq!(
            list_namespaces(&server, &token(&admin, "a", SystemTime::now())).await,
            Ok(())
        );
        let who = self_subject(&server, &token(&admin, "a", SystemTime::now())).await;
        assert_eq!(who["username"], ADMIN, "{who}");
        assert!(who["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "system:masters"));
        // The deployer is authenticated (not 401) with its entry's username and group; with
        // no RoleBinding for team-a, RBAC forbids the list (403).
        let deployer = world.assume_deployer("ci-7").await;
        let t = token(&deployer, "a", SystemTime::now());
        assert_eq!(list_namespaces(&server, &t).await, Err(403));
        let who = self_subject(&server, &t).await;
        assert_eq!(who["username"], "deployer:ci-7", "{who}");
        assert!(who["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "team-a"));

        assert_refused(
            &world,
            &server,
            &token(&admin, "b", SystemTime::now()),
            "wrong-cluster",
            "presigned for cluster 'b'",
        )
        .await;
        assert_refused(
            &world,
            &server,
            &token(
                &admin,
                "a",
                SystemTime::now() - Duration::from_secs(20 * 60),
            ),
            "expired",
            "X-Amz-Date parameter is expired",
        )
        .await;
        assert_refused(
            &world,
            &server,
            &tampered(&admin),
            "bad-signature",
            "SignatureDoesNotMatch",
        )
        .await;
        assert_refused(
            &world,
            &server,
            &token(&world.nobody, "a", SystemTime::now()),
            "no-access-entry",
            "no access entry for arn:aws:iam::123456789012:user/nobody",
        )
        .await;
        drop(cp);
    }
}
