//! The world the agent tests run in: moto (EC2), optionally the fault proxy in front of it,
//! a cluster with the EC2 → Node bridge pointed at moto, the joiner.dev CRDs, a NodeClass
//! whose subnets and security group are moto's default ones (tagged for discovery), and
//! helpers to run the agent in-process (library entry point) or as a `joiner-agent run`
//! process.
//!
//! IAM is enforced (`tests/aws-local/joiner_local/iam_enforce.py`): the agent signs as a
//! session of the role `agent-test-agent`, whose only policy is the one `joiner_agent_role`
//! renders (printed by `terraform-provider-joiner policy agent`, never copied by hand), so a
//! call the policy does not allow fails here as it would on AWS. The session is obtained
//! with AssumeRole by the admin (the role's trust names the admin user): the in-process agent
//! has no pod to receive an IRSA token; kube-sim's runner covers IRSA. The nodes' role and
//! its instance profile (`agent-test-nodes`) exist, as `joiner_node_role` makes them.
//! Scenarios read the decisions on the agent's calls with [`World::iam_refused`].
//!
//! The cluster is kube-sim (its own scheduler and kubelet, the bridge inside it) or, with
//! [`Target::ControlPlane`], a real control plane of the test's own: kube-apiserver,
//! kube-controller-manager and kube-scheduler binding the pods, KWOK playing the kubelet of
//! the Nodes the bridge registers as a kube-rs client. The same test bodies run on both.

pub mod checker;
pub mod claim_log;
pub mod crd_rules;
pub mod csi_attacher;
pub mod ebs_provisioner;
pub mod karpenter_regression;
pub mod kwok;
pub mod pod_watch;
pub mod rbac;

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, Tag};
use base64::Engine;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use joiner_agent::api::served::ApiFlavor;
use joiner_agent::api::{NodeClaim, NodeClass, NodePool};
use joiner_agent::cloud::ec2::{Ec2Cloud, Ec2Options};
use joiner_agent::controllers::{self, Config};

pub const CLUSTER: &str = "agent-test";
/// The interruption queue the agent's policy names (interruption tests create it).
pub const QUEUE: &str = "agent-test-interruptions";
pub const ACCOUNT: &str = "123456789012";
/// The agent's role (its policy is the provider's rendering) and the nodes' role, whose
/// instance profile of the same name the NodeClass `role` points at.
pub const AGENT_ROLE: &str = "agent-test-agent";
pub const NODE_ROLE: &str = "agent-test-nodes";
pub const ZONES: &[&str] = &["us-east-1a", "us-east-1b", "us-east-1c"];

pub struct World {
    // Declared first so the bridge stops before the cluster it writes to; held for its drop.
    _bridge_stop: Option<tokio::sync::watch::Sender<bool>>,
    pub moto: joiner_test_support::MotoServer,
    pub proxy: Option<fault_proxy::FaultProxy>,
    pub cluster: kube_sim::TargetCluster,
    pub client: kube::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub image_id: String,
    /// The agent role's session: every AWS client of the agent signs with it.
    pub agent_credentials: aws_credential_types::Credentials,
    /// The API server's URL and CA (PEM), for the agent's flags and node bootstrap.
    server: (String, String),
    /// When this world began starting, after any wait for its turn (see [`WORLDS`]): the
    /// origin of a scenario's elapsed-time prints.
    pub began: Instant,
    /// The agent's own kubeconfig: a token of the ServiceAccount `joiner_agent` renders,
    /// under its rendered roles (see [`rbac`]), which kube-sim and the real API server both
    /// enforce.
    agent_kubeconfig: rbac::AgentKubeconfig,
    /// The API the agent serves here (`--api`).
    pub api: ApiFlavor,
    // Last: released once everything above has stopped.
    _slot: Slot,
}

