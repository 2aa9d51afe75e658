//! `joiner_fargate_profile`: which pods run on Fargate.
//!
//! A groupless cluster needs two: kube-system (CoreDNS) and the agent's namespace, so that
//! the pods that launch nodes never run on the nodes they launch, nor on Spot. EKS cannot
//! change a profile after creation except for its tags, so every other input replaces it.

use std::time::Duration;

use tokio::time::Instant;

use super::cluster::inputs;
use crate::aws::eks::fargate::{self, ProfileInfo, ProfileSpec, Selector};
use crate::aws::eks::wait::PollInterval;
use crate::protocol::prelude::*;
use crate::provider::ProviderContext;

const CREATE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const READ_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// EKS limits: 5 selectors per profile, 5 labels per selector.
const MAX_SELECTORS: i64 = 5;
const MAX_LABELS: usize = 5;

pub struct FargateProfile;

fn poll() -> PollInterval {
    PollInterval::from_env_or(Duration::from_secs(5))
}

fn selectors(v: &Value) -> Vec<Selector> {
    v.get("selector")
        .as_list()
        .unwrap_or_default()
        .iter()
        .map(|s| Selector {
            namespace: s.get("namespace").as_str().unwrap_or_default().to_string(),
            labels: s.get("labels").as_string_map(),
        })
        .collect()
}

fn spec_from(v: &Value) -> ProfileSpec {
    let mut subnets = v.get("subnet_ids").as_string_list();
    subnets.sort();
    ProfileSpec {
        cluster_name: v
            .get("cluster_name")
            .as_str()
            .unwrap_or_default()
            .to_string(),
        profile_name: v.get("name").as_str().unwrap_or_default().to_string(),
        pod_execution_role_arn: v
            .get("pod_execution_role_arn")
            .as_str()
            .unwrap_or_default()
            .to_string(),
        subnet_ids: subnets,
        selectors: selectors(v),
        tags: v.get("tags").as_string_map(),
    }
}

fn id(cluster: &str, profile: &str) -> String {
    format!("{cluster}:{profile}")
}

fn apply_remote(state: &mut Value, info: &ProfileInfo) {
    let s = &info.spec;
    state.set_attr("id", Value::string(id(&s.cluster_name, &s.profile_name)));
    state.set_attr("cluster_name", Value::string(&s.cluster_name));
    state.set_attr("name", Value::string(&s.profile_name));
    state.set_attr(
        "pod_execution_role_arn",
        Value::string(&s.pod_execution_role_arn),
    );
    let mut subnets = s.subnet_ids.clone();
    subnets.sort();
    state.set_attr(
        "subnet_ids",
        Value::Set(subnets.into_iter().map(Value::String).collect()),
    );
    let prior_selectors = state
        .get("selector")
        .as_list()
        .map(<[Value]>::to_vec)
        .unwrap_or_default();
    let selectors = s
        .selectors
        .iter()
        .enumerate()
        .map(|(i, sel)| {
            // An empty label map and an omitted one mean the same; keep what the user wrote.
            let prior_labels = prior_selectors
                .get(i)
                .map(|p| p.get("labels").clone())
                .unwrap_or_default();
            let labels = if sel.labels.is_empty() && prior_labels.is_null() {
                Value::Null
            } else {
                Value::string_map(sel.labels.clone())
            };
            Value::object([
                ("namespace", Value::string(&sel.namespace)),
                ("labels", labels),
            ])
        })
        .collect();
    state.set_attr("selector", Value::List(selectors));
    let tags = if s.tags.is_empty() && state.get("tags").is_null() {
        Value::Null
    } else {
        Value::string_map(s.tags.clone())
    };
    state.set_attr("tags", tags);
    state.set_attr("arn", Value::string(&info.arn));
    state.set_attr("status", Value::string(&info.status));
}

fn validate_labels(v: &Value) -> Result<(), String> {
    if !v.is_fully_known() {
        return Ok(());
    }
    let labels = v.as_string_map();
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "at most {MAX_LABELS} labels per selector (an EKS limit), got {}",
            labels.len()
        ));
    }
    match labels.keys().find(|k| k.is_empty() || k.len() > 317) {
        Some(k) => Err(format!(
            "label key {k:?} is not a valid Kubernetes label key"
        )),
        None => Ok(()),
    }
}

