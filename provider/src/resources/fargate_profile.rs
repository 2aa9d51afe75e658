//! `joiner_fargate_profile`: which pods run on Fargate.
//!
//! A groupless cluster needs two: kube-system (CoreDNS) and the agent's namespace, so that
//! the pods that launch nodes never run on the nodes they launch, nor on Spot. EKS cannot
//! change a profile after creation except for its tags, so every other input replaces it.
//!
//! The kube-system profile also switches CoreDNS onto Fargate (`coredns_on_fargate`). That
//! switch lives here, not on the cluster, because Fargate admits a pod only if a profile
//! selects it when the pod is created: the add-on must be updated after this profile is
//! ACTIVE, so that the CoreDNS pods it recreates are admitted to Fargate within one apply.

use std::time::Duration;

use tokio::time::Instant;

use crate::aws::eks::addon::{self, AddonOutcome};
use crate::aws::eks::fargate::{self, ProfileInfo, ProfileSpec, Selector};
use crate::aws::eks::wait::PollInterval;
use crate::context::ProviderContext;
use crate::model::fargate_profile::{FargateProfileModel, SelectorModel};
use crate::model::Model;
use crate::protocol::prelude::*;
use crate::validators;

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

fn spec_from(m: &FargateProfileModel) -> ProfileSpec {
    ProfileSpec {
        cluster_name: m.cluster_name.clone().unwrap_or_default(),
        profile_name: m.name.clone().unwrap_or_default(),
        pod_execution_role_arn: m.pod_execution_role_arn.clone().unwrap_or_default(),
        // Sorted: the BTreeSet's order.
        subnet_ids: m.subnet_ids.iter().flatten().cloned().collect(),
        selectors: m
            .selectors
            .iter()
            .map(|s| Selector {
                namespace: s.namespace.clone().unwrap_or_default(),
                labels: s.labels.clone().unwrap_or_default(),
            })
            .collect(),
        tags: m.tags.clone().unwrap_or_default(),
    }
}

fn id(cluster: &str, profile: &str) -> String {
    format!("{cluster}:{profile}")
}

fn apply_remote(state: &mut FargateProfileModel, info: &ProfileInfo) {
    let s = &info.spec;
    state.id = Some(id(&s.cluster_name, &s.profile_name));
    state.cluster_name = Some(s.cluster_name.clone());
    state.name = Some(s.profile_name.clone());
    state.pod_execution_role_arn = Some(s.pod_execution_role_arn.clone());
    state.subnet_ids = Some(s.subnet_ids.iter().cloned().collect());
    state.selectors = s
        .selectors
        .iter()
        .enumerate()
        .map(|(i, sel)| {
            // An empty label map and an omitted one mean the same; keep what the user wrote.
            let prior_labels = state.selectors.get(i).and_then(|p| p.labels.as_ref());
            let labels = if sel.labels.is_empty() && prior_labels.is_none() {
                None
            } else {
                Some(sel.labels.clone())
            };
            SelectorModel {
                namespace: Some(sel.namespace.clone()),
                labels,
            }
        })
        .collect::<Vec<_>>()
        .into();
    state.tags = if s.tags.is_empty() && state.tags.is_none() {
        None
    } else {
        Some(s.tags.clone())
    };
    state.arn = Some(info.arn.clone());
    state.status = Some(info.status.clone());
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

/// The labels EKS's CoreDNS pods carry: a kube-system selector asking for other labels
/// would not select them.
const COREDNS_POD_LABELS: [(&str, &str); 2] = [
    ("k8s-app", "kube-dns"),
    ("eks.amazonaws.com/component", "coredns"),
];

/// Whether a selector (namespace with `*`/`?` wildcards, labels) selects CoreDNS's pods.
fn selects_coredns(sel: &SelectorModel) -> bool {
    let ns = sel.namespace.as_deref().unwrap_or_default();
    let labels_match = sel
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| COREDNS_POD_LABELS.iter().any(|(ck, cv)| ck == k && cv == v));
    wildcard_match(ns, "kube-system") && labels_match
}

