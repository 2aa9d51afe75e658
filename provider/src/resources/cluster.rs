//! `joiner_cluster`: an EKS control plane for a cluster with no node groups.
//!
//! Besides CreateCluster it owns the IAM OIDC provider for the cluster's issuer (IRSA), on
//! by default, because Fargate pods (and so the agent) can only get AWS credentials
//! through IRSA.
//!
//! Nodes may join it by default: the cluster is created with an authentication mode that
//! honours access entries (`API_AND_CONFIG_MAP`), so that `joiner_access_entry` (and the
//! groupless-eks module's entry for the node role) can authorize them without an
//! `aws-auth` ConfigMap. The identity that applies gets no implicit admin entry
//! (`bootstrap_cluster_creator_admin_permissions = false`): cluster access is granted by
//! entries the configuration shows.
//!
//! CoreDNS on Fargate is switched by the kube-system `joiner_fargate_profile`, which must
//! exist first; `coredns_on_fargate` here is deprecated and ignored.
//!
//! The version, when set, is checked at plan time against EKS's version calendar (see
//! [`versions`]); unset, it is EKS's default, read back after creation.
//!
//! What EKS can change in place (version, log types, endpoint access, the authentication
//! mode forward, tags, the OIDC provider) is updated in place; the rest (name,
//! role, subnets, security groups, encryption key, bootstrap admin) is `force_new` and the
//! plan shows the replacement.

pub mod versions;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::aws::eks::cluster::{self as eks_cluster, ClusterInfo, ClusterSpec};
use crate::aws::eks::wait::PollInterval;
use crate::aws::eks::{oidc, EksError};
use crate::context::ProviderContext;
use crate::model::cluster::ClusterModel;
use crate::model::Model;
use crate::protocol::prelude::*;
use crate::validators;

/// The mode a new cluster gets: access entries work, and an existing `aws-auth` mapping
/// keeps working.
pub const DEFAULT_AUTHENTICATION_MODE: &str = "API_AND_CONFIG_MAP";

/// The tag the agent and the discovery data sources look for.
pub const DISCOVERY_TAG: &str = "joiner.dev/discovery";

const CREATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const UPDATE_TIMEOUT: Duration = Duration::from_secs(60 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const READ_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Reading EKS's version calendar at plan time (retried on throttling until then).
const CALENDAR_TIMEOUT: Duration = Duration::from_secs(60);

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

/// `tags` plus the discovery tag: what the cluster really carries on AWS.
fn all_tags(m: &ClusterModel) -> BTreeMap<String, String> {
    let mut all = (*m.tags).clone().unwrap_or_default();
    let value = m
        .discovery_tag_value
        .as_deref()
        .or(m.name.as_deref())
        .unwrap_or_default();
    if !value.is_empty() {
        all.entry(DISCOVERY_TAG.to_string())
            .or_insert_with(|| value.to_string());
    }
    all
}

/// [`all_tags`] of a planned value, `None` while one of its inputs is unknown.
fn planned_tags(planned: &Value) -> Option<BTreeMap<String, String>> {
    let m = ClusterModel::from_value(planned);
    m.tag_inputs_known().then(|| all_tags(&m))
}

fn spec_from(m: &ClusterModel) -> ClusterSpec {
    let strings =
        |s: &Option<BTreeSet<String>>| -> Vec<String> { s.iter().flatten().cloned().collect() };
    ClusterSpec {
        name: m.name_or_default(),
        version: m.version.clone(),
        role_arn: m.role_arn.clone().unwrap_or_default(),
        subnet_ids: strings(&m.subnet_ids),
        security_group_ids: strings(&m.security_group_ids),
        endpoint_public_access: m.endpoint_public_access.unwrap_or(true),
        endpoint_private_access: m.endpoint_private_access.unwrap_or(true),
        public_access_cidrs: strings(&m.public_access_cidrs),
        kms_key_arn: m.kms_key_arn.clone(),
        log_types: m.enabled_log_types.clone().unwrap_or_default(),
        tags: all_tags(m),
        authentication_mode: m.authentication_mode.clone(),
        bootstrap_creator_admin: *m.bootstrap_cluster_creator_admin_permissions,
    }
}

fn thumbprints(m: &ClusterModel) -> Vec<String> {
    (*m.oidc_thumbprints)
        .clone()
        .unwrap_or_else(|| vec![oidc::EKS_OIDC_ROOT_CA_THUMBPRINT.to_string()])
}

fn set_of(items: &[String]) -> Option<BTreeSet<String>> {
    Some(items.iter().cloned().collect())
}

/// Writes what EKS reports into `state`, keeping the inputs EKS cannot tell us.
fn apply_remote(state: &mut ClusterModel, info: &ClusterInfo) {
    state.id = Some(info.name.clone());
    state.name = Some(info.name.clone()).into();
    state.arn = Some(info.arn.clone());
    state.status = Some(info.status.clone());
    state.version = info.version.clone();
    state.platform_version = info.platform_version.clone();
    state.endpoint = info.endpoint.clone();
    state.certificate_authority = info.certificate_authority.clone();
    state.oidc_issuer = info.oidc_issuer.clone();
    state.cluster_security_group_id = info.cluster_security_group_id.clone();
    state.vpc_id = info.vpc_id.clone();
    if let Some(role) = &info.role_arn {
        state.role_arn = Some(role.clone());
    }
    state.subnet_ids = set_of(&info.subnet_ids);
    state.security_group_ids = set_of(&info.security_group_ids);
    if let Some(public) = info.endpoint_public_access {
        state.endpoint_public_access = Some(public);
        // EKS keeps reporting CIDRs for a private-only endpoint, where they mean nothing:
        // only a public endpoint's CIDRs are compared.
        if public {
            state.public_access_cidrs = set_of(&info.public_access_cidrs).into();
        }
    }
    if state.public_access_cidrs.is_none() {
        state.public_access_cidrs = set_of(&["0.0.0.0/0".to_string()]).into();
    }
    if let Some(private) = info.endpoint_private_access {
        state.endpoint_private_access = Some(private);
    }
    state.kms_key_arn = info.kms_key_arn.clone();
    state.enabled_log_types = Some(info.log_types.iter().cloned().collect());
    // EKS reports the access configuration of every cluster; one that predates access
    // entries reads as EKS's defaults.
    state.authentication_mode = Some(
        info.authentication_mode
            .clone()
            .unwrap_or_else(|| "CONFIG_MAP".to_string()),
    );
    if let Some(b) = info.bootstrap_creator_admin {
        state.bootstrap_cluster_creator_admin_permissions = Some(b).into();
    }

    // `tags` is what the user wrote: the remote tags minus the discovery tag we add.
    let user_has_discovery_key = state
        .tags
        .as_ref()
        .is_some_and(|t| t.contains_key(DISCOVERY_TAG));
    let mut user_tags = info.tags.clone();
    if !user_has_discovery_key {
        user_tags.remove(DISCOVERY_TAG);
    }
    state.tags = if user_tags.is_empty() && state.tags.is_none() {
        None.into()
    } else {
        Some(user_tags).into()
    };
    state.tags_all = Some(info.tags.clone());
}

/// Fills the inputs EKS does not report with their defaults (after import).
fn fill_local_defaults(state: &mut ClusterModel) {
    if state.enable_irsa.is_none() {
        state.enable_irsa = Some(state.oidc_provider_arn.is_some());
    }
    if state.oidc_thumbprints.is_none() {
        state.oidc_thumbprints = Some(vec![oidc::EKS_OIDC_ROOT_CA_THUMBPRINT.to_string()]).into();
    }
    // EKS's own default when it does not say (it only matters at creation).
    if state.bootstrap_cluster_creator_admin_permissions.is_none() {
        state.bootstrap_cluster_creator_admin_permissions = Some(true).into();
    }
}

/// Reads EKS's version calendar and adds what it says about `version` to the plan (see
/// [`versions::diagnostic`]): a warning, or an error when `sent` and EKS would refuse it. A
/// calendar that cannot be read (no `eks:DescribeClusterVersions` permission, say) leaves
/// the check to EKS at apply time, with a warning that it did so.
async fn check_version(
    ctx: &ProviderContext,
    plan: &mut Plan,
    version: &str,
    sent: bool,
) -> Result<(), Diagnostics> {
    let deadline = Instant::now() + CALENDAR_TIMEOUT;
    let calendar = match eks_cluster::versions(&ctx.aws.eks(), deadline).await {
        Ok(calendar) if !calendar.is_empty() => calendar,
        read => {
            let why = match read {
                Err(e) => e.to_string(),
                Ok(_) => "EKS listed no versions".to_string(),
            };
            plan.warn(Diagnostic::warning_at(
                "version",
                "Kubernetes version not checked against EKS's calendar",
                format!(
                    "The plan could not read EKS's version calendar (eks:DescribeClusterVersions), \
                     so whether EKS offers {version} is left to EKS when the change is applied: {why}"
                ),
            ));
            return Ok(());
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    match versions::diagnostic(version, &calendar, now, sent) {
        Some(d) if d.severity == Severity::Error => Err(d.into()),
        Some(d) => {
            plan.warn(d);
            Ok(())
        }
        None => Ok(()),
    }
}

/// The rest of the schema: access to the cluster (IRSA, authentication) and what EKS
/// reports back.
fn access_and_outputs(s: Schema) -> Schema {
    s
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
                .optional()
                .deprecated()
                .description("Deprecated and ignored: set `coredns_on_fargate` on the `joiner_fargate_profile` that selects kube-system, which switches CoreDNS once that profile is ACTIVE (created before it, the CoreDNS pods were never admitted to Fargate)."),
        )
        .attribute(
            Attribute::string("authentication_mode")
                .default(Value::string(DEFAULT_AUTHENTICATION_MODE))
                .validate(validators::authentication_mode)
                .description(
                    "How EKS authenticates IAM principals: `CONFIG_MAP` (the `aws-auth` ConfigMap only), \
                     `API_AND_CONFIG_MAP` (access entries and `aws-auth`; the default) or `API` (access \
                     entries only). Changes in place, forward only: CONFIG_MAP → API_AND_CONFIG_MAP → API.",
                ),
        )
        .attribute(
            Attribute::bool("bootstrap_cluster_creator_admin_permissions")
                .default(false)
                .force_new()
                .description(
                    "Whether EKS gives the identity that creates the cluster an implicit admin access \
                     entry. Off by default: grant access with `joiner_access_entry`, so it shows in the \
                     configuration. EKS requires it on with `CONFIG_MAP`. Fixed at creation.",
                ),
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

/// An in-place update under way: what it changes from and to, and the state as far as it
/// got, which every error carries so that Terraform records what was applied before it.
struct Updating<'a> {
    ctx: &'a ProviderContext,
    prior: &'a ClusterModel,
    planned: &'a ClusterModel,
    name: String,
    deadline: Instant,
    state: ClusterModel,
}

impl Updating<'_> {
    fn progress(&self, d: Diagnostics) -> Diagnostics {
        d.with_partial_state(self.state.to_value())
    }

    /// The version, control-plane logging, endpoint access and authentication mode, each
    /// changed (and waited for) only when the plan changes it.
    async fn cluster_settings(&mut self) -> Result<(), Diagnostics> {
        let (ctx, prior, planned) = (self.ctx, self.prior, self.planned);
        let (name, deadline) = (self.name.as_str(), self.deadline);
        let eks = ctx.aws.eks();
        if planned.version != prior.version {
            if let Some(v) = &planned.version {
                let info = unless_stopped(
                    ctx,
                    "upgrading the cluster",
                    eks_cluster::update_version(&eks, name, v, deadline, poll()),
                )
                .await
                .map_err(|d| self.progress(d))?;
                apply_remote(&mut self.state, &info);
            }
        }
        if planned.enabled_log_types != prior.enabled_log_types {
            let types = planned.enabled_log_types.clone().unwrap_or_default();
            let info = unless_stopped(
                ctx,
                "updating control-plane logging",
                eks_cluster::update_logging(&eks, name, &types, deadline, poll()),
            )
            .await
            .map_err(|d| self.progress(d))?;
            apply_remote(&mut self.state, &info);
        }
        if planned.endpoint_public_access != prior.endpoint_public_access
            || planned.endpoint_private_access != prior.endpoint_private_access
            || planned.public_access_cidrs != prior.public_access_cidrs
        {
            let spec = spec_from(planned);
            let info = unless_stopped(
                ctx,
                "updating endpoint access",
                eks_cluster::update_endpoint_access(&eks, &spec, deadline, poll()),
            )
            .await
            .map_err(|d| self.progress(d))?;
            apply_remote(&mut self.state, &info);
            // Keep the configured CIDRs when the public endpoint is off (see apply_remote).
            self.state.public_access_cidrs = planned.public_access_cidrs.clone();
        }
        if planned.authentication_mode != prior.authentication_mode {
            if let Some(mode) = &planned.authentication_mode {
                let info = unless_stopped(
                    ctx,
                    "changing the authentication mode",
                    eks_cluster::update_authentication_mode(&eks, name, mode, deadline, poll()),
                )
                .await
                .map_err(|d| self.progress(d))?;
                apply_remote(&mut self.state, &info);
            }
        }
        Ok(())
    }

    /// The cluster's tags, when they differ from what the prior state recorded.
    async fn tags(&self, want_tags: &BTreeMap<String, String>) -> Result<(), Diagnostics> {
        let have_tags = self.prior.tags_all.clone().unwrap_or_default();
        if *want_tags != have_tags {
            let arn = self.prior.arn.clone().unwrap_or_default();
            eks_cluster::sync_tags(
                &self.ctx.aws.eks(),
                &arn,
                &have_tags,
                want_tags,
                self.deadline,
            )
            .await
            .map_err(|e| self.progress(e.into()))?;
        }
        Ok(())
    }

    /// IRSA's OIDC provider: made (or its thumbprints replaced) when IRSA is on, deleted
    /// when it is off.
    async fn irsa(&mut self, want_tags: &BTreeMap<String, String>) -> Result<(), Diagnostics> {
        let (prior, planned, deadline) = (self.prior, self.planned, self.deadline);
        let iam = self.ctx.aws.iam();
        let irsa = planned.enable_irsa == Some(true);
        if irsa
            && (prior.oidc_provider_arn.is_none()
                || planned.oidc_thumbprints != prior.oidc_thumbprints)
        {
            let issuer = prior.oidc_issuer.clone().unwrap_or_default();
            let arn =
                oidc::ensure_provider(&iam, &issuer, &thumbprints(planned), want_tags, deadline)
                    .await
                    .map_err(|e| self.progress(e.into()))?;
            self.state.oidc_provider_arn = Some(arn);
        } else if !irsa {
            if let Some(arn) = &prior.oidc_provider_arn {
                oidc::delete(&iam, arn, deadline)
                    .await
                    .map_err(|e| self.progress(e.into()))?;
            }
            self.state.oidc_provider_arn = None;
        }
        Ok(())
    }
}

#[async_trait]
impl Resource<ProviderContext> for Cluster {
    fn type_name(&self) -> &'static str {
        "joiner_cluster"
    }

    fn schema(&self) -> Schema {
        let inputs = Schema::new(0)
            .description(
                "An EKS control plane for a cluster with no node groups: IRSA's OIDC provider and \
                 CoreDNS on Fargate included.",
            )
            .attribute(Attribute::string("id").computed().description("The cluster name."))
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(validators::cluster_name)
                    .description("Cluster name: 1-100 letters, digits, `-` and `_`, starting with a letter or digit."),
            )
            .attribute(
                Attribute::string("version")
                    .optional_computed()
                    .validate(validators::kubernetes_version)
                    .description(
                        "Kubernetes minor version, e.g. \"1.35\". Changing it upgrades in place, one minor \
                         version at a time. Defaults to EKS's current default (read back after creation). \
                         The plan warns when the version is in EKS extended support and refuses one EKS \
                         no longer offers.",
                    ),
            )
            .attribute(
                Attribute::string("role_arn")
                    .required()
                    .force_new()
                    .validate(validators::role_arn)
                    .description("ARN of the cluster IAM role (e.g. `joiner_cluster_role.x.arn`)."),
            )
            .attribute(
                Attribute::string_set("subnet_ids")
                    .required()
                    .force_new()
                    .validate(validators::ec2_ids("subnet-", 2))
                    .description("Subnets for the control plane's network interfaces, in at least two AZs."),
            )
            .attribute(
                Attribute::string_set("security_group_ids")
                    .default(Value::Set(vec![]))
                    .force_new()
                    .validate(validators::ec2_ids("sg-", 0))
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
                    .validate(validators::cidrs)
                    .description("IPv4 CIDR blocks allowed to reach the public endpoint."),
            )
            .attribute(
                Attribute::string("kms_key_arn")
                    .optional()
                    .force_new()
                    .validate(validators::kms_key_arn)
                    .description("KMS key for envelope encryption of Kubernetes secrets. Cannot be changed later. Whoever applies needs kms:DescribeKey and kms:CreateGrant on it: EKS uses the key through a grant made at creation."),
            )
            .attribute(
                Attribute::string_set("enabled_log_types")
                    .default(Value::Set(vec![]))
                    .validate(validators::log_types)
                    .description("Control-plane logs sent to CloudWatch: api, audit, authenticator, controllerManager, scheduler."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(validators::tags)
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
            );
        access_and_outputs(inputs)
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
        let m = ClusterModel::from_value(config);
        if m.coredns_on_fargate.is_some() {
            d.push(Diagnostic::warning_at(
                "coredns_on_fargate",
                "coredns_on_fargate moved to joiner_fargate_profile",
                "This attribute is ignored. Set coredns_on_fargate = true on the joiner_fargate_profile \
                 that selects kube-system: Fargate admits a pod only if a profile selects it when the \
                 pod is created, so CoreDNS must be switched after that profile is ACTIVE, which the \
                 cluster cannot know.",
            ));
        }
        let public = m.endpoint_public_access;
        let private = m.endpoint_private_access;
        if public == Some(false) && private == Some(false) {
            d.error_at(
                "endpoint_private_access",
                "No way to reach the API server",
                "endpoint_public_access and endpoint_private_access cannot both be false; keep the private endpoint so nodes can join",
            );
        }
        // Set from another resource's output, the value is unknown here, yet it is set.
        if public == Some(false) && m.public_access_cidrs.is_set() {
            d.error_at(
                "public_access_cidrs",
                "CIDRs without a public endpoint",
                "public_access_cidrs only applies when endpoint_public_access = true",
            );
        }
        if m.authentication_mode.as_deref() == Some("CONFIG_MAP")
            && *m.bootstrap_cluster_creator_admin_permissions != Some(true)
            && m.bootstrap_cluster_creator_admin_permissions.is_known()
        {
            // Point at what the user wrote: the mode (the flag is usually left unset).
            let at = if !m.bootstrap_cluster_creator_admin_permissions.is_set() {
                "authentication_mode"
            } else {
                "bootstrap_cluster_creator_admin_permissions"
            };
            d.error_at(
                at,
                "CONFIG_MAP needs the bootstrap admin",
                "EKS requires bootstrap_cluster_creator_admin_permissions = true when authentication_mode = \"CONFIG_MAP\": \
                 without access entries, the creator's implicit admin is the only way into the cluster. \
                 Set it to true, or use authentication_mode = \"API_AND_CONFIG_MAP\" (the default) and grant \
                 access with joiner_access_entry.",
            );
        }
        // Set, known or not, as public_access_cidrs above.
        if m.enable_irsa == Some(false) && m.oidc_thumbprints.is_set() {
            d.push(Diagnostic::warning_at(
                "oidc_thumbprints",
                "Thumbprints without IRSA",
                "oidc_thumbprints is ignored when enable_irsa = false",
            ));
        }
        d
    }

    /// Reads through models, but edits `plan.planned` in place: a model round trip would
    /// turn the unknown values Terraform planned into nulls. `plan.changed` stays on the raw
    /// values too, since "unknown now" is a change a model cannot see.
    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        if plan.planned.is_null() {
            return Ok(());
        }
        let replacing = plan.is_create() || plan.is_replace();
        let prior = ClusterModel::from_value(&plan.prior);
        let planned = ClusterModel::from_value(&plan.planned);

        // Version: in place, forward only, one minor at a time (EKS's rules).
        if !replacing && plan.changed("version") {
            if let (Some(old), Some(new)) = (prior.version.as_deref(), planned.version.as_deref()) {
                if let (Some(o), Some(n)) = (
                    validators::parse_version(old),
                    validators::parse_version(new),
                ) {
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

        // Version: where the configured one stands on EKS's calendar today. Left unset, it
        // is EKS's default, which EKS offers by definition.
        if let Some(version) = plan.config.get("version").as_str().map(str::to_string) {
            let sent = replacing || plan.changed("version");
            check_version(ctx, plan, &version, sent).await?;
        }

        // Authentication mode: in place, forward only (EKS's rule).
        if !replacing && plan.changed("authentication_mode") {
            if let (Some(old), Some(new)) = (
                prior.authentication_mode.as_deref(),
                planned.authentication_mode.as_deref(),
            ) {
                if let (Some(o), Some(n)) =
                    (eks_cluster::mode_rank(old), eks_cluster::mode_rank(new))
                {
                    if n < o {
                        return Err(Diagnostic::error_at(
                            "authentication_mode",
                            "EKS cannot move the authentication mode back",
                            format!(
                                "the cluster uses {old}; EKS only moves forward ({}), so {new} is out of reach. \
                                 Keep {old}, or replace the cluster (change its name).",
                                eks_cluster::AUTHENTICATION_MODES.join(" → ")
                            ),
                        )
                        .into());
                    }
                }
            }
        }

        // The discovery tag is part of the plan, so reviewers see it.
        let tags_all = planned_tags(&plan.planned)
            .map(Value::string_map)
            .unwrap_or(Value::Unknown);
        plan.planned.set_attr("tags_all", tags_all);

        let arn = if planned.enable_irsa == Some(false) {
            Value::Null
        } else if replacing || prior.oidc_provider_arn.is_none() || plan.changed("oidc_thumbprints")
        {
            Value::Unknown
        } else {
            Value::opt_string(prior.oidc_provider_arn.clone())
        };
        plan.planned.set_attr("oidc_provider_arn", arn);
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout, CREATE_TIMEOUT);
        // The computed attributes are unknown in `planned`; the model reads them as None,
        // which is what a partial state must hold for them.
        let planned = ClusterModel::from_value(&change.planned);
        let spec = spec_from(&planned);
        let eks = ctx.aws.eks();
        eks_cluster::create(&eks, &spec, deadline).await?;
        tracing::info!(cluster = %spec.name, "CreateCluster accepted; waiting for ACTIVE");

        let mut state = planned.clone();
        state.oidc_provider_arn = None;
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
                state.id = Some(spec.name.clone());
                return Err(d.with_partial_state(state.to_value()));
            }
        };
        apply_remote(&mut state, &info);

        if planned.enable_irsa == Some(true) {
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
                Ok(arn) => state.oidc_provider_arn = Some(arn),
                Err(e) => return Err(Diagnostics::from(e).with_partial_state(state.to_value())),
            }
        }
        Ok(Applied::new(state.to_value()))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut state = ClusterModel::from_value(&req.state);
        let name = state.name_or_default();
        let Some(info) = eks_cluster::describe(&ctx.aws.eks(), &name, deadline).await? else {
            return Ok(None);
        };
        apply_remote(&mut state, &info);
        // The OIDC provider: deleted out of band → null, and the next plan recreates it.
        let iam = ctx.aws.iam();
        if let Some(arn) = state.oidc_provider_arn.clone() {
            if !oidc::exists(&iam, &arn, deadline).await? {
                state.oidc_provider_arn = None;
            }
        } else if state.enable_irsa.is_none() {
            // Import: adopt the provider registered for this issuer, if any.
            if let Some(issuer) = &info.oidc_issuer {
                state.oidc_provider_arn = oidc::find_provider(&iam, issuer, deadline).await?;
            }
        }
        fill_local_defaults(&mut state);
        Ok(Some(
            Applied::new(state.to_value()).with_private(req.private),
        ))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let prior = ClusterModel::from_value(&change.prior);
        let planned = ClusterModel::from_value(&change.planned);
        let mut u = Updating {
            ctx,
            prior: &prior,
            planned: &planned,
            name: planned.name_or_default(),
            deadline: deadline(change.timeout, UPDATE_TIMEOUT),
            state: prior.clone(),
        };
        u.cluster_settings().await?;
        let want_tags = all_tags(&planned);
        u.tags(&want_tags).await?;
        u.irsa(&want_tags).await?;

        // Settle on what AWS reports now, with the planned local inputs.
        let name = &u.name;
        let info = eks_cluster::describe(&ctx.aws.eks(), name, u.deadline)
            .await?
            .ok_or_else(|| {
                Diagnostic::error(
                    "Cluster disappeared",
                    format!("EKS cluster {name:?} vanished during the update"),
                )
            })?;
        let mut state = planned.clone();
        apply_remote(&mut state, &info);
        state.public_access_cidrs = planned.public_access_cidrs.clone();
        state.oidc_provider_arn = u.state.oidc_provider_arn;
        Ok(Applied::new(state.to_value()))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = deadline(change.timeout, DELETE_TIMEOUT);
        let prior = ClusterModel::from_value(&change.prior);
        let name = prior.name_or_default();
        if let Some(arn) = &prior.oidc_provider_arn {
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
        validators::cluster_name(&Value::string(id)).map_err(|e| {
            Diagnostic::error(
                "Invalid import ID",
                format!("expected the EKS cluster name: {e}"),
            )
        })?;
        Ok(Applied::new(
            ClusterModel {
                id: Some(id.to_string()),
                name: Some(id.to_string()).into(),
                ..Default::default()
            }
            .to_value(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conforms;

    #[test]
    fn discovery_tag_defaults_to_the_name_and_can_be_turned_off() {
        let v = Value::object([
            ("name", Value::string("prod")),
            ("tags", Value::string_map([("team", "platform")])),
        ]);
        let all = planned_tags(&v).unwrap();
        assert_eq!(all.get(DISCOVERY_TAG).map(String::as_str), Some("prod"));
        assert_eq!(all.get("team").map(String::as_str), Some("platform"));
        let mut off = v.clone();
        off.set_attr("discovery_tag_value", Value::string(""));
        assert!(!planned_tags(&off).unwrap().contains_key(DISCOVERY_TAG));
        let mut unknown = v;
        unknown.set_attr("tags", Value::Unknown);
        assert!(planned_tags(&unknown).is_none());
    }

    fn set(xs: &[&str]) -> Option<BTreeSet<String>> {
        Some(xs.iter().map(|x| x.to_string()).collect())
    }

    fn full() -> ClusterModel {
        ClusterModel {
            id: Some("prod".into()),
            name: Some("prod".into()).into(),
            version: Some("1.35".into()),
            role_arn: Some("arn:aws:iam::123456789012:role/eks".into()),
            subnet_ids: set(&["subnet-0123abcd", "subnet-4567abcd"]),
            security_group_ids: set(&["sg-0123abcd"]),
            endpoint_public_access: Some(true),
            endpoint_private_access: Some(false),
            public_access_cidrs: set(&["203.0.113.0/24"]).into(),
            kms_key_arn: Some("arn:aws:kms:us-east-1:123456789012:key/k".into()),
            enabled_log_types: set(&["api", "audit"]),
            tags: Some([("team".to_string(), "platform".to_string())].into()).into(),
            discovery_tag_value: Some("prod".into()).into(),
            tags_all: Some([(DISCOVERY_TAG.to_string(), "prod".to_string())].into()),
            enable_irsa: Some(true),
            oidc_thumbprints: Some(vec!["9e99a48a9960b14926bb7f3b02e22da2b0ab7280".into()]).into(),
            coredns_on_fargate: Some(false),
            authentication_mode: Some("API".into()),
            bootstrap_cluster_creator_admin_permissions: Some(false).into(),
            arn: Some("arn:aws:eks:us-east-1:123456789012:cluster/prod".into()),
            status: Some("ACTIVE".into()),
            endpoint: Some("https://example.eks.amazonaws.com".into()),
            certificate_authority: Some("LS0t".into()),
            oidc_issuer: Some("https://oidc.eks.us-east-1.amazonaws.com/id/A".into()),
            oidc_provider_arn: Some("arn:aws:iam::123456789012:oidc-provider/x".into()),
            cluster_security_group_id: Some("sg-89abcdef".into()),
            vpc_id: Some("vpc-0123abcd".into()),
            platform_version: Some("eks.3".into()),
            timeouts: Value::object([
                ("create", Value::string("40m")),
                ("update", Value::string("1h")),
                ("delete", Value::string("20m")),
            ]),
        }
    }

    /// Every attribute the model writes is in the schema, every schema attribute is mapped,
    /// and what it writes reads back unchanged, null and empty collections alike.
    #[test]
    fn model_matches_schema() {
        let r = Cluster;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(ClusterModel::from_value(&full().to_value()), full());
        let empty = ClusterModel {
            subnet_ids: Some(BTreeSet::new()),
            tags: Some(BTreeMap::new()).into(),
            oidc_thumbprints: Some(vec![]).into(),
            ..Default::default()
        };
        for m in [ClusterModel::default(), empty] {
            conforms(&m.to_value(), &schema.implied_type()).unwrap();
            assert_eq!(ClusterModel::from_value(&m.to_value()), m);
        }
    }

    /// Import then read: `tags` holds the user's tags without the discovery tag joiner
    /// adds, and the inputs EKS cannot report get their defaults.
    #[test]
    fn remote_state_keeps_the_users_tags_apart_from_the_discovery_tag() {
        let info = ClusterInfo {
            name: "prod".into(),
            arn: "arn:aws:eks:us-east-1:1:cluster/prod".into(),
            status: "ACTIVE".into(),
            tags: [
                (DISCOVERY_TAG.to_string(), "prod".to_string()),
                ("team".to_string(), "platform".to_string()),
            ]
            .into(),
            endpoint_public_access: Some(false),
            public_access_cidrs: vec!["0.0.0.0/0".into()],
            ..ClusterInfo::default()
        };
        let mut imported = ClusterModel {
            name: Some("prod".into()).into(),
            ..Default::default()
        };
        apply_remote(&mut imported, &info);
        fill_local_defaults(&mut imported);
        assert_eq!(
            imported.tags,
            Some([("team".to_string(), "platform".to_string())].into()).into()
        );
        assert_eq!(imported.tags_all.as_ref().map(|t| t.len()), Some(2));
        assert_eq!(imported.public_access_cidrs, set(&["0.0.0.0/0"]).into());
        assert_eq!(imported.enable_irsa, Some(false));
        assert_eq!(
            imported.coredns_on_fargate, None,
            "deprecated: not filled in"
        );
        let untagged = ClusterInfo {
            tags: [(DISCOVERY_TAG.to_string(), "prod".to_string())].into(),
            ..info
        };
        let mut state = ClusterModel::default();
        apply_remote(&mut state, &untagged);
        assert_eq!(state.tags, None.into(), "no user tags stay null");
    }
}