#[async_trait]
impl Resource<ProviderContext> for FargateProfile {
    fn type_name(&self) -> &'static str {
        "joiner_fargate_profile"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description("An EKS Fargate profile: pods matching a selector (namespace plus labels) run on Fargate.")
            .attribute(Attribute::string("id").computed().description("`<cluster_name>:<name>`, also the import ID."))
            .attribute(
                Attribute::string("cluster_name")
                    .required()
                    .force_new()
                    .validate(inputs::cluster_name)
                    .description("The EKS cluster (e.g. `joiner_cluster.x.name`)."),
            )
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(inputs::profile_name)
                    .description("Profile name: 1-100 letters, digits, `-` and `_`."),
            )
            .attribute(
                Attribute::string("pod_execution_role_arn")
                    .required()
                    .force_new()
                    .validate(inputs::role_arn)
                    .description("ARN of the pod execution role (e.g. `joiner_fargate_role.x.arn`)."),
            )
            .attribute(
                Attribute::string_set("subnet_ids")
                    .required()
                    .force_new()
                    .validate(inputs::ec2_ids("subnet-", 1))
                    .description("Private subnets for the pods (Fargate pods get no public IP)."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(inputs::tags)
                    .description("Tags; the only input EKS can change in place."),
            )
            .attribute(Attribute::string("arn").computed().description("Profile ARN."))
            .attribute(Attribute::string("status").computed().description("Profile status (ACTIVE once applied)."))
            .block(
                NestedBlock::list(
                    "selector",
                    Block::new()
                        .description("Pods in `namespace` whose labels include all of `labels` run on Fargate.")
                        .attribute(
                            Attribute::string("namespace")
                                .required()
                                .validate(inputs::namespace)
                                .description("Kubernetes namespace."),
                        )
                        .attribute(
                            Attribute::string_map("labels")
                                .optional()
                                .validate(validate_labels)
                                .description("Labels the pods must carry (at most 5)."),
                        ),
                )
                .min_items(1)
                .max_items(MAX_SELECTORS),
            )
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(CREATE_TIMEOUT),
            read: None,
            update: None,
            delete: Some(DELETE_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        let Some(list) = config.get("selector").as_list() else {
            return d;
        };
        if list.len() as i64 > MAX_SELECTORS {
            d.error_at(
                "selector",
                "Too many selectors",
                format!("a Fargate profile takes at most {MAX_SELECTORS} selectors (an EKS limit), got {}", list.len()),
            );
        }
        d
    }

    async fn modify_plan(
        &self,
        _ctx: &ProviderContext,
        plan: &mut Plan,
    ) -> Result<(), Diagnostics> {
        // Blocks are not covered by the schema's force_new: EKS cannot change selectors.
        if !plan.is_create() && !plan.planned.is_null() && plan.changed("selector") {
            plan.require_replace(AttributePath::new("selector"));
            plan.set_unknown("arn");
            plan.set_unknown("status");
            plan.set_unknown("id");
        }
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(CREATE_TIMEOUT);
        let spec = spec_from(&change.planned);
        let info = fargate::create(&ctx.aws.eks(), &spec, deadline, poll()).await?;
        let mut state = change.planned;
        apply_remote(&mut state, &info);
        Ok(Applied::new(state))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut state = req.state;
        let cluster = state
            .get("cluster_name")
            .as_str()
            .unwrap_or_default()
            .to_string();
        let profile = state.get("name").as_str().unwrap_or_default().to_string();
        match fargate::describe(&ctx.aws.eks(), &cluster, &profile, deadline).await? {
            None => Ok(None),
            Some(info) => {
                apply_remote(&mut state, &info);
                Ok(Some(Applied::new(state).with_private(req.private)))
            }
        }
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(CREATE_TIMEOUT);
        let arn = change
            .prior
            .get("arn")
            .as_str()
            .unwrap_or_default()
            .to_string();
        let have = change.prior.get("tags").as_string_map();
        let want = change.planned.get("tags").as_string_map();
        fargate::sync_tags(&ctx.aws.eks(), &arn, &have, &want, deadline).await?;
        Ok(Applied::new(change.planned))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(DELETE_TIMEOUT);
        let cluster = change
            .prior
            .get("cluster_name")
            .as_str()
            .unwrap_or_default()
            .to_string();
        let profile = change
            .prior
            .get("name")
            .as_str()
            .unwrap_or_default()
            .to_string();
        fargate::delete(&ctx.aws.eks(), &cluster, &profile, deadline, poll()).await?;
        Ok(())
    }

    async fn import(
        &self,
        _ctx: &ProviderContext,
        import_id: &str,
    ) -> Result<Applied, Diagnostics> {
        let Some((cluster, profile)) = import_id.split_once(':') else {
            return Err(Diagnostic::error(
                "Invalid import ID",
                format!("expected <cluster_name>:<profile_name>, e.g. prod:kube-system; got {import_id:?}"),
            )
            .into());
        };
        for (what, v) in [("cluster name", cluster), ("profile name", profile)] {
            inputs::cluster_name(&Value::string(v)).map_err(|e| {
                Diagnostic::error(
                    "Invalid import ID",
                    format!("the {what} in {import_id:?} {e}"),
                )
            })?;
        }
        Ok(Applied::new(Value::object([
            ("id", Value::string(id(cluster, profile))),
            ("cluster_name", Value::string(cluster)),
            ("name", Value::string(profile)),
        ])))
    }
}
