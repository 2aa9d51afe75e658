//! `joiner_cluster`: an EKS control plane for a cluster with no node groups.
//!
//! Besides CreateCluster it owns the two things such a cluster cannot live without and that
//! people otherwise glue on by hand:
//! - the IAM OIDC provider for the cluster's issuer (IRSA), on by default, because Fargate
//!   pods (and so the agent) can only get AWS credentials through IRSA;
//! - the `coredns` add-on with `computeType: Fargate`, so DNS runs on Fargate without the
//!   usual Lambda or `kubectl patch`.
//!
//! What EKS can change in place (version, log types, endpoint access, tags, the OIDC
//! provider, the add-on) is updated in place; the rest (name, role, subnets, security
//! groups, encryption key) is `force_new` and the plan shows the replacement.

pub mod inputs;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::aws::eks::cluster::{self as eks_cluster, ClusterInfo, ClusterSpec};
use crate::aws::eks::wait::PollInterval;
use crate::aws::eks::{addon, oidc, EksError};
use crate::protocol::prelude::*;
use crate::provider::ProviderContext;

/// The tag the agent and the discovery data sources look for.
pub const DISCOVERY_TAG: &str = "joiner.dev/discovery";

const CREATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const UPDATE_TIMEOUT: Duration = Duration::from_secs(60 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const READ_TIMEOUT: Duration = Duration::from_secs(5 * 60);

pub struct Cluster;

impl From<EksError> for Diagnostic {
    fn from(e: EksError) -> Diagnostic {
        match e {
            EksError::Aws(e) => e.into(),
            EksError::Timeout { .. } => {
                Diagnostic::error("Timed out waiting for EKS", e.to_string())
            }
            EksError::Failed { .. } => Diagnostic::error("EKS reported a failure", e.to_string()),
        }
    }
}

fn poll() -> PollInterval {
    PollInterval::from_env_or(Duration::from_secs(10))
}

fn deadline(timeout: Option<Duration>, default: Duration) -> Instant {
    Instant::now() + timeout.unwrap_or(default)
}

/// Runs a long wait but gives up when Terraform asks the provider to stop (Ctrl-C).
async fn unless_stopped<T>(
    ctx: &ProviderContext,
    what: &str,
    fut: impl Future<Output = Result<T, EksError>>,
) -> Result<T, Diagnostics> {
    tokio::select! {
        r = fut => r.map_err(Diagnostics::from),
        _ = ctx.stop.stopped() => Err(Diagnostic::error(
            "Interrupted",
            format!("Terraform asked the provider to stop while {what}; the EKS operation continues on AWS"),
        ).into()),
    }
}

fn string_set(v: &Value) -> BTreeSet<String> {
    v.as_string_list().into_iter().collect()
}

fn set_value<I: IntoIterator<Item = String>>(items: I) -> Value {
    let sorted: BTreeSet<String> = items.into_iter().collect();
    Value::Set(sorted.into_iter().map(Value::String).collect())
}

/// `tags` plus the discovery tag: what the cluster really carries on AWS.
fn all_tags(v: &Value) -> Option<BTreeMap<String, String>> {
    let tags = v.get("tags");
    let name = v.get("name");
    let discovery = v.get("discovery_tag_value");
    if !tags.is_fully_known() || name.is_unknown() || discovery.is_unknown() {
        return None;
    }
    let mut all = tags.as_string_map();
    let value = discovery.as_str().or(name.as_str()).unwrap_or_default();
    if !value.is_empty() {
        all.entry(DISCOVERY_TAG.to_string())
            .or_insert_with(|| value.to_string());
    }
    Some(all)
}

fn spec_from(v: &Value) -> ClusterSpec {
    ClusterSpec {
        name: v.get("name").as_str().unwrap_or_default().to_string(),
        version: v.get("version").as_str().map(str::to_string),
        role_arn: v.get("role_arn").as_str().unwrap_or_default().to_string(),
        subnet_ids: string_set(v.get("subnet_ids")).into_iter().collect(),
        security_group_ids: string_set(v.get("security_group_ids"))
            .into_iter()
            .collect(),
        endpoint_public_access: v.get("endpoint_public_access").as_bool().unwrap_or(true),
        endpoint_private_access: v.get("endpoint_private_access").as_bool().unwrap_or(true),
        public_access_cidrs: string_set(v.get("public_access_cidrs"))
            .into_iter()
            .collect(),
        kms_key_arn: v.get("kms_key_arn").as_str().map(str::to_string),
        log_types: string_set(v.get("enabled_log_types")),
        tags: all_tags(v).unwrap_or_default(),
    }
}

fn thumbprints(v: &Value) -> Vec<String> {
    match v.get("oidc_thumbprints") {
        Value::Null => vec![oidc::EKS_OIDC_ROOT_CA_THUMBPRINT.to_string()],
        t => t.as_string_list(),
    }
}

/// Writes what EKS reports into `state`, keeping the inputs EKS cannot tell us.
fn apply_remote(state: &mut Value, info: &ClusterInfo) {
    state.set_attr("id", Value::string(&info.name));
    state.set_attr("name", Value::string(&info.name));
    state.set_attr("arn", Value::string(&info.arn));
    state.set_attr("status", Value::string(&info.status));
    state.set_attr("version", Value::opt_string(info.version.clone()));
    state.set_attr(
        "platform_version",
        Value::opt_string(info.platform_version.clone()),
    );
    state.set_attr("endpoint", Value::opt_string(info.endpoint.clone()));
    state.set_attr(
        "certificate_authority",
        Value::opt_string(info.certificate_authority.clone()),
    );
    state.set_attr("oidc_issuer", Value::opt_string(info.oidc_issuer.clone()));
    state.set_attr(
        "cluster_security_group_id",
        Value::opt_string(info.cluster_security_group_id.clone()),
    );
    state.set_attr("vpc_id", Value::opt_string(info.vpc_id.clone()));
    if let Some(role) = &info.role_arn {
        state.set_attr("role_arn", Value::string(role));
    }
    state.set_attr("subnet_ids", set_value(info.subnet_ids.clone()));
    state.set_attr(
        "security_group_ids",
        set_value(info.security_group_ids.clone()),
    );
    if let Some(public) = info.endpoint_public_access {
        state.set_attr("endpoint_public_access", Value::Bool(public));
        // EKS keeps reporting CIDRs for a private-only endpoint, where they mean nothing:
        // only a public endpoint's CIDRs are compared.
        if public {
            state.set_attr(
                "public_access_cidrs",
                set_value(info.public_access_cidrs.clone()),
            );
        }
    }
    if state.get("public_access_cidrs").is_null() {
        state.set_attr("public_access_cidrs", set_value(["0.0.0.0/0".to_string()]));
    }
    if let Some(private) = info.endpoint_private_access {
        state.set_attr("endpoint_private_access", Value::Bool(private));
    }
    state.set_attr("kms_key_arn", Value::opt_string(info.kms_key_arn.clone()));
    state.set_attr("enabled_log_types", set_value(info.log_types.clone()));

    // `tags` is what the user wrote: the remote tags minus the discovery tag we add.
    let user_has_discovery_key = state
        .get("tags")
        .as_string_map()
        .contains_key(DISCOVERY_TAG);
    let mut user_tags = info.tags.clone();
    if !user_has_discovery_key {
        user_tags.remove(DISCOVERY_TAG);
    }
    let tags = if user_tags.is_empty() && state.get("tags").is_null() {
        Value::Null
    } else {
        Value::string_map(user_tags)
    };
    state.set_attr("tags", tags);
    state.set_attr("tags_all", Value::string_map(info.tags.clone()));
}

/// Fills the inputs EKS does not report with their defaults (after import).
fn fill_local_defaults(state: &mut Value) {
    if state.get("enable_irsa").is_null() {
        let on = !state.get("oidc_provider_arn").is_null();
        state.set_attr("enable_irsa", Value::Bool(on));
    }
    if state.get("coredns_on_fargate").is_null() {
        state.set_attr("coredns_on_fargate", Value::Bool(true));
    }
    if state.get("oidc_thumbprints").is_null() {
        state.set_attr(
            "oidc_thumbprints",
            Value::List(vec![Value::string(oidc::EKS_OIDC_ROOT_CA_THUMBPRINT)]),
        );
    }
}

fn addon_warning(outcome: &addon::AddonOutcome, cluster: &str) -> Option<Diagnostic> {
    outcome
        .warning(cluster)
        .map(|(summary, detail)| Diagnostic::warning_at("coredns_on_fargate", summary, detail))
}

#[async_trait]
impl Resource<ProviderContext> for Cluster {
    fn type_name(&self) -> &'static str {
        "joiner_cluster"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description(
                "An EKS control plane for a cluster with no node groups: IRSA's OIDC provider and \
                 CoreDNS on Fargate included.",
            )
            .attribute(Attribute::string("id").computed().description("The cluster name."))
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(inputs::cluster_name)
                    .description("Cluster name: 1-100 letters, digits, `-` and `_`, starting with a letter or digit."),
            )
            .attribute(
                Attribute::string("version")
                    .optional_computed()
                    .validate(inputs::kubernetes_version)
                    .description(
                        "Kubernetes minor version, e.g. \"1.31\". Changing it upgrades in place, one minor \
                         version at a time. Defaults to EKS's current default.",
                    ),
            )
            .attribute(
                Attribute::string("role_arn")
                    .required()
                    .force_new()
                    .validate(inputs::role_arn)
                    .description("ARN of the cluster IAM role (e.g. `joiner_cluster_role.x.arn`)."),
            )
            .attribute(
                Attribute::string_set("subnet_ids")
                    .required()
                    .force_new()
                    .validate(inputs::ec2_ids("subnet-", 2))
                    .description("Subnets for the control plane's network interfaces, in at least two AZs."),
            )
            .attribute(
                Attribute::string_set("security_group_ids")
                    .default(Value::Set(vec![]))
                    .force_new()
                    .validate(inputs::ec2_ids("sg-", 0))
                    .description("Additional security groups for the control plane's network interfaces."),
            )
            .attribute(
                Attribute::bool("endpoint_public_access")
                    .default(true)
                    .description("Whether the API server endpoint is reachable from the internet."),
            )
            .attribute(
                Attribute::bool("endpoint_private_access")
                    .default(true)
                    .description("Whether the API server endpoint is reachable from inside the VPC (nodes use it)."),
            )
            .attribute(
                Attribute::string_set("public_access_cidrs")
                    .default(Value::Set(vec![Value::string("0.0.0.0/0")]))
                    .validate(inputs::cidrs)
                    .description("IPv4 CIDR blocks allowed to reach the public endpoint."),
            )
            .attribute(
                Attribute::string("kms_key_arn")
                    .optional()
                    .force_new()
                    .validate(inputs::kms_key_arn)
                    .description("KMS key for envelope encryption of Kubernetes secrets. Cannot be changed later."),
            )
            .attribute(
                Attribute::string_set("enabled_log_types")
                    .default(Value::Set(vec![]))
                    .validate(inputs::log_types)
                    .description("Control-plane logs sent to CloudWatch: api, audit, authenticator, controllerManager, scheduler."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(inputs::tags)
                    .description("Tags for the cluster. The discovery tag is added to them (see `tags_all`)."),
            )
            .attribute(
                Attribute::string("discovery_tag_value")
                    .optional()
                    .description(
                        "Value of the `joiner.dev/discovery` tag put on the cluster; defaults to the cluster \
                         name. An empty string leaves the tag off.",
                    ),
            )
            .attribute(
                Attribute::string_map("tags_all")
                    .computed()
                    .description("All tags on the cluster, the discovery tag included."),
            )
            .attribute(
                Attribute::bool("enable_irsa")
                    .default(true)
                    .description("Create the IAM OIDC provider for the cluster's issuer (IRSA). Fargate pods need it for AWS credentials."),
            )
            .attribute(
                Attribute::string_list("oidc_thumbprints")
                    .default(Value::List(vec![Value::string(oidc::EKS_OIDC_ROOT_CA_THUMBPRINT)]))
                    .description("Server certificate thumbprints for the OIDC provider. IAM validates EKS issuers against its own trusted CAs, so the default rarely needs changing."),
            )
            .attribute(
                Attribute::bool("coredns_on_fargate")
                    .default(true)
                    .description("Manage the `coredns` add-on with `computeType: Fargate`, so DNS runs on Fargate without patching."),
            )
            .attribute(Attribute::string("arn").computed().description("Cluster ARN."))
            .attribute(Attribute::string("status").computed().description("Cluster status (ACTIVE once applied)."))
            .attribute(Attribute::string("endpoint").computed().description("Kubernetes API server URL."))
            .attribute(
                Attribute::string("certificate_authority")
                    .computed()
                    .description("Base64 PEM of the cluster CA, as kubeconfig's certificate-authority-data wants it. Public data, so not marked sensitive."),
            )
            .attribute(Attribute::string("oidc_issuer").computed().description("The cluster's OIDC issuer URL."))
            .attribute(
                Attribute::string("oidc_provider_arn")
                    .computed()
                    .description("ARN of the IAM OIDC provider for IRSA trust policies (null when `enable_irsa = false`)."),
            )
            .attribute(
                Attribute::string("cluster_security_group_id")
                    .computed()
                    .description("The security group EKS creates for the control plane and managed workloads."),
            )
            .attribute(Attribute::string("vpc_id").computed().description("VPC of the cluster's subnets."))
            .attribute(Attribute::string("platform_version").computed().description("EKS platform version, e.g. \"eks.3\"."))
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(CREATE_TIMEOUT),
            read: None,
            update: Some(UPDATE_TIMEOUT),
            delete: Some(DELETE_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        let public = config.get("endpoint_public_access").as_bool();
        let private = config.get("endpoint_private_access").as_bool();
        if public == Some(false) && private == Some(false) {
            d.error_at(
                "endpoint_private_access",
                "No way to reach the API server",
                "endpoint_public_access and endpoint_private_access cannot both be false; keep the private endpoint so nodes can join",
            );
        }
        if public == Some(false) && !config.get("public_access_cidrs").is_null() {
            d.error_at(
                "public_access_cidrs",
                "CIDRs without a public endpoint",
                "public_access_cidrs only applies when endpoint_public_access = true",
            );
        }
        if config.get("enable_irsa").as_bool() == Some(false)
            && !config.get("oidc_thumbprints").is_null()
        {
            d.push(Diagnostic::warning_at(
                "oidc_thumbprints",
                "Thumbprints without IRSA",
                "oidc_thumbprints is ignored when enable_irsa = false",
            ));
        }
        d
    }

    async fn modify_plan(
        &self,
        _ctx: &ProviderContext,
        plan: &mut Plan,
    ) -> Result<(), Diagnostics> {
        if plan.planned.is_null() {
            return Ok(());
        }
        let replacing = plan.is_create() || plan.is_replace();

        // Version: in place, forward only, one minor at a time (EKS's rules).
        if !replacing && plan.changed("version") {
            if let (Some(old), Some(new)) = (
                plan.prior.get("version").as_str(),
                plan.planned.get("version").as_str(),
            ) {
                if let (Some(o), Some(n)) = (inputs::parse_version(old), inputs::parse_version(new))
                {
                    if n < o {
                        return Err(Diagnostic::error_at(
                            "version",
                            "EKS cannot downgrade Kubernetes",
                            format!("the cluster runs {old}; {new} is older. Replace the cluster (change its name) to go back."),
                        )
                        .into());
                    }
                    if n.0 == o.0 && n.1 > o.1 + 1 {
                        return Err(Diagnostic::error_at(
                            "version",
                            "EKS upgrades one minor version at a time",
                            format!(
                                "the cluster runs {old}; upgrade to {}.{} first, then to {new}",
                                o.0,
                                o.1 + 1
                            ),
                        )
                        .into());
                    }
                }
            }
            plan.set_unknown("platform_version");
            plan.set_unknown("status");
        }

        // The discovery tag is part of the plan, so reviewers see it.
        let tags_all = all_tags(&plan.planned)
            .map(Value::string_map)
            .unwrap_or(Value::Unknown);
        plan.planned.set_attr("tags_all", tags_all);

        let irsa = plan.planned.get("enable_irsa").as_bool();
        let arn = if irsa == Some(false) {
            Value::Null
        } else if replacing
            || plan.prior.get("oidc_provider_arn").is_null()
            || plan.changed("oidc_thumbprints")
        {
            Value::Unknown
        } else {
            plan.prior.get("oidc_provider_arn").clone()
        };
        plan.planned.set_attr("oidc_provider_arn", arn);
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout, CREATE_TIMEOUT);
        let planned = change.planned;
        let spec = spec_from(&planned);
        let eks = ctx.aws.eks();
        eks_cluster::create(&eks, &spec, deadline).await?;
        tracing::info!(cluster = %spec.name, "CreateCluster accepted; waiting for ACTIVE");

        let mut state = planned.clone();
        state.set_attr("oidc_provider_arn", Value::Null);
        let waited = unless_stopped(
            ctx,
            "waiting for the cluster to become ACTIVE",
            eks_cluster::wait_active(&eks, &spec.name, deadline, poll()),
        )
        .await;
        let info = match waited {
            Ok(info) => info,
            Err(d) => {
                // The cluster exists: keep it in state (tainted) rather than orphan it.
                state.set_attr("id", Value::string(&spec.name));
                for k in [
                    "arn",
                    "status",
                    "endpoint",
                    "certificate_authority",
                    "oidc_issuer",
                    "cluster_security_group_id",
                    "vpc_id",
                    "platform_version",
                    "tags_all",
                ] {
                    if state.get(k).is_unknown() {
                        state.set_attr(k, Value::Null);
                    }
                }
                if state.get("version").is_unknown() {
                    state.set_attr("version", Value::Null);
                }
                return Err(d.with_partial_state(state));
            }
        };
        apply_remote(&mut state, &info);

        let mut warnings = Vec::new();
        if planned.get("enable_irsa").as_bool() == Some(true) {
            let issuer = info.oidc_issuer.clone().unwrap_or_default();
            match oidc::ensure_provider(
                &ctx.aws.iam(),
                &issuer,
                &thumbprints(&planned),
                &spec.tags,
                deadline,
            )
            .await
            {
                Ok(arn) => state.set_attr("oidc_provider_arn", Value::string(arn)),
                Err(e) => return Err(Diagnostics::from(e).with_partial_state(state)),
            }
        }
        if planned.get("coredns_on_fargate").as_bool() == Some(true) {
            match addon::ensure_coredns_on_fargate(&eks, &spec.name, deadline).await {
                Ok(outcome) => warnings.extend(addon_warning(&outcome, &spec.name)),
                Err(e) => return Err(Diagnostics::from(e).with_partial_state(state)),
            }
        }
        let mut applied = Applied::new(state);
        for w in warnings {
            applied = applied.with_warning(w);
        }
        Ok(applied)
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut state = req.state;
        let name = state.get("name").as_str().unwrap_or_default().to_string();
        let Some(info) = eks_cluster::describe(&ctx.aws.eks(), &name, deadline).await? else {
            return Ok(None);
        };
        apply_remote(&mut state, &info);
        // The OIDC provider: deleted out of band → null, and the next plan recreates it.
        let iam = ctx.aws.iam();
        match state.get("oidc_provider_arn").as_str().map(str::to_string) {
            Some(arn) => {
                if !oidc::exists(&iam, &arn, deadline).await? {
                    state.set_attr("oidc_provider_arn", Value::Null);
                }
            }
            None if state.get("enable_irsa").is_null() => {
                // Import: adopt the provider registered for this issuer, if any.
                if let Some(issuer) = &info.oidc_issuer {
                    let found = oidc::find_provider(&iam, issuer, deadline).await?;
                    state.set_attr("oidc_provider_arn", Value::opt_string(found));
                }
            }
            None => state.set_attr("oidc_provider_arn", Value::Null),
        }
        fill_local_defaults(&mut state);
        Ok(Some(Applied::new(state).with_private(req.private)))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout, UPDATE_TIMEOUT);
        let (prior, planned) = (&change.prior, &change.planned);
        let name = planned.get("name").as_str().unwrap_or_default().to_string();
        let eks = ctx.aws.eks();
        let mut state = prior.clone();
        let progress = |d: Diagnostics, state: &Value| d.with_partial_state(state.clone());

        if planned.get("version") != prior.get("version") {
            if let Some(v) = planned.get("version").as_str() {
                let info = unless_stopped(
                    ctx,
                    "upgrading the cluster",
                    eks_cluster::update_version(&eks, &name, v, deadline, poll()),
                )
                .await
                .map_err(|d| progress(d, &state))?;
                apply_remote(&mut state, &info);
            }
        }
        if planned.get("enabled_log_types") != prior.get("enabled_log_types") {
            let types = string_set(planned.get("enabled_log_types"));
            let info = unless_stopped(
                ctx,
                "updating control-plane logging",
                eks_cluster::update_logging(&eks, &name, &types, deadline, poll()),
            )
            .await
            .map_err(|d| progress(d, &state))?;
            apply_remote(&mut state, &info);
        }
        let access = [
            "endpoint_public_access",
            "endpoint_private_access",
            "public_access_cidrs",
        ];
        if access.iter().any(|a| planned.get(a) != prior.get(a)) {
            let spec = spec_from(planned);
            let info = unless_stopped(
                ctx,
                "updating endpoint access",
                eks_cluster::update_endpoint_access(&eks, &spec, deadline, poll()),
            )
            .await
            .map_err(|d| progress(d, &state))?;
            apply_remote(&mut state, &info);
            // Keep the configured CIDRs when the public endpoint is off (see apply_remote).
            state.set_attr(
                "public_access_cidrs",
                planned.get("public_access_cidrs").clone(),
            );
        }
        let want_tags = all_tags(planned).unwrap_or_default();
        let have_tags = prior.get("tags_all").as_string_map();
        if want_tags != have_tags {
            let arn = prior.get("arn").as_str().unwrap_or_default().to_string();
            eks_cluster::sync_tags(&eks, &arn, &have_tags, &want_tags, deadline)
                .await
                .map_err(|e| progress(e.into(), &state))?;
        }

        // IRSA's OIDC provider.
        let iam = ctx.aws.iam();
        let irsa = planned.get("enable_irsa").as_bool() == Some(true);
        let prior_arn = prior.get("oidc_provider_arn").as_str().map(str::to_string);
        if irsa
            && (prior_arn.is_none()
                || planned.get("oidc_thumbprints") != prior.get("oidc_thumbprints"))
        {
            let issuer = prior
                .get("oidc_issuer")
                .as_str()
                .unwrap_or_default()
                .to_string();
            let arn =
                oidc::ensure_provider(&iam, &issuer, &thumbprints(planned), &want_tags, deadline)
                    .await
                    .map_err(|e| progress(e.into(), &state))?;
            state.set_attr("oidc_provider_arn", Value::string(arn));
        } else if !irsa {
            if let Some(arn) = prior_arn {
                oidc::delete(&iam, &arn, deadline)
                    .await
                    .map_err(|e| progress(e.into(), &state))?;
            }
            state.set_attr("oidc_provider_arn", Value::Null);
        }

        // CoreDNS on Fargate.
        let mut warning = None;
        let coredns = planned.get("coredns_on_fargate").as_bool() == Some(true);
        if planned.get("coredns_on_fargate") != prior.get("coredns_on_fargate") {
            let outcome = if coredns {
                addon::ensure_coredns_on_fargate(&eks, &name, deadline).await
            } else {
                addon::release_coredns(&eks, &name, deadline).await
            }
            .map_err(|e| progress(e.into(), &state))?;
            warning = addon_warning(&outcome, &name);
        }

        // Settle on what AWS reports now, with the planned local inputs.
        let info = eks_cluster::describe(&eks, &name, deadline)
            .await?
            .ok_or_else(|| {
                Diagnostic::error(
                    "Cluster disappeared",
                    format!("EKS cluster {name:?} vanished during the update"),
                )
            })?;
        let oidc_arn = state.get("oidc_provider_arn").clone();
        let mut state = planned.clone();
        apply_remote(&mut state, &info);
        state.set_attr(
            "public_access_cidrs",
            planned.get("public_access_cidrs").clone(),
        );
        state.set_attr("oidc_provider_arn", oidc_arn);
        let mut applied = Applied::new(state);
        if let Some(w) = warning {
            applied = applied.with_warning(w);
        }
        Ok(applied)
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = deadline(change.timeout, DELETE_TIMEOUT);
        let prior = change.prior;
        let name = prior.get("name").as_str().unwrap_or_default().to_string();
        if let Some(arn) = prior.get("oidc_provider_arn").as_str() {
            oidc::delete(&ctx.aws.iam(), arn, deadline).await?;
        }
        // The add-on goes with the cluster.
        unless_stopped(
            ctx,
            "deleting the cluster",
            eks_cluster::delete(&ctx.aws.eks(), &name, deadline, poll()),
        )
        .await
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        inputs::cluster_name(&Value::string(id)).map_err(|e| {
            Diagnostic::error(
                "Invalid import ID",
                format!("expected the EKS cluster name: {e}"),
            )
        })?;
        Ok(Applied::new(Value::object([
            ("id", Value::string(id)),
            ("name", Value::string(id)),
        ])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_tag_defaults_to_the_name_and_can_be_turned_off() {
        let v = Value::object([
            ("name", Value::string("prod")),
            ("tags", Value::string_map([("team", "platform")])),
        ]);
        let all = all_tags(&v).unwrap();
        assert_eq!(all.get(DISCOVERY_TAG).map(String::as_str), Some("prod"));
        assert_eq!(all.get("team").map(String::as_str), Some("platform"));
        let mut off = v.clone();
        off.set_attr("discovery_tag_value", Value::string(""));
        assert!(!all_tags(&off).unwrap().contains_key(DISCOVERY_TAG));
        let mut unknown = v;
        unknown.set_attr("tags", Value::Unknown);
        assert!(all_tags(&unknown).is_none());
    }
}