/// A world on the real control plane runs alone in its test process; kube-sim worlds share.
/// A control plane and its agent next to another scenario on 2 cores made the kube-sim Spot
/// storm's replacement-before-cordon ordering (seen through two separate watches) flaky.
static WORLDS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held, never read: dropping the guard frees the slot.
enum Slot {
    Shared {
        _guard: tokio::sync::RwLockReadGuard<'static, ()>,
    },
    Alone {
        _guard: tokio::sync::RwLockWriteGuard<'static, ()>,
    },
}

/// Which cluster a [`World`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    #[default]
    Sim,
    /// A real control plane started for this world alone (cluster-scoped CRDs and Nodes,
    /// and an agent that acts on every pending pod, would collide in a shared one).
    ControlPlane,
}

pub struct Opts {
    pub boot_delay: Duration,
    pub proxy: bool,
    pub target: Target,
    /// The API the agent serves. Under Karpenter's, the world is set up as Karpenter's
    /// getting-started guide sets up a cluster: Karpenter's CRDs, and its discovery tag on
    /// the subnets and the cluster security group.
    pub api: ApiFlavor,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            boot_delay: Duration::from_millis(500),
            proxy: false,
            target: Target::Sim,
            api: ApiFlavor::Joiner,
        }
    }
}

impl Opts {
    pub fn on(target: Target) -> Opts {
        Opts {
            target,
            ..Default::default()
        }
    }
}

/// CRDs serving the agent's kinds under Karpenter's names (`nodepools.karpenter.sh`,
/// `ec2nodeclasses.karpenter.k8s.aws`, ...), for kube-sim, which serves a CRD's resource but
/// does not apply its schema: what matters there is the group, version, kind and plural.
/// Karpenter's own CRDs, with their schemas, are what the real control plane is given in
/// `scripts/karpenter-regression`.
pub fn karpenter_crds() -> Vec<CustomResourceDefinition> {
    use joiner_agent::api::served::{ClassCloud, Served};
    let served = Served::new(ApiFlavor::Karpenter, ClassCloud::Ec2);
    joiner_agent::api::schema::crds()
        .into_iter()
        .map(|crd| {
            let mut v = serde_json::to_value(crd).expect("CRD JSON");
            let r = match v["spec"]["names"]["kind"].as_str().unwrap_or_default() {
                "NodePool" => served.node_pools(),
                "NodeClaim" => served.node_claims(),
                "NodeOverlay" => served.node_overlays(),
                _ => served.node_classes(),
            };
            v["metadata"] = json!({"name": format!("{}.{}", r.plural, r.group)});
            v["spec"]["group"] = r.group.clone().into();
            v["spec"]["names"]["kind"] = r.kind.clone().into();
            v["spec"]["names"]["listKind"] = format!("{}List", r.kind).into();
            v["spec"]["names"]["plural"] = r.plural.clone().into();
            v["spec"]["names"]["singular"] = r.kind.to_lowercase().into();
            v["spec"]["names"]["categories"] = json!(["karpenter"]);
            v["spec"]["names"]["shortNames"] = json!([]);
            if let Some(version) = v["spec"]["versions"].get_mut(0) {
                version["name"] = r.version.clone().into();
            }
            serde_json::from_value(v).expect("a CRD")
        })
        .collect()
}

/// The security groups a NodeClass here selects, as the `groupless-eks` module's default
/// NodeClass does: the cluster security group EKS created (the only group the API server's
/// private endpoint and CoreDNS admit), found by the tag EKS puts on it, and the groups
/// tagged for discovery.
pub fn security_group_terms() -> serde_json::Value {
    json!([
        {"tags": {"aws:eks:cluster-name": CLUSTER}},
        {"tags": {"joiner.dev/discovery": CLUSTER}},
    ])
}

pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    let creds = aws_credential_types::Credentials::new("testing", "testing", None, None, "test");
    sdk_config_as(endpoint, creds).await
}

/// The SDK configuration signing as `creds` (the agent role's session).
pub async fn sdk_config_as(
    endpoint: &str,
    creds: aws_credential_types::Credentials,
) -> aws_config::SdkConfig {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(creds)
        .load()
        .await
}