/// EKS's selector namespaces take `*` (any run) and `?` (one character).
fn wildcard_match(pattern: &str, s: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), s.as_bytes())
}

fn addon_warning(outcome: &AddonOutcome, cluster: &str) -> Option<Diagnostic> {
    outcome
        .warning(cluster)
        .map(|(summary, detail)| Diagnostic::warning_at("coredns_on_fargate", summary, detail))
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
                    .validate(validators::cluster_name)
                    .description("The EKS cluster (e.g. `joiner_cluster.x.name`)."),
            )
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(validators::profile_name)
                    .description("Profile name: 1-100 letters, digits, `-` and `_`."),
            )
            .attribute(
                Attribute::string("pod_execution_role_arn")
                    .required()
                    .force_new()
                    .validate(validators::role_arn)
                    .description("ARN of the pod execution role (e.g. `joiner_fargate_role.x.arn`)."),
            )
            .attribute(
                Attribute::string_set("subnet_ids")
                    .required()
                    .force_new()
                    .validate(validators::ec2_ids("subnet-", 1))
                    .description("Private subnets for the pods (Fargate pods get no public IP)."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(validators::tags)
                    .description("Tags; the only input EKS can change in place."),
            )
            .attribute(Attribute::string("arn").computed().description("Profile ARN."))
            .attribute(Attribute::string("status").computed().description("Profile status (ACTIVE once applied)."))
            .attribute(
                Attribute::bool("coredns_on_fargate")
                    .optional()
                    .description(
                        "Once this profile is ACTIVE, manage the `coredns` EKS add-on with \
                         `{\"computeType\":\"Fargate\"}`, so CoreDNS is recreated on Fargate in the \
                         same apply. The profile must select kube-system. Turning it off stops \
                         managing the add-on and leaves CoreDNS running (`DeleteAddon` with \
                         `preserve`).",
                    ),
            )
            .block(
                NestedBlock::list(
                    "selector",
                    Block::new()
                        .description("Pods in `namespace` whose labels include all of `labels` run on Fargate.")
                        .attribute(
                            Attribute::string("namespace")
                                .required()
                                .validate(validators::namespace)
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
        let model = FargateProfileModel::from_value(config);
        let list = &model.selectors;
        if list.len() as i64 > MAX_SELECTORS {
            d.error_at(
                "selector",
                "Too many selectors",
                format!("a Fargate profile takes at most {MAX_SELECTORS} selectors (an EKS limit), got {}", list.len()),
            );
        }
        // Only judged once every selector is known (a module may compute a namespace).
        if model.coredns_on_fargate == Some(true)
            && model.selectors.is_known()
            && !model.selectors.iter().any(selects_coredns)
        {
            d.error_at(
                "coredns_on_fargate",
                "This profile does not select CoreDNS",
                "coredns_on_fargate needs a selector for namespace \"kube-system\" with no labels, \
                 or only CoreDNS's own labels (k8s-app = kube-dns, eks.amazonaws.com/component = \
                 coredns); otherwise the CoreDNS pods the add-on recreates would not be admitted \
                 to Fargate and would stay Pending."
                    .to_string(),
            );
        }
        d
    }

    /// Compares and edits the raw plan: a model round trip would turn the planned
    /// unknowns into nulls.
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
        let mut state = FargateProfileModel::from_value(&change.planned);
        let spec = spec_from(&state);
        let eks = ctx.aws.eks();
        let info = fargate::create(&eks, &spec, deadline, poll()).await?;
        let coredns = state.coredns_on_fargate;
        apply_remote(&mut state, &info);
        let mut applied_warning = None;
        if coredns == Some(true) {
            match addon::ensure_coredns_on_fargate(&eks, &spec.cluster_name, deadline).await {
                Ok(outcome) => applied_warning = addon_warning(&outcome, &spec.cluster_name),
                Err(e) => {
                    // The profile exists: keep it in state, with the switch not yet made, so
                    // the next apply retries only the add-on.
                    state.coredns_on_fargate = None;
                    return Err(Diagnostics::from(e).with_partial_state(state.to_value()));
                }
            }
        }
        let mut applied = Applied::new(state.to_value());
        if let Some(w) = applied_warning {
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
        let mut state = FargateProfileModel::from_value(&req.state);
        let cluster = state.cluster_name.clone().unwrap_or_default();
        let profile = state.name.clone().unwrap_or_default();
        let eks = ctx.aws.eks();
        match fargate::describe(&eks, &cluster, &profile, deadline).await? {
            None => Ok(None),
            Some(info) => {
                apply_remote(&mut state, &info);
                // Someone removed or reconfigured the add-on: show it as drift. Without an
                // add-on API nothing can be said, so the input stands. After an import (the
                // input unknown), a profile that selects CoreDNS reads as managing it when the
                // add-on is on Fargate.
                let selects = state.selectors.iter().any(selects_coredns);
                if state.coredns_on_fargate == Some(true)
                    || (state.coredns_on_fargate.is_none() && selects)
                {
                    match addon::coredns_is_on_fargate(&eks, &cluster, deadline).await? {
                        Some(false) if state.coredns_on_fargate == Some(true) => {
                            state.coredns_on_fargate = Some(false)
                        }
                        Some(true) if state.coredns_on_fargate.is_none() => {
                            state.coredns_on_fargate = Some(true)
                        }
                        _ => {}
                    }
                }
                Ok(Some(
                    Applied::new(state.to_value()).with_private(req.private),
                ))
            }
        }
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(CREATE_TIMEOUT);
        // Tags are all EKS can change in place; everything else replaces the profile.
        let prior = FargateProfileModel::from_value(&change.prior);
        let planned = FargateProfileModel::from_value(&change.planned);
        let arn = prior.arn.clone().unwrap_or_default();
        let have = prior.tags.clone().unwrap_or_default();
        let want = planned.tags.clone().unwrap_or_default();
        let eks = ctx.aws.eks();
        fargate::sync_tags(&eks, &arn, &have, &want, deadline).await?;
        let cluster = planned.cluster_name.clone().unwrap_or_default();
        let mut warning = None;
        let (was, now) = (
            prior.coredns_on_fargate == Some(true),
            planned.coredns_on_fargate == Some(true),
        );
        if was != now || now {
            let outcome = if now {
                // Also when it was on: a read found the add-on gone or reconfigured.
                addon::ensure_coredns_on_fargate(&eks, &cluster, deadline).await
            } else {
                addon::release_coredns(&eks, &cluster, deadline).await
            };
            match outcome {
                Ok(o) => warning = addon_warning(&o, &cluster),
                Err(e) => {
                    let mut state = planned.clone();
                    state.coredns_on_fargate = prior.coredns_on_fargate;
                    return Err(Diagnostics::from(e).with_partial_state(state.to_value()));
                }
            }
        }
        let mut applied = Applied::new(planned.to_value());
        if let Some(w) = warning {
            applied = applied.with_warning(w);
        }
        Ok(applied)
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(DELETE_TIMEOUT);
        let prior = FargateProfileModel::from_value(&change.prior);
        let cluster = prior.cluster_name.unwrap_or_default();
        let profile = prior.name.unwrap_or_default();
        let eks = ctx.aws.eks();
        if prior.coredns_on_fargate == Some(true) {
            // Stop managing CoreDNS first; its running pods stay (preserve).
            addon::release_coredns(&eks, &cluster, deadline).await?;
        }
        fargate::delete(&eks, &cluster, &profile, deadline, poll()).await?;
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
            validators::cluster_name(&Value::string(v)).map_err(|e| {
                Diagnostic::error(
                    "Invalid import ID",
                    format!("the {what} in {import_id:?} {e}"),
                )
            })?;
        }
        Ok(Applied::new(
            FargateProfileModel {
                id: Some(id(cluster, profile)),
                cluster_name: Some(cluster.to_string()),
                name: Some(profile.to_string()),
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
    use std::collections::BTreeMap;

    fn full() -> FargateProfileModel {
        FargateProfileModel {
            id: Some("prod:kube-system".into()),
            cluster_name: Some("prod".into()),
            name: Some("kube-system".into()),
            pod_execution_role_arn: Some("arn:aws:iam::123456789012:role/fargate".into()),
            subnet_ids: Some(["subnet-0123abcd".to_string()].into()),
            tags: Some([("team".to_string(), "platform".to_string())].into()),
            arn: Some(
                "arn:aws:eks:us-east-1:123456789012:fargateprofile/prod/kube-system/x".into(),
            ),
            status: Some("ACTIVE".into()),
            coredns_on_fargate: Some(true),
            selectors: vec![
                SelectorModel {
                    namespace: Some("kube-system".into()),
                    labels: None,
                },
                SelectorModel {
                    namespace: Some("joiner".into()),
                    labels: Some([("app".to_string(), "joiner-agent".to_string())].into()),
                },
            ]
            .into(),
            timeouts: Value::object([
                ("create", Value::string("20m")),
                ("delete", Value::string("20m")),
            ]),
        }
    }

    /// Every attribute and block the model writes is in the schema, every schema
    /// attribute is mapped, and what it writes reads back unchanged.
    #[test]
    fn model_matches_schema() {
        let r = FargateProfile;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(FargateProfileModel::from_value(&full().to_value()), full());
        let empty = FargateProfileModel {
            tags: Some(BTreeMap::new()),
            selectors: vec![SelectorModel {
                namespace: Some("a".into()),
                labels: Some(BTreeMap::new()),
            }]
            .into(),
            ..Default::default()
        };
        for m in [FargateProfileModel::default(), empty] {
            conforms(&m.to_value(), &schema.implied_type()).unwrap();
            assert_eq!(FargateProfileModel::from_value(&m.to_value()), m);
        }
    }

    #[test]
    fn coredns_needs_a_selector_that_selects_it() {
        let sel = |ns: &str, labels: &[(&str, &str)]| SelectorModel {
            namespace: Some(ns.into()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
        };
        assert!(selects_coredns(&sel("kube-system", &[])));
        assert!(selects_coredns(&sel("kube-*", &[])));
        assert!(selects_coredns(&sel(
            "kube-syste?",
            &[("k8s-app", "kube-dns")]
        )));
        assert!(!selects_coredns(&sel("kube-system", &[("app", "x")])));
        assert!(!selects_coredns(&sel("joiner", &[])));
        let mut m = full();
        m.selectors = vec![sel("joiner", &[])].into();
        let diags = FargateProfile.validate(&m.to_value());
        assert!(
            format!("{diags:?}").contains("does not select CoreDNS"),
            "{diags:?}"
        );
        m.selectors.push(sel("kube-system", &[]));
        assert!(!FargateProfile.validate(&m.to_value()).has_errors());
    }

    /// EKS reports no labels as an empty map: state keeps null or `{}` as configured.
    #[test]
    fn remote_profile_keeps_the_configured_label_nulls() {
        let mut state = full();
        state.selectors[1].labels = Some(BTreeMap::new());
        let mut remote = spec_from(&state);
        remote.tags.clear();
        let info = ProfileInfo {
            spec: remote,
            arn: "arn".into(),
            status: "ACTIVE".into(),
        };
        state.tags = None;
        apply_remote(&mut state, &info);
        assert_eq!(state.selectors[0].labels, None);
        assert_eq!(state.selectors[1].labels, Some(BTreeMap::new()));
        assert_eq!(state.tags, None);
        assert_eq!(state.id.as_deref(), Some("prod:kube-system"));
    }
}
