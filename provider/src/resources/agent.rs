//! `joiner_agent`: the agent inside the cluster (namespace, service account with IRSA,
//! least-privilege RBAC, CRDs, priority class, PDB, Deployment), applied with server-side
//! apply and waited for until the Deployment has rolled out.

pub mod render;

use std::time::Duration;

use serde_json::Value as Json;

use crate::context::ProviderContext;
use crate::kubernetes::wait::{self, Step};
use crate::kubernetes::{custom, kinds, Kube, KubeError};
use crate::model::agent::AgentModel;
use crate::model::Model;
use crate::protocol::prelude::*;

const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const LOG_LINES: i64 = 20;

pub struct Agent;

#[async_trait]
impl Resource<ProviderContext> for Agent {
    fn type_name(&self) -> &'static str {
        "joiner_agent"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description("The joiner agent in the cluster: namespace, IRSA service account, least-privilege RBAC, CRDs, priority class, PDB and a 2-replica Deployment, rolled out and waited for.")
            .attribute(Attribute::string("id").computed().description("`<cluster_name>:<namespace>`, also the import ID."))
            .attribute(Attribute::string("cluster_name").required().force_new())
            .attribute(Attribute::string("queue_url").optional())
            .attribute(
                Attribute::string("role_arn")
                    .optional()
                    .validate(|v| match v.as_str() {
                        Some(s) if s.starts_with("arn:") && s.contains(":role/") => Ok(()),
                        _ => Err("must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)".into()),
                    }),
            )
            .attribute(
                Attribute::string("image")
                    .default(render::default_image())
                    .description("The agent's image reference, `REPOSITORY[:TAG]`. The default is the image a release of this provider publishes; mirror it into a private registry and name the copy here.")
                    .validate(|v| match v.as_str() {
                        Some(s) if !s.is_empty() && !s.contains(char::is_whitespace) => Ok(()),
                        _ => Err("must be an image reference without spaces".into()),
                    }),
            )
            .attribute(
                Attribute::string("image_digest")
                    .optional()
                    .description("Pins the image by content: `sha256:<64 hex digits>`. The Deployment then runs `REPOSITORY@DIGEST` (the tag of `image` is dropped), so a moved tag changes nothing.")
                    .validate(|v| match v.as_str() {
                        Some(s) if render::is_digest(s) => Ok(()),
                        other => Err(format!(
                            "must be an image digest, sha256: followed by 64 lowercase hex digits, got {:?}",
                            other.unwrap_or_default()
                        )),
                    }),
            )
            .attribute(Attribute::number("replicas").default(2).validate(validators::int_between(1, 10)))
            .attribute(
                Attribute::string("log_level")
                    .default("info")
                    .validate(validators::one_of(&["error", "warn", "info", "debug", "trace"])),
            )
            .attribute(
                Attribute::string("namespace")
                    .default(render::DEFAULT_NAMESPACE)
                    .force_new()
                    .validate(|v| {
                        let s = v.as_str().unwrap_or_default();
                        let ok = !s.is_empty()
                            && s.len() <= 63
                            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                            && !s.starts_with('-')
                            && !s.ends_with('-');
                        if ok { Ok(()) } else { Err(format!("must be a DNS-1123 label (a-z, 0-9, '-', at most 63), got {s:?}")) }
                    }),
            )
            .attribute(
                Attribute::string("adopt_karpenter_namespace")
                    .optional()
                    .description("Moving from Karpenter: the namespace its controller runs in. Once its leader Lease lapses (Karpenter scaled to zero), the agent adopts Karpenter's nodes whose NodePool has a joiner NodePool of the same name (or one listing it in `adopts_karpenter_node_pools`) as NodeClaims, without moving a pod; while Karpenter runs it refuses, with an Event and the pool's `KarpenterNodesAdopted` condition. Grants reading that one Lease and releasing Karpenter's NodeClaims.")
                    .validate(|v| {
                        let s = v.as_str().unwrap_or_default();
                        let ok = !s.is_empty()
                            && s.len() <= 63
                            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                            && !s.starts_with('-')
                            && !s.ends_with('-');
                        if ok { Ok(()) } else { Err(format!("must be a namespace name, a DNS-1123 label (a-z, 0-9, '-', at most 63), got {s:?}")) }
                    }),
            )
            .attribute(
                Attribute::string("api")
                    .default("joiner")
                    .description("The API the agent reconciles. `joiner`: joiner's `joiner.dev/v1` kinds, whose CRDs this resource installs. `karpenter`: Karpenter's (`karpenter.sh/v1` NodePools and NodeClaims, `karpenter.sh/v1alpha1` NodeOverlays, `karpenter.k8s.aws/v1` EC2NodeClasses), so existing Karpenter manifests are served unchanged in place of Karpenter's controller; their CRDs stay Karpenter's (its `karpenter-crd` chart) and are not installed here.")
                    .validate(validators::one_of(&["joiner", "karpenter"])),
            )
            .attribute(Attribute::string_map("env").optional().validate(|v| {
                for k in v.as_string_map().keys() {
                    let ok = !k.is_empty()
                        && !k.starts_with(|c: char| c.is_ascii_digit())
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
                    if !ok {
                        return Err(format!("{k:?} is not a valid environment variable name"));
                    }
                }
                Ok(())
            }))
            .attribute(Attribute::string_map("labels").optional())
            .block(NestedBlock::list(
                "toleration",
                Block::new()
                    .attribute(Attribute::string("key").optional())
                    .attribute(Attribute::string("operator").optional().validate(validators::one_of(&["Equal", "Exists"])))
                    .attribute(Attribute::string("value").optional())
                    .attribute(
                        Attribute::string("effect")
                            .optional()
                            .validate(validators::one_of(&["NoSchedule", "PreferNoSchedule", "NoExecute"])),
                    ),
            ))
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(ROLLOUT_TIMEOUT),
            read: None,
            update: Some(ROLLOUT_TIMEOUT),
            delete: Some(DELETE_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        let m = AgentModel::from_value(config);
        if m.api.as_deref() == Some("karpenter") && m.adopt_karpenter_namespace.is_some() {
            d.error_at(
                "adopt_karpenter_namespace",
                "Nothing to adopt",
                "with api = \"karpenter\" the agent serves Karpenter's own NodeClaims, so its nodes are already the agent's; adopt_karpenter_namespace is for moving to joiner's API (api = \"joiner\")",
            );
        }
        if let (Some(image), Some(_)) = (&m.image, &m.image_digest) {
            if image.contains('@') {
                d.error_at(
                    "image_digest",
                    "Two digests for one image",
                    format!("image {image:?} already names a digest; set the digest in image_digest only, and image to REPOSITORY[:TAG]"),
                );
            }
        }
        d
    }