/// The agent policy exactly as `joiner_agent_role` renders it for this world's cluster,
/// queue and node role (`terraform-provider-joiner policy agent`).
pub fn rendered_agent_policy() -> serde_json::Value {
    static POLICY: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    POLICY
        .get_or_init(|| {
            let out = Command::new(joiner_test_support::provider_bin())
                .args([
                    "policy",
                    "agent",
                    &format!("arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{CLUSTER}"),
                    &format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{QUEUE}"),
                    &format!("arn:aws:iam::{ACCOUNT}:role/{NODE_ROLE}"),
                ])
                .output()
                .expect("run terraform-provider-joiner policy agent");
            assert!(
                out.status.success(),
                "policy agent: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).expect("the policy is JSON")
        })
        .clone()
}

/// As the admin: the agent's role with the rendered policy; returns a session of it. (The
/// nodes' role, its instance profile and access entry come first, from
/// `kube_sim::node_auth::node_role`, as `joiner_node_role` and the module make them.)
async fn agent_identity(admin: &aws_config::SdkConfig) -> aws_credential_types::Credentials {
    let iam = aws_sdk_iam::Client::new(admin);
    let admin_trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:user/local-admin")},
        "Action": "sts:AssumeRole"}]});
    iam.create_role()
        .role_name(AGENT_ROLE)
        .assume_role_policy_document(admin_trust.to_string())
        .send()
        .await
        .expect("iam:CreateRole agent");
    iam.put_role_policy()
        .role_name(AGENT_ROLE)
        .policy_name("joiner-agent")
        .policy_document(rendered_agent_policy().to_string())
        .send()
        .await
        .expect("iam:PutRolePolicy agent");
    let out = aws_sdk_sts::Client::new(admin)
        .assume_role()
        .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/{AGENT_ROLE}"))
        .role_session_name("joiner-agent")
        .duration_seconds(3600)
        .send()
        .await
        .expect("sts:AssumeRole the agent role");
    let c = out.credentials().expect("session credentials");
    aws_credential_types::Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_string()),
        None,
        "agent-role",
    )
}

/// Polls `f` until it returns Some, or panics naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl World {
    /// A world on kube-sim, or on a real control plane when `opts.target` asks for one.
    /// A real control plane that is not built or fails to start panics, saying how to
    /// build it: a test asked to run there never passes by skipping.
    pub async fn start(opts: Opts) -> World {
        World::start_on(opts).await
    }

    /// [`World::start`].
    pub async fn start_on(opts: Opts) -> World {
        let slot = match opts.target {
            Target::Sim => Slot::Shared {
                _guard: WORLDS.read().await,
            },
            Target::ControlPlane => Slot::Alone {
                _guard: WORLDS.write().await,
            },
        };
        let began = Instant::now();
        // The control plane first: when it is not there, nothing else is started.
        let control_plane = match opts.target {
            Target::Sim => None,
            Target::ControlPlane => Some(
                kube_sim::TargetCluster::own_control_plane()
                    .await
                    .unwrap_or_else(|e| panic!("the real control plane: {e:#}")),
            ),
        };
        // IAM is enforced, except behind the fault proxy: it rewrites CreateFleet bodies (the
        // overrides it fails on are dropped), which no signature survives. The agent still
        // signs as its role there; the decisions are just not checked.
        let moto = if opts.proxy {
            joiner_test_support::MotoServer::start()
        } else {
            joiner_test_support::MotoServer::start_enforced()
        };
        let proxy = opts
            .proxy
            .then(|| fault_proxy::FaultProxy::start(&moto.endpoint()));
        let bridge = kube_sim::aws::BridgeOptions {
            endpoint: moto.endpoint(),
            cluster: CLUSTER.into(),
            region: "us-east-1".into(),
            boot_delay: opts.boot_delay,
            node_grace: Duration::from_millis(500),
            poll: Duration::from_millis(200),
        };
        let (cluster, bridge_stop) = match control_plane {
            None => {
                let sim = kube_sim::KubeSim::start(kube_sim::Options {
                    cluster_name: CLUSTER.into(),
                    aws_endpoint: Some(moto.endpoint()),
                    aws_region: "us-east-1".into(),
                    boot_delay: bridge.boot_delay,
                    node_grace: bridge.node_grace,
                    aws_poll: bridge.poll,
                    ..Default::default()
                })
                .expect("kube-sim starts");
                (kube_sim::TargetCluster::Sim(Box::new(sim)), None)
            }
            Some(cp) => {
                let (tx, rx) = tokio::sync::watch::channel(false);
                cp.bridge(bridge, rx).await.expect("EC2 -> Node bridge");
                (cp, Some(tx))
            }
        };
        let server = cluster.server().expect("a cluster this process started");
        let client = cluster.client().await.expect("cluster client");
        let aws_conf = sdk_config(&moto.endpoint()).await;
        let ec2 = aws_sdk_ec2::Client::new(&aws_conf);
        // What a real cluster needs for its nodes to join: the EKS cluster, the NodeClass
        // role with its instance profile, and the role's EC2_LINUX access entry. Without
        // it the bridge registers no Node, as EKS would refuse the kubelet.
        kube_sim::node_auth::node_role(&aws_conf, CLUSTER, NODE_ROLE, true)
            .await
            .expect("the node role and its access entry");

        // Discovery tags on moto's default subnets (three zones) and security group.
        let subnets = ec2
            .describe_subnets()
            .filters(
                Filter::builder()
                    .name("default-for-az")
                    .values("true")
                    .build(),
            )
            .send()
            .await
            .expect("EC2 DescribeSubnets");
        // Karpenter's getting-started guide tags the subnets (and below, the cluster
        // security group) with its own discovery key.
        let mut discovery = vec![Tag::builder()
            .key("joiner.dev/discovery")
            .value(CLUSTER)
            .build()];
        let karpenter_tag = Tag::builder()
            .key("karpenter.sh/discovery")
            .value(CLUSTER)
            .build();
        if opts.api == ApiFlavor::Karpenter {
            discovery.push(karpenter_tag.clone());
        }
        for s in subnets.subnets() {
            if ZONES.contains(&s.availability_zone().unwrap_or("")) {
                ec2.create_tags()
                    .resources(s.subnet_id().unwrap())
                    .set_tags(Some(discovery.clone()))
                    .send()
                    .await
                    .expect("EC2 CreateTags subnet");
            }
        }
        let sgs = ec2
            .describe_security_groups()
            .filters(
                Filter::builder()
                    .name("group-name")
                    .values("default")
                    .build(),
            )
            .send()
            .await
            .expect("EC2 DescribeSecurityGroups");
        for g in sgs.security_groups() {
            ec2.create_tags()
                .resources(g.group_id().unwrap())
                .tags(discovery[0].clone())
                .send()
                .await
                .expect("EC2 CreateTags security group");
        }
        if opts.api == ApiFlavor::Karpenter {
            let cluster_groups = ec2
                .describe_security_groups()
                .filters(
                    Filter::builder()
                        .name("tag:aws:eks:cluster-name")
                        .values(CLUSTER)
                        .build(),
                )
                .send()
                .await
                .expect("EC2 DescribeSecurityGroups (the cluster security group)");
            for g in cluster_groups.security_groups() {
                ec2.create_tags()
                    .resources(g.group_id().unwrap())
                    .tags(karpenter_tag.clone())
                    .send()
                    .await
                    .expect("EC2 CreateTags cluster security group");
            }
        }
        // An Amazon Linux image (the family the local AL2023 public parameters name), asked
        // for by name: moto holds about a thousand Amazon images, and answering all of them
        // cost the emulator seconds of CPU per world.
        let images = ec2
            .describe_images()
            .owners("amazon")
            .filters(
                Filter::builder()
                    .name("architecture")
                    .values("x86_64")
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("name")
                    .values("al2022-ami-*")
                    .build(),
            )
            .send()
            .await
            .expect("EC2 DescribeImages");
        let image_id = images
            .images()
            .first()
            .and_then(|i| i.image_id())
            .expect("moto ships x86_64 Amazon Linux AMIs")
            .to_string();

        let agent_credentials = agent_identity(&sdk_config(&moto.endpoint()).await).await;

        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let served_crds = match opts.api {
            ApiFlavor::Joiner => joiner_agent::api::schema::crds(),
            ApiFlavor::Karpenter => karpenter_crds(),
        };
        for crd in &served_crds {
            crds.create(&PostParams::default(), crd)
                .await
                .expect("CRD create");
        }
        // A real API server serves a CRD's objects only once it is Established.
        for crd in served_crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            wait_for(
                &format!("CRD {name} Established"),
                Duration::from_secs(30),
                || async {
                    let c = crds.get(&name).await.ok()?;
                    c.status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                        .then_some(())
                },
            )
            .await;
        }
        let ns: Api<Namespace> = Api::all(client.clone());
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "joiner"}})).unwrap(),
        )
        .await
        .expect("namespace joiner");
        rbac::apply(&client, &rbac::rendered_for(CLUSTER, None, opts.api)).await;
        let token = rbac::token(&client).await;
        let agent_kubeconfig = rbac::write_kubeconfig(&server.0, &server.1, &token);
        World {
            _bridge_stop: bridge_stop,
            moto,
            proxy,
            cluster,
            client,
            ec2,
            image_id,
            agent_credentials,
            server,
            began,
            agent_kubeconfig,
            api: opts.api,
            _slot: slot,
        }
    }

    /// kube-sim, when the world runs on it (its sim-only hooks).
    pub fn sim(&self) -> Option<&kube_sim::KubeSim> {
        self.cluster.sim()
    }

    /// Which cluster the world runs on.
    pub fn target(&self) -> Target {
        match self.sim() {
            Some(_) => Target::Sim,
            None => Target::ControlPlane,
        }
    }

    /// The cluster's name for messages: "kube-sim" or "real control plane".
    pub fn target_name(&self) -> &'static str {
        self.cluster.name()
    }

    fn cluster_url(&self) -> String {
        self.server.0.clone()
    }

    fn cluster_ca_b64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.server.1)
    }

    /// The endpoint the agent talks to: the fault proxy when there is one.
    pub fn agent_aws_endpoint(&self) -> String {
        match &self.proxy {
            Some(p) => p.endpoint(),
            None => self.moto.endpoint(),
        }
    }

    pub async fn cloud(&self) -> Arc<Ec2Cloud> {
        let mut o = Ec2Options::new(CLUSTER);
        o.cluster_endpoint = Some(self.cluster_url());
        o.cluster_ca = Some(self.cluster_ca_b64());
        // The version the world's API server reports, as the agent's start-up reads it.
        let version = self.client.apiserver_version().await.expect("GET /version");
        o.kubernetes_version = Some(format!("{}.{}", version.major, version.minor));
        o.service_cidr = Some("10.100.0.0/16".into());
        o.launch_backoff = Duration::from_millis(50);
        Arc::new(Ec2Cloud::new(
            &sdk_config_as(&self.agent_aws_endpoint(), self.agent_credentials.clone()).await,
            o,
        ))
    }

    /// The kubeconfig the agent runs with: its ServiceAccount's.
    pub fn agent_kubeconfig_path(&self) -> &std::path::Path {
        &self.agent_kubeconfig.path
    }

    /// Replaces the agent's ClusterRole with the rendered one minus `verb` on `resource`
    /// (the refused-permission tests).
    pub async fn remove_agent_rule_verb(&self, resource: &str, verb: &str) {
        let role = rbac::cluster_role(&rbac::rendered_for(CLUSTER, None, self.api));
        self.set_agent_cluster_role(rbac::without_verb(role, resource, verb))
            .await;
    }

    /// What kube-sim's RBAC refused the agent so far (the 403 messages, oldest first).
    pub fn agent_refusals(&self) -> Vec<String> {
        let user = format!(
            "system:serviceaccount:{}:{}",
            rbac::NAMESPACE,
            rbac::SERVICE_ACCOUNT
        );
        self.sim()
            .map(|s| s.refusals())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.user == user)
            .map(|r| r.message)
            .collect()
    }

    /// Puts the agent's ClusterRole back as rendered.
    pub async fn restore_agent_rules(&self) {
        self.set_agent_cluster_role(rbac::cluster_role(&rbac::rendered_for(
            CLUSTER, None, self.api,
        )))
        .await;
    }

    async fn set_agent_cluster_role(&self, role: serde_json::Value) {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(self.client.clone());
        roles
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"rules": role["rules"]})),
            )
            .await
            .expect("patch the agent's ClusterRole");
    }

    /// `run`'s flags for this world, short windows for tests, plus `extra`.
    pub fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "joiner-agent".into(),
            "--cluster-name".into(),
            CLUSTER.into(),
            "--region".into(),
            "us-east-1".into(),
            "--kubeconfig".into(),
            self.agent_kubeconfig_path().display().to_string(),
            "--aws-endpoint".into(),
            self.agent_aws_endpoint(),
            "--cluster-endpoint".into(),
            self.cluster_url(),
            "--cluster-ca".into(),
            self.cluster_ca_b64(),
            "--metrics-addr".into(),
            format!("127.0.0.1:{}", joiner_test_support::free_port()),
            "--health-addr".into(),
            format!("127.0.0.1:{}", joiner_test_support::free_port()),
            "--batch-idle".into(),
            "300ms".into(),
            "--batch-max".into(),
            "3s".into(),
            "--gc-interval".into(),
            "1s".into(),
            "--gc-grace".into(),
            "4s".into(),
            "--lease-duration".into(),
            "3s".into(),
            "--lease-retry".into(),
            "500ms".into(),
            "--namespace".into(),
            "joiner".into(),
            "--log-format".into(),
            "text".into(),
        ];
        if self.api == ApiFlavor::Karpenter {
            a.extend(["--api".into(), "karpenter".into()]);
        }
        // clap rejects a flag given twice: a flag in `extra` replaces the default's pair.
        let mut i = 1;
        while i + 1 < a.len() {
            if extra.contains(&a[i].as_str()) {
                a.drain(i..i + 2);
            } else {
                i += 2;
            }
        }
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    pub fn config(&self, extra: &[&str]) -> Config {
        let mut config = Config::from_args(self.args(extra)).expect("valid flags");
        config.aws_credentials = Some(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                self.agent_credentials.clone(),
            ),
        );
        config
    }

    /// The agent session's ARN, as IAM decisions name it.
    pub fn agent_principal(&self) -> String {
        format!("arn:aws:sts::{ACCOUNT}:assumed-role/{AGENT_ROLE}/joiner-agent")
    }

    /// The IAM decisions on the agent's calls so far (`calls`, `refused`, `decisions`).
    pub fn iam_decisions(&self) -> serde_json::Value {
        serde_json::from_str(&self.moto.iam_decisions(&self.agent_principal()))
            .expect("IAM decisions are JSON")
    }

    /// The agent's refused calls so far, as "action on resource" lines.
    pub fn iam_refused(&self) -> Vec<String> {
        self.iam_decisions()["decisions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["allowed"] == false)
            .map(|d| {
                format!(
                    "{} on {}",
                    d["action"].as_str().unwrap_or(""),
                    d["resource"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    /// Replaces the agent role's policy with the provider's rendering minus the statement
    /// `sid` (the refused-permission test).
    pub async fn remove_agent_statement(&self, sid: &str) {
        let mut policy = rendered_agent_policy();
        let statements = policy["Statement"].as_array_mut().expect("statements");
        let before = statements.len();
        statements.retain(|s| s["Sid"] != sid);
        assert_eq!(statements.len() + 1, before, "no statement {sid}");
        let iam = aws_sdk_iam::Client::new(&sdk_config(&self.moto.endpoint()).await);
        iam.put_role_policy()
            .role_name(AGENT_ROLE)
            .policy_name("joiner-agent")
            .policy_document(policy.to_string())
            .send()
            .await
            .expect("iam:PutRolePolicy");
    }

    /// Runs the agent in this process until the returned handle is stopped or dropped.
    pub async fn agent(&self, extra: &[&str]) -> Agent {
        if let Ok(level) = std::env::var("JOINER_TEST_LOG") {
            controllers::operator::logging::init(
                controllers::operator::config::LogFormat::Text,
                &level,
            );
        }
        // Adopting from Karpenter's namespace: the roles `joiner_agent` renders for that.
        if let Some(i) = extra
            .iter()
            .position(|a| *a == "--adopt-karpenter-namespace")
        {
            let objects = rbac::rendered(CLUSTER, extra.get(i + 1).copied());
            rbac::apply(&self.client, &objects).await;
        }
        let config = self.config(extra);
        let metrics = config.metrics_addr;
        let cloud = self.cloud().await;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let handle = tokio::spawn(controllers::run(config, cloud, rx));
        Agent {
            stop: tx,
            handle: Some(handle),
            metrics,
        }
    }

    /// Runs `joiner-agent run` as a process (for SIGKILL and leader tests).
    pub fn agent_process(&self, extra: &[&str]) -> Child {
        let args = self.args(extra);
        let mut cmd = Command::new(joiner_test_support::agent_bin());
        cmd.arg("run").args(&args[1..]);
        for (k, v) in self.moto.env() {
            cmd.env(k, v);
        }
        let c = &self.agent_credentials;
        cmd.env("AWS_ACCESS_KEY_ID", c.access_key_id())
            .env("AWS_SECRET_ACCESS_KEY", c.secret_access_key())
            .env("AWS_SESSION_TOKEN", c.session_token().unwrap_or_default());
        cmd.env("JOINER_LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        cmd.spawn().expect("spawn joiner-agent")
    }

    /// A NodeClass named `name` using the tagged subnets and [`security_group_terms`].
    pub async fn node_class(&self, name: &str) {
        self.node_class_with(name, security_group_terms()).await
    }

    /// A NodeClass named `name` using the tagged subnets and these security group terms.
    pub async fn node_class_with(&self, name: &str, security_group_terms: serde_json::Value) {
        let api: Api<NodeClass> = Api::all(self.client.clone());
        let nc: NodeClass = serde_json::from_value(json!({
            "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
            "metadata": {"name": name},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": CLUSTER}}],
                "securityGroupSelectorTerms": security_group_terms,
                "amiSelectorTerms": [{"id": self.image_id}],
                "role": NODE_ROLE,
            }
        }))
        .unwrap();
        api.create(&PostParams::default(), &nc)
            .await
            .expect("NodeClass create");
    }

    /// A NodePool from its spec (JSON).
    pub async fn node_pool(&self, name: &str, spec: serde_json::Value) {
        let api: Api<NodePool> = Api::all(self.client.clone());
        let np: NodePool = serde_json::from_value(json!({
            "apiVersion": "joiner.dev/v1", "kind": "NodePool",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        api.create(&PostParams::default(), &np)
            .await
            .expect("NodePool create");
    }

    /// A general-purpose NodePool: amd64, c/m/r families, Spot and on-demand.
    pub fn general_pool_spec(node_class: &str) -> serde_json::Value {
        json!({
            "template": {"spec": {
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": node_class},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                ],
            }},
        })
    }

    pub async fn deployment(&self, name: &str, replicas: i32, cpu: &str, memory: &str) {
        self.deployment_with(name, replicas, cpu, memory, json!({}), json!({}))
            .await
    }

    /// A Deployment; `pod_meta` and `pod_spec` are merged into the template.
    pub async fn deployment_with(
        &self,
        name: &str,
        replicas: i32,
        cpu: &str,
        memory: &str,
        pod_meta: serde_json::Value,
        pod_spec: serde_json::Value,
    ) {
        let mut meta = json!({"labels": {"app": name}});
        if let Some(m) = pod_meta.as_object() {
            for (k, v) in m {
                meta[k] = v.clone();
            }
        }
        meta["labels"]["app"] = json!(name);
        let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
        if let Some(m) = pod_spec.as_object() {
            for (k, v) in m {
                spec[k] = v.clone();
            }
        }
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": meta, "spec": spec}}
        }))
        .unwrap();
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), "default");
        api.create(&PostParams::default(), &d)
            .await
            .expect("Deployment create");
    }

    pub async fn scale(&self, name: &str, replicas: i32) {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), "default");
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("Deployment scale");
    }

    pub async fn pods(&self, app: &str) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        api.list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn running(&self, app: &str) -> usize {
        self.pods(app)
            .await
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count()
    }

    pub async fn nodes(&self) -> Vec<Node> {
        let api: Api<Node> = Api::all(self.client.clone());
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn claims(&self) -> Vec<NodeClaim> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Instances in moto that are not terminated: (id, type, tags).
    pub async fn live_instances(
        &self,
    ) -> Vec<(String, String, std::collections::BTreeMap<String, String>)> {
        let out = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .values("stopping")
                    .values("stopped")
                    .build(),
            )
            .send()
            .await
            .expect("EC2 DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .map(|i| {
                (
                    i.instance_id().unwrap_or_default().to_string(),
                    i.instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    i.tags()
                        .iter()
                        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
                        .collect(),
                )
            })
            .collect()
    }

    /// Stops (or starts again) the kubelet of Node `node`: kube-sim's test hook
    /// (`kube_sim::aws::KUBELET_STOPPED_ANNOTATION`), after which the bridge keeps the Node
    /// `Ready=Unknown` with the unreachable taints, as a hung kubelet looks.
    pub async fn set_kubelet_running(&self, node: &str, running: bool) {
        let api: Api<Node> = Api::all(self.client.clone());
        let value = if running { json!(null) } else { json!("true") };
        api.patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kube_sim::aws::KUBELET_STOPPED_ANNOTATION: value}}})),
        )
        .await
        .expect("Node patch (kubelet hook)");
    }

    /// Sets a Node condition through the status subresource, as a node-problem agent (the
    /// EKS node monitoring agent, node-problem-detector) does; the kubelet simulation
    /// leaves conditions other than Ready alone.
    pub async fn set_node_condition(&self, node: &str, type_: &str, status: &str) {
        let api: Api<Node> = Api::all(self.client.clone());
        let cur = api.get(node).await.expect("Node get");
        let mut conds: Vec<serde_json::Value> = cur
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != type_)
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        conds.push(
            json!({"type": type_, "status": status, "reason": "InjectedByTest",
            "message": "set by the test", "lastTransitionTime": jiff_now()}),
        );
        api.patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conds}})),
        )
        .await
        .expect("Node status patch");
    }

    /// Events whose involvedObject is `name`, as "reason: message".
    pub async fn events_for(&self, namespace: &str, name: &str) -> Vec<String> {
        let api: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.client.clone(), namespace);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                )
            })
            .collect()
    }

    /// The agent's `/metrics` text.
    pub async fn metrics(&self, addr: std::net::SocketAddr) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("metrics connect");
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(
                format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }
}

/// Now, RFC 3339 in whole seconds, as Kubernetes writes condition times.
fn jiff_now() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A scenario's output names what RBAC refused its agent: a missing grant shows here even
/// when the scenario passes through a retry.
impl Drop for World {
    fn drop(&mut self) {
        let refused = self.agent_refusals();
        if !refused.is_empty() {
            eprintln!("RBAC refused the agent {} time(s):", refused.len());
            for m in refused.iter().collect::<std::collections::BTreeSet<_>>() {
                eprintln!("  {m}");
            }
        }
    }
}

pub struct Agent {
    stop: tokio::sync::watch::Sender<bool>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub metrics: std::net::SocketAddr,
}

impl Agent {
    /// Graceful stop, as on SIGTERM; returns what `run` returned.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        match self.handle.take() {
            Some(h) => h.await.expect("agent task"),
            None => Ok(()),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}