    async fn modify_plan(
        &self,
        _ctx: &ProviderContext,
        plan: &mut Plan,
    ) -> Result<(), Diagnostics> {
        let m = AgentModel::from_value(&plan.planned);
        if let (Some(c), Some(n)) = (&m.cluster_name, &m.namespace) {
            plan.planned
                .set_attr("id", Value::string(format!("{c}:{n}")));
        }
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        write(ctx, change).await
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        write(ctx, change).await
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let mut m = AgentModel::from_value(&req.state);
        let (Some(cluster), Some(ns)) = (m.cluster_name.clone(), m.namespace.clone()) else {
            return Ok(None);
        };
        let Some(kube) = custom::client_unless_gone(&ctx.kube, &cluster).await? else {
            return Ok(None);
        };
        let Some(d) = kube.get(kinds::DEPLOYMENT, Some(&ns), render::NAME).await? else {
            return Ok(None);
        };
        let sa = kube
            .get(kinds::SERVICE_ACCOUNT, Some(&ns), render::NAME)
            .await?;
        read_back(&mut m, &d, sa.as_ref());
        Ok(Some(Applied::new(m.to_value()).with_private(req.private)))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let m = AgentModel::from_value(&change.prior);
        let (Some(cluster), Some(ns)) = (m.cluster_name.clone(), m.namespace.clone()) else {
            return Ok(());
        };
        let Some(kube) = custom::client_unless_gone(&ctx.kube, &cluster).await? else {
            return Ok(());
        };
        // Keep the CRDs while any NodePool or NodeClass exists: deleting a CRD deletes its
        // objects, and with them the finalizers that guard running instances.
        let in_use = !kube.list(kinds::NODE_POOL, None, None).await?.is_empty()
            || !kube.list(kinds::NODE_CLASS, None, None).await?.is_empty();
        for (kind, namespace, obj) in render::objects(&m).into_iter().rev() {
            if kind == kinds::CRD && in_use {
                continue;
            }
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            kube.delete(kind, namespace.as_deref(), &name).await?;
        }
        let deadline = wait::deadline(change.timeout, DELETE_TIMEOUT);
        wait::until(
            &format!("namespace {ns} to be deleted"),
            deadline,
            Duration::from_millis(500),
            &ctx.stop,
            || async {
                Ok(match kube.get(kinds::NAMESPACE, None, &ns).await? {
                    None => Step::Done(()),
                    Some(o) => Step::Pending(format!("phase {}", o["status"]["phase"])),
                })
            },
        )
        .await?;
        Ok(())
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        let (cluster, ns) = custom::split_id(id, "namespace")?;
        let m = AgentModel {
            id: Some(id.into()),
            cluster_name: Some(cluster.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        };
        Ok(Applied::new(m.to_value()))
    }
}

/// The model's view of the live Deployment and ServiceAccount (for drift and import).
fn read_back(m: &mut AgentModel, d: &Json, sa: Option<&Json>) {
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let live = c["image"].as_str().unwrap_or_default();
    match live.split_once('@') {
        // Pinned: the Deployment runs REPOSITORY@DIGEST, and its annotation keeps the
        // configured reference with its tag. Either stands only while the repository is
        // still the one running.
        Some((repository, digest)) => {
            let same_repository = |i: &&str| render::repository(i) == repository;
            let recorded = d["metadata"]["annotations"][render::IMAGE_ANNOTATION].as_str();
            m.image = Some(
                recorded
                    .filter(same_repository)
                    .or(m.image.as_deref().filter(same_repository))
                    .unwrap_or(repository)
                    .to_string(),
            );
            m.image_digest = Some(digest.to_string());
        }
        None => {
            m.image = Some(live.to_string()).filter(|s| !s.is_empty());
            m.image_digest = None;
        }
    }
    m.replicas = d["spec"]["replicas"].as_i64();
    let env: Vec<&Json> = c["env"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let value = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    m.queue_url = value("JOINER_QUEUE_URL");
    m.log_level = value("JOINER_LOG_LEVEL");
    m.adopt_karpenter_namespace = value("JOINER_ADOPT_KARPENTER_NAMESPACE");
    m.api = Some(value("JOINER_API").unwrap_or_else(|| "joiner".into()));
    const OURS: &[&str] = &[
        "JOINER_API",
        "JOINER_CLUSTER_NAME",
        "JOINER_QUEUE_URL",
        "JOINER_LOG_LEVEL",
        "JOINER_ADOPT_KARPENTER_NAMESPACE",
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_IP",
        "JOINER_METRICS_ADDR",
        "JOINER_HEALTH_ADDR",
        "AWS_REGION",
    ];
    m.env = env
        .iter()
        .filter_map(|e| {
            let n = e["name"].as_str()?;
            (!OURS.contains(&n))
                .then(|| (n.to_string(), e["value"].as_str().unwrap_or("").to_string()))
        })
        .collect();
    m.labels = d["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .filter(|(k, _)| *k != "app.kubernetes.io/name")
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    m.tolerations = d["spec"]["template"]["spec"]["tolerations"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| crate::model::agent::TolerationModel {
                    key: t["key"].as_str().map(str::to_string),
                    operator: t["operator"].as_str().map(str::to_string),
                    value: t["value"].as_str().map(str::to_string),
                    effect: t["effect"].as_str().map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    m.role_arn = sa
        .and_then(|s| s["metadata"]["annotations"][render::IRSA_ANNOTATION].as_str())
        .map(str::to_string);
}

async fn write(ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
    let m = AgentModel::from_value(&change.planned);
    let cluster = m.cluster_name.clone().unwrap_or_default();
    let ns = m
        .namespace
        .clone()
        .unwrap_or_else(|| render::DEFAULT_NAMESPACE.into());
    let kube = ctx.kube.client(&cluster).await?;
    let mut rendered = m.clone();
    rendered
        .env
        .entry("AWS_REGION".into())
        .or_insert_with(|| ctx.region.clone());
    let mut applied_generation = 0;
    for (kind, namespace, obj) in render::objects(&rendered) {
        let stored = kube.apply(kind, namespace.as_deref(), &obj).await?;
        if kind == kinds::DEPLOYMENT {
            applied_generation = stored["metadata"]["generation"].as_i64().unwrap_or(0);
        }
    }
    let replicas = m.replicas.unwrap_or(2);
    let deadline = wait::deadline(change.timeout, ROLLOUT_TIMEOUT);
    let rolled = wait::until(
        &format!("Deployment {ns}/{} to roll out", render::NAME),
        deadline,
        Duration::from_millis(500),
        &ctx.stop,
        || rollout(&kube, &ns, replicas, applied_generation),
    )
    .await;
    if let Err(e) = rolled {
        let why = agent_status(&kube, &ns).await;
        let mut d: Diagnostics = Diagnostic::error(
            "joiner agent not ready",
            format!("{e}\n\nWhat the agent's pods say:\n{why}"),
        )
        .into();
        // The objects exist: record them (Terraform taints the resource) rather than lose them.
        let mut partial = change.planned.clone();
        partial.set_attr("id", Value::string(format!("{cluster}:{ns}")));
        d = d.with_partial_state(partial);
        return Err(d);
    }
    let mut state = change.planned;
    state.set_attr("id", Value::string(format!("{cluster}:{ns}")));
    Ok(Applied::new(state))
}

async fn rollout(
    kube: &Kube,
    ns: &str,
    replicas: i64,
    generation: i64,
) -> Result<Step<()>, KubeError> {
    let Some(d) = kube.get(kinds::DEPLOYMENT, Some(ns), render::NAME).await? else {
        return Ok(Step::Pending("Deployment not found yet".into()));
    };
    let s = &d["status"];
    let n = |k: &str| s[k].as_i64().unwrap_or(0);
    let observed = n("observedGeneration");
    let status = format!(
        "{} updated, {} ready, {} available of {replicas} (generation {observed}/{generation})",
        n("updatedReplicas"),
        n("readyReplicas"),
        n("availableReplicas")
    );
    let done = observed >= generation
        && n("updatedReplicas") >= replicas
        && n("readyReplicas") >= replicas
        && n("availableReplicas") >= replicas
        && n("replicas") <= replicas;
    Ok(if done {
        Step::Done(())
    } else {
        Step::Pending(status)
    })
}

/// Pod phases, container states, recent events and the last log lines of the agent's pods.
async fn agent_status(kube: &Kube, ns: &str) -> String {
    let pods = kube
        .list(
            kinds::POD,
            Some(ns),
            Some("app.kubernetes.io/name=joiner-agent"),
        )
        .await
        .unwrap_or_default();
    if pods.is_empty() {
        return "no pods (is a Fargate profile selecting the namespace, or a node available?)"
            .into();
    }
    let events = kube
        .list(kinds::EVENT, Some(ns), None)
        .await
        .unwrap_or_default();
    let mut out = String::new();
    for p in pods.iter().take(3) {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        out.push_str(&format!(
            "- pod {name}: phase {}",
            p["status"]["phase"].as_str().unwrap_or("?")
        ));
        if let Some(cs) = p["status"]["containerStatuses"].as_array() {
            for c in cs {
                out.push_str(&format!(
                    ", container {} ready={} restarts={} state={}",
                    c["name"].as_str().unwrap_or(""),
                    c["ready"],
                    c["restartCount"],
                    c["state"]
                ));
            }
        }
        if let Some(conds) = p["status"]["conditions"].as_array() {
            for c in conds.iter().filter(|c| c["status"] == "False") {
                out.push_str(&format!(
                    "; {}=False {} {}",
                    c["type"].as_str().unwrap_or(""),
                    c["reason"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                ));
            }
        }
        out.push('\n');
        for e in events
            .iter()
            .filter(|e| e["involvedObject"]["name"] == name)
            .rev()
            .take(3)
        {
            out.push_str(&format!(
                "  event {}: {}\n",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            ));
        }
        let log = kube.log_tail(ns, name, LOG_LINES).await;
        if !log.trim().is_empty() {
            out.push_str("  last log lines:\n");
            for l in log.lines() {
                out.push_str(&format!("    {l}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::agent::TolerationModel;
    use crate::model::conforms;

    fn full() -> AgentModel {
        AgentModel {
            id: Some("c:joiner".into()),
            cluster_name: Some("c".into()),
            queue_url: Some("https://q".into()),
            role_arn: Some("arn:aws:iam::1:role/r".into()),
            image: Some("img:1".into()),
            image_digest: None,
            replicas: Some(3),
            log_level: Some("debug".into()),
            namespace: Some("joiner".into()),
            adopt_karpenter_namespace: Some("kube-system".into()),
            api: Some("joiner".into()),
            env: [("A".to_string(), "b".to_string())].into(),
            labels: [("team".to_string(), "x".to_string())].into(),
            tolerations: vec![TolerationModel {
                key: Some("k".into()),
                operator: Some("Exists".into()),
                value: None,
                effect: Some("NoSchedule".into()),
            }],
            timeouts: Value::Null,
        }
    }

    #[test]
    fn model_matches_schema() {
        let r = Agent;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(AgentModel::from_value(&full().to_value()), full());
    }

    /// What the resource writes reads back to the same model (drift detection is exact).
    #[test]
    fn rendered_objects_read_back() {
        let m = full();
        let objs = render::objects(&m);
        let d = &objs.iter().find(|o| o.0 == kinds::DEPLOYMENT).unwrap().2;
        let sa = &objs
            .iter()
            .find(|o| o.0 == kinds::SERVICE_ACCOUNT)
            .unwrap()
            .2;
        let mut back = AgentModel {
            id: m.id.clone(),
            cluster_name: m.cluster_name.clone(),
            namespace: m.namespace.clone(),
            ..Default::default()
        };
        read_back(&mut back, d, Some(sa));
        assert_eq!(back, m);
    }

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// Pinned by digest, the Deployment runs REPOSITORY@DIGEST; reading it back keeps the
    /// configured tag (no drift), and notices a repository or digest changed behind our back.
    #[test]
    fn a_pinned_image_renders_by_digest_and_reads_back() {
        let m = AgentModel {
            image: Some("registry.example:5000/platform/joiner-agent:0.1.0".into()),
            image_digest: Some(DIGEST.into()),
            ..full()
        };
        let objs = render::objects(&m);
        let d = &objs.iter().find(|o| o.0 == kinds::DEPLOYMENT).unwrap().2;
        let sa = &objs
            .iter()
            .find(|o| o.0 == kinds::SERVICE_ACCOUNT)
            .unwrap()
            .2;
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("registry.example:5000/platform/joiner-agent@{DIGEST}")
        );
        assert_eq!(
            d["metadata"]["annotations"][render::IMAGE_ANNOTATION],
            "registry.example:5000/platform/joiner-agent:0.1.0"
        );
        // Import starts from the ID alone.
        let mut back = AgentModel {
            id: m.id.clone(),
            cluster_name: m.cluster_name.clone(),
            namespace: m.namespace.clone(),
            ..Default::default()
        };
        read_back(&mut back, d, Some(sa));
        assert_eq!(back, m);

        let mut moved = d.clone();
        moved["spec"]["template"]["spec"]["containers"][0]["image"] =
            serde_json::json!("other.example/joiner-agent:0.2.0");
        let mut back = m.clone();
        read_back(&mut back, &moved, Some(sa));
        assert_eq!(
            back.image.as_deref(),
            Some("other.example/joiner-agent:0.2.0")
        );
        assert_eq!(back.image_digest, None);
    }

    #[test]
    fn image_digest_is_validated_at_plan_time() {
        use crate::protocol::schema::run_validators;
        let schema = Agent.schema();
        let validate = |config: &Value| {
            let mut d = Diagnostics::new();
            run_validators(&schema.block, config, &AttributePath::root(), &mut d);
            d
        };
        let config = |digest: &str| {
            let mut m = full();
            m.image_digest = Some(digest.into());
            m.to_value()
        };
        for bad in [
            "sha256:0123",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            "sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            let d = validate(&config(bad));
            let text = format!("{d:?}");
            assert!(
                d.has_errors() && text.contains("image_digest"),
                "{bad}: {text}"
            );
        }
        assert!(!validate(&config(DIGEST)).has_errors());

        let mut two = full();
        two.image = Some(format!("img@{DIGEST}"));
        two.image_digest = Some(DIGEST.into());
        let d = Agent.validate(&two.to_value());
        assert!(
            d.has_errors() && format!("{d:?}").contains("image_digest"),
            "{d:?}"
        );
        assert!(!Agent.validate(&config(DIGEST)).has_errors());
    }
}
