//! Validation of NodePool and NodeClass specs, returning every error with its field path
//! (`spec.template.spec.requirements[2].operator: must be one of In, NotIn, Exists,
//! DoesNotExist, Gt, Lt, Gte, Lte`). The provider calls these at plan time; the agent calls them
//! before it trusts a spec. They never stop at the first problem, so one plan shows all.

use std::fmt;

use super::duration;
use super::node_class::NodeClassSpec;
use super::node_pool::NodePoolSpec;
use super::{EntryError, NodeSelectorRequirementWithMinValues, ParsedRequirements, Taint};
use crate::labels;
use crate::requirements::{Operator, OPERATORS};
use crate::resources::{parse_bytes, parse_quantity};

/// One problem, with the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Field errors as a check finds them, in the order it finds them.
#[derive(Default)]
pub(super) struct Errors(pub(super) Vec<FieldError>);

impl Errors {
    pub(super) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// Checks a NodePool spec. `path` is the prefix for field paths, usually `spec`.
pub fn node_pool(spec: &NodePoolSpec, path: &str) -> Vec<FieldError> {
    let reqs = super::parse_requirements(&spec.template.spec.requirements);
    node_pool_parsed(spec, &reqs, path)
}

/// [`node_pool`] over requirements the caller has parsed already and goes on to use, so
/// that the verdict and what is served from it are one reading of the spec.
pub fn node_pool_parsed(
    spec: &NodePoolSpec,
    reqs: &ParsedRequirements,
    path: &str,
) -> Vec<FieldError> {
    let mut e = Errors::default();
    pool_sizes(&mut e, spec, path);
    template_metadata(&mut e, spec, path);
    template_spec(&mut e, spec, reqs, path);
    pool_disruption(&mut e, spec, path);
    pool_limits(&mut e, spec, path);
    if let Some(w) = spec.weight {
        if !(1..=100).contains(&w) {
            e.push(format!("{path}.weight"), "must be between 1 and 100");
        }
    }
    for (p, m) in super::launch_policy::check(spec, path) {
        e.push(p, m);
    }
    capacity(&mut e, spec, path);
    e.0
}

/// The lists' sizes, within what the API server stores.
fn pool_sizes(e: &mut Errors, spec: &NodePoolSpec, path: &str) {
    let t = format!("{path}.template");
    let meta = &spec.template.metadata;
    at_most(
        e,
        &format!("{t}.metadata.labels"),
        meta.labels.len(),
        100,
        "labels",
    );
    let n = meta.annotations.len();
    at_most(
        e,
        &format!("{t}.metadata.annotations"),
        n,
        100,
        "annotations",
    );
    let ts = &spec.template.spec;
    at_most(
        e,
        &format!("{t}.spec.taints"),
        ts.taints.len(),
        100,
        "taints",
    );
    let n = ts.startup_taints.len();
    at_most(e, &format!("{t}.spec.startupTaints"), n, 100, "taints");
    at_most(
        e,
        &format!("{path}.limits"),
        spec.limits.len(),
        100,
        "limits",
    );
    at_most(
        e,
        &format!("{path}.headroom"),
        spec.headroom.len(),
        50,
        "headroom entries",
    );
    if let Some(r) = &spec.repair {
        let n = r.policies.len();
        at_most(e, &format!("{path}.repair.policies"), n, 50, "policies");
    }
}

/// The template's labels (none the agent sets) and annotations.
fn template_metadata(e: &mut Errors, spec: &NodePoolSpec, path: &str) {
    let t = format!("{path}.template");
    for (k, v) in &spec.template.metadata.labels {
        let p = format!("{t}.metadata.labels[{k:?}]");
        label_key(e, &p, k);
        if labels::RESTRICTED.contains(&k.as_str()) {
            e.push(
                &p,
                format!("label {k} is set by the agent and may not be set here"),
            );
        }
        label_value(e, &p, v);
    }
    for k in spec.template.metadata.annotations.keys() {
        if k.is_empty() {
            e.push(
                format!("{t}.metadata.annotations"),
                "annotation keys must not be empty",
            );
        }
    }
}

/// The template's spec: its NodeClass, requirements (none against a template label), taints
/// and lifetimes.
fn template_spec(e: &mut Errors, spec: &NodePoolSpec, reqs: &ParsedRequirements, path: &str) {
    let t = format!("{path}.template");
    let s = format!("{t}.spec");
    let r = &spec.template.spec.node_class_ref;
    if r.name.is_empty() {
        e.push(format!("{s}.nodeClassRef.name"), "must not be empty");
    }
    let kinds = super::served::CLASS_KINDS;
    if r.group == super::GROUP && r.kind != "NodeClass" {
        e.push(format!("{s}.nodeClassRef.kind"), "must be NodeClass");
    } else if !kinds.contains(&(r.group.as_str(), r.kind.as_str())) {
        let allowed: Vec<String> = kinds
            .iter()
            .map(|(g, k)| format!("{g} (kind {k})"))
            .collect();
        e.push(
            format!("{s}.nodeClassRef.group"),
            format!("must be one of {}", allowed.join(", ")),
        );
    }
    requirements(
        e,
        &format!("{s}.requirements"),
        &spec.template.spec.requirements,
        reqs,
    );
    for (i, (key, read)) in reqs.entries.iter().enumerate() {
        if let (Some(v), Ok((_, req))) = (spec.template.metadata.labels.get(key), read) {
            if !req.has(v) {
                e.push(
                    format!("{s}.requirements[{i}]"),
                    format!("conflicts with template label {key}={v}"),
                );
            }
        }
    }
    taints(e, &format!("{s}.taints"), &spec.template.spec.taints);
    taints(
        e,
        &format!("{s}.startupTaints"),
        &spec.template.spec.startup_taints,
    );
    if let Err(m) = duration::parse_or_never(&spec.template.spec.expire_after) {
        e.push(
            format!("{s}.expireAfter"),
            format!("{m}; use a duration such as 720h, or Never"),
        );
    }
    if let Some(g) = &spec.template.spec.termination_grace_period {
        if let Err(m) = duration::parse_seconds(g) {
            e.push(format!("{s}.terminationGracePeriod"), m);
        }
    }
}

/// `disruption`: the consolidation policy and delay, and the budgets.
fn pool_disruption(e: &mut Errors, spec: &NodePoolSpec, path: &str) {
    let d = format!("{path}.disruption");
    let pol = &spec.disruption.consolidation_policy;
    if pol == "WhenUnderutilized" {
        // Karpenter v1beta1's name: a pasted v1beta1 manifest should learn the v1 one.
        e.push(
            format!("{d}.consolidationPolicy"),
            "WhenUnderutilized was renamed WhenEmptyOrUnderutilized in Karpenter v1 (same \
             behaviour); must be one of WhenEmpty, WhenEmptyOrUnderutilized, Balanced",
        );
    } else if !CONSOLIDATION_POLICIES.contains(&pol.as_str()) {
        e.push(
            format!("{d}.consolidationPolicy"),
            format!("must be one of {}", CONSOLIDATION_POLICIES.join(", ")),
        );
    }
    if let Err(m) = duration::parse_or_never(&spec.disruption.consolidate_after) {
        e.push(
            format!("{d}.consolidateAfter"),
            format!("{m}; use a duration such as 30s, or Never"),
        );
    }
    if spec.disruption.budgets.len() > 50 {
        e.push(format!("{d}.budgets"), "at most 50 budgets");
    }
    for (i, b) in spec.disruption.budgets.iter().enumerate() {
        let p = format!("{d}.budgets[{i}]");
        at_most(e, &format!("{p}.reasons"), b.reasons.len(), 50, "reasons");
        budget_nodes(e, &format!("{p}.nodes"), &b.nodes);
        match (&b.schedule, &b.duration) {
            (Some(sc), Some(du)) => {
                if let Err(m) = cron(sc) {
                    e.push(format!("{p}.schedule"), m);
                }
                if let Err(m) = duration::parse_seconds(du) {
                    e.push(format!("{p}.duration"), m);
                }
            }
            (Some(_), None) => e.push(format!("{p}.duration"), "required when schedule is set"),
            (None, Some(_)) => e.push(format!("{p}.schedule"), "required when duration is set"),
            (None, None) => {}
        }
        for (j, reason) in b.reasons.iter().enumerate() {
            if !["Underutilized", "Empty", "Drifted"].contains(&reason.as_str()) {
                e.push(
                    format!("{p}.reasons[{j}]"),
                    "must be one of Underutilized, Empty, Drifted",
                );
            }
        }
    }
}

/// `limits`: quantities, and `nodes` as a whole count.
fn pool_limits(e: &mut Errors, spec: &NodePoolSpec, path: &str) {
    for (k, v) in &spec.limits {
        let p = format!("{path}.limits[{k:?}]");
        if k.is_empty() {
            e.push(&p, "resource name must not be empty");
        }
        if k == crate::resources::NODES {
            if v.parse::<u32>().is_err() {
                e.push(&p, "a node count: a whole number such as \"10\"");
            }
        } else if let Err(m) = parse_quantity(v) {
            e.push(&p, m);
        }
    }
}

/// `consolidationPolicy` values: Karpenter's, `Balanced` being v1.14's.
pub const CONSOLIDATION_POLICIES: &[&str] = &["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"];

/// Condition statuses a repair policy may name.
pub const CONDITION_STATUSES: &[&str] = &["True", "False", "Unknown"];

/// The capacity fields: static `replicas`, `headroom`, `repair`.
fn capacity(e: &mut Errors, spec: &NodePoolSpec, path: &str) {
    if let Some(r) = spec.replicas {
        let p = format!("{path}.replicas");
        if r < 0 {
            e.push(&p, "must not be negative");
        }
        // Karpenter's rules for a static NodePool.
        for k in spec.limits.keys().filter(|k| *k != crate::resources::NODES) {
            e.push(
                format!("{path}.limits[{k:?}]"),
                "a static NodePool (replicas set) supports only the nodes limit",
            );
        }
        if spec.weight.is_some() {
            e.push(
                format!("{path}.weight"),
                "a static NodePool (replicas set) takes no weight: it never launches for pending pods",
            );
        }
        if !spec.headroom.is_empty() {
            e.push(
                format!("{path}.headroom"),
                "a static NodePool (replicas set) keeps a fixed node count; headroom needs a dynamic pool",
            );
        }
    }
    for (i, h) in spec.headroom.iter().enumerate() {
        let p = format!("{path}.headroom[{i}]");
        let sized = h.cpu.is_some() || h.memory.is_some() || h.pods.is_some();
        match (sized, h.nodes) {
            (true, Some(_)) => e.push(
                format!("{p}.nodes"),
                "either nodes (spare nodes) or cpu/memory/pods (room for pods), not both",
            ),
            (false, None) => e.push(&p, "one of cpu, memory or nodes is required"),
            _ => {}
        }
        if sized && h.cpu.is_none() && h.memory.is_none() {
            e.push(
                &p,
                "pods needs cpu or memory: the size of one pod to make room for",
            );
        }
        if let Some(c) = &h.cpu {
            match crate::resources::parse_cpu_milli(c) {
                Ok(v) if v > 0 => {}
                Ok(_) => e.push(format!("{p}.cpu"), "must be more than 0"),
                Err(m) => e.push(format!("{p}.cpu"), m),
            }
        }
        if let Some(m) = &h.memory {
            match parse_bytes(m) {
                Ok(v) if v > 0 => {}
                Ok(_) => e.push(format!("{p}.memory"), "must be more than 0"),
                Err(msg) => e.push(format!("{p}.memory"), msg),
            }
        }
        if h.pods == Some(0) {
            e.push(format!("{p}.pods"), "must be at least 1");
        }
        if h.nodes == Some(0) {
            e.push(format!("{p}.nodes"), "must be at least 1");
        }
        window(e, &p, &h.schedule, &h.duration);
    }
    if let Some(r) = &spec.repair {
        for (i, pol) in r.policies.iter().enumerate() {
            let p = format!("{path}.repair.policies[{i}]");
            if pol.condition_type.is_empty() {
                e.push(format!("{p}.conditionType"), "must not be empty");
            }
            if !CONDITION_STATUSES.contains(&pol.condition_status.as_str()) {
                e.push(
                    format!("{p}.conditionStatus"),
                    "must be one of True, False, Unknown",
                );
            }
            if let Err(m) = duration::parse_seconds(&pol.toleration_duration) {
                e.push(format!("{p}.tolerationDuration"), m);
            }
        }
    }
}

/// A cron `schedule` with its `duration`, both or neither.
fn window(e: &mut Errors, p: &str, schedule: &Option<String>, dur: &Option<String>) {
    match (schedule, dur) {
        (Some(sc), Some(du)) => {
            if let Err(m) = cron(sc) {
                e.push(format!("{p}.schedule"), m);
            }
            if let Err(m) = duration::parse_seconds(du) {
                e.push(format!("{p}.duration"), m);
            }
        }
        (Some(_), None) => e.push(format!("{p}.duration"), "required when schedule is set"),
        (None, Some(_)) => e.push(format!("{p}.schedule"), "required when duration is set"),
        (None, None) => {}
    }
}

/// Checks a NodeClass spec.
pub fn node_class(spec: &NodeClassSpec, path: &str) -> Vec<FieldError> {
    let mut e = Errors::default();
    class_sizes(&mut e, spec, path);
    subnet_terms(&mut e, spec, path);
    security_group_terms(&mut e, spec, path);
    ami_terms(&mut e, spec, path);
    match (&spec.role, &spec.instance_profile) {
        (Some(_), Some(_)) => e.push(path, "role and instanceProfile are mutually exclusive"),
        (None, None) => e.push(path, "one of role or instanceProfile is required"),
        (Some(r), None) if r.is_empty() => e.push(format!("{path}.role"), "must not be empty"),
        (None, Some(i)) if i.is_empty() => {
            e.push(format!("{path}.instanceProfile"), "must not be empty")
        }
        _ => {}
    }
    block_devices(&mut e, spec, path);
    metadata_options(&mut e, spec, path);
    class_tags(&mut e, spec, path);
    for (p, m) in super::node_class::check_reservation_terms(spec, path) {
        e.push(p, m);
    }
    class_kubelet(&mut e, spec, path);
    e.0
}

/// The lists' sizes, within what the API server stores.
fn class_sizes(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    for (field, n) in [
        ("subnetSelectorTerms", spec.subnet_selector_terms.len()),
        (
            "securityGroupSelectorTerms",
            spec.security_group_selector_terms.len(),
        ),
        ("amiSelectorTerms", spec.ami_selector_terms.len()),
    ] {
        at_most(e, &format!("{path}.{field}"), n, 30, "terms");
    }
    let n = spec.block_device_mappings.len();
    at_most(e, &format!("{path}.blockDeviceMappings"), n, 50, "mappings");
    at_most(e, &format!("{path}.tags"), spec.tags.len(), 50, "tags");
    if let Some(k) = &spec.kubelet {
        for (field, n) in [
            ("systemReserved", k.system_reserved.len()),
            ("kubeReserved", k.kube_reserved.len()),
            ("evictionHard", k.eviction_hard.len()),
            ("evictionSoft", k.eviction_soft.len()),
            (
                "evictionSoftGracePeriod",
                k.eviction_soft_grace_period.len(),
            ),
        ] {
            at_most(e, &format!("{path}.kubelet.{field}"), n, 10, "entries");
        }
    }
}

/// `subnetSelectorTerms`: at least one, each by tags or by id.
fn subnet_terms(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    if spec.subnet_selector_terms.is_empty() {
        e.push(
            format!("{path}.subnetSelectorTerms"),
            "at least one term is required",
        );
    }
    for (i, t) in spec.subnet_selector_terms.iter().enumerate() {
        let p = format!("{path}.subnetSelectorTerms[{i}]");
        match (t.tags.is_empty(), &t.id) {
            (true, None) => e.push(&p, "one of tags or id is required"),
            (false, Some(_)) => e.push(&p, "id may not be combined with tags"),
            _ => {}
        }
        selector_tags(e, &format!("{p}.tags"), &t.tags);
        if let Some(id) = &t.id {
            aws_id(e, &format!("{p}.id"), id, "subnet-");
        }
    }
}

/// `securityGroupSelectorTerms`: at least one, each by tags, id or name.
fn security_group_terms(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    if spec.security_group_selector_terms.is_empty() {
        e.push(
            format!("{path}.securityGroupSelectorTerms"),
            "at least one term is required",
        );
    }
    for (i, t) in spec.security_group_selector_terms.iter().enumerate() {
        let p = format!("{path}.securityGroupSelectorTerms[{i}]");
        let set = [!t.tags.is_empty(), t.id.is_some(), t.name.is_some()];
        match set.iter().filter(|b| **b).count() {
            0 => e.push(&p, "one of tags, id or name is required"),
            1 => {}
            _ if t.id.is_some() => e.push(&p, "id may not be combined with tags or name"),
            _ => {}
        }
        selector_tags(e, &format!("{p}.tags"), &t.tags);
        if let Some(id) = &t.id {
            aws_id(e, &format!("{p}.id"), id, "sg-");
        }
    }
}

/// `amiSelectorTerms`: at least one; an alias stands alone.
fn ami_terms(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    if spec.ami_selector_terms.is_empty() {
        e.push(
            format!("{path}.amiSelectorTerms"),
            "at least one term is required",
        );
    }
    for (i, t) in spec.ami_selector_terms.iter().enumerate() {
        let p = format!("{path}.amiSelectorTerms[{i}]");
        if let Some(alias) = &t.alias {
            if t.id.is_some() || t.name.is_some() || !t.tags.is_empty() || t.owner.is_some() {
                e.push(&p, "alias may not be combined with id, name, tags or owner");
            }
            if spec.ami_selector_terms.len() > 1 {
                e.push(&p, "a term with alias must be the only term");
            }
            match alias.split_once('@') {
                Some((fam, ver)) if ["al2023", "bottlerocket"].contains(&fam) && !ver.is_empty() => {}
                // Refused rather than accepted and never launched: there is no image to
                // resolve (amazon-eks-ami's README).
                Some(("al2", _)) => e.push(
                    format!("{p}.alias"),
                    "al2 is not available: EKS stopped publishing Amazon Linux 2 node images on November 26, 2025 (none exist for Kubernetes 1.33 and later); use al2023@latest or bottlerocket@latest",
                ),
                _ => e.push(
                    format!("{p}.alias"),
                    "must be family@version with family al2023 or bottlerocket (e.g. al2023@latest)",
                ),
            }
        } else if t.id.is_none() && t.name.is_none() && t.tags.is_empty() {
            e.push(&p, "one of alias, id, name or tags is required");
        }
        if let Some(id) = &t.id {
            aws_id(e, &format!("{p}.id"), id, "ami-");
        }
        selector_tags(e, &format!("{p}.tags"), &t.tags);
    }
}

/// `blockDeviceMappings`: at most one root volume, EBS sizes and types EC2 takes.
fn block_devices(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    let roots = spec
        .block_device_mappings
        .iter()
        .filter(|b| b.root_volume)
        .count();
    if roots > 1 {
        e.push(
            format!("{path}.blockDeviceMappings"),
            "at most one mapping may be the root volume",
        );
    }
    for (i, b) in spec.block_device_mappings.iter().enumerate() {
        let p = format!("{path}.blockDeviceMappings[{i}]");
        if b.device_name.is_empty() {
            e.push(format!("{p}.deviceName"), "must not be empty");
        }
        if let Some(ebs) = &b.ebs {
            if let Some(sz) = &ebs.volume_size {
                match parse_bytes(sz) {
                    Ok(v) if ((1 << 30)..=64 * (1i64 << 40)).contains(&v) => {}
                    Ok(_) => e.push(
                        format!("{p}.ebs.volumeSize"),
                        "must be between 1Gi and 64Ti",
                    ),
                    Err(m) => e.push(format!("{p}.ebs.volumeSize"), m),
                }
            }
            if let Some(vt) = &ebs.volume_type {
                if !VOLUME_TYPES.contains(&vt.as_str()) {
                    e.push(
                        format!("{p}.ebs.volumeType"),
                        "must be one of gp2, gp3, io1, io2, sc1, st1, standard",
                    );
                }
            }
            if ebs.iops.is_some_and(|v| v < 0) {
                e.push(format!("{p}.ebs.iops"), "must not be negative");
            }
            if ebs.throughput.is_some_and(|v| v < 0) {
                e.push(format!("{p}.ebs.throughput"), "must not be negative");
            }
        }
    }
}

/// `metadataOptions`: the values EC2's instance metadata options take.
fn metadata_options(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    let m = &spec.metadata_options;
    let mp = format!("{path}.metadataOptions");
    if m.http_endpoint != "enabled" && m.http_endpoint != "disabled" {
        e.push(
            format!("{mp}.httpEndpoint"),
            "must be one of enabled, disabled",
        );
    }
    if m.http_protocol_ipv6 != "enabled" && m.http_protocol_ipv6 != "disabled" {
        e.push(
            format!("{mp}.httpProtocolIPv6"),
            "must be one of enabled, disabled",
        );
    }
    if m.http_tokens != "required" && m.http_tokens != "optional" {
        e.push(
            format!("{mp}.httpTokens"),
            "must be one of required, optional",
        );
    }
    if !(1..=64).contains(&m.http_put_response_hop_limit) {
        e.push(
            format!("{mp}.httpPutResponseHopLimit"),
            "must be between 1 and 64",
        );
    }
}

/// `tags`: none of the keys the agent sets itself.
fn class_tags(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    for k in spec.tags.keys() {
        let p = format!("{path}.tags[{k:?}]");
        if let Some(why) = super::tags::reserved(k) {
            e.push(&p, why.message());
        }
        if k.is_empty() || k.len() > 128 {
            e.push(&p, "tag keys must be 1 to 128 characters");
        }
    }
}

/// `kubelet`: limits, reserved resources and eviction thresholds the kubelet accepts.
fn class_kubelet(e: &mut Errors, spec: &NodeClassSpec, path: &str) {
    let Some(k) = &spec.kubelet else {
        return;
    };
    let kp = format!("{path}.kubelet");
    if k.max_pods.is_some_and(|v| v < 1) {
        e.push(format!("{kp}.maxPods"), "must be at least 1");
    }
    if k.pods_per_core.is_some_and(|v| v < 1) {
        e.push(format!("{kp}.podsPerCore"), "must be at least 1");
    }
    for (field, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
    ] {
        for (r, q) in map {
            let p = format!("{kp}.{field}[{r:?}]");
            if !RESERVED_RESOURCES.contains(&r.as_str()) {
                e.push(
                    &p,
                    "resource must be one of cpu, memory, ephemeral-storage, pid",
                );
            }
            if let Err(m) = parse_quantity(q) {
                e.push(&p, m);
            }
        }
    }
    for (field, map) in [
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
    ] {
        for (s, q) in map {
            let p = format!("{kp}.{field}[{s:?}]");
            if !EVICTION_SIGNALS.contains(&s.as_str()) {
                e.push(
                    &p,
                    format!("signal must be one of {}", EVICTION_SIGNALS.join(", ")),
                );
            }
            let ok = match q.strip_suffix('%') {
                Some(pct) => pct.parse::<f64>().is_ok_and(|v| (0.0..=100.0).contains(&v)),
                None => parse_quantity(q).is_ok(),
            };
            if !ok {
                e.push(&p, "must be a quantity or a percentage");
            }
        }
    }
    for (s, d) in &k.eviction_soft_grace_period {
        if let Err(m) = duration::parse_seconds(d) {
            e.push(format!("{kp}.evictionSoftGracePeriod[{s:?}]"), m);
        }
    }
    for s in k.eviction_soft.keys() {
        if !k.eviction_soft_grace_period.contains_key(s) {
            e.push(
                format!("{kp}.evictionSoftGracePeriod[{s:?}]"),
                "required for every evictionSoft signal",
            );
        }
    }
}

/// The kubelet's eviction signals.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// The most values one requirement may list (a claim lists at most 60 instance types).
pub const MAX_VALUES: usize = 1000;

/// EBS volume types.
pub const VOLUME_TYPES: &[&str] = &["gp2", "gp3", "io1", "io2", "sc1", "st1", "standard"];

/// Resources the kubelet may reserve.
pub const RESERVED_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// A list or map with more than `max` entries; the CRDs carry the same bounds, which keep
/// the API server's cost estimate of their CEL rules within its budget.
fn at_most(e: &mut Errors, path: &str, len: usize, max: usize, what: &str) {
    if len > max {
        e.push(path, format!("at most {max} {what}"));
    }
}

/// Each entry of `reqs`, whose reading `parsed` holds in the same order.
fn requirements(
    e: &mut Errors,
    path: &str,
    reqs: &[NodeSelectorRequirementWithMinValues],
    parsed: &ParsedRequirements,
) {
    if reqs.len() > 100 {
        e.push(path, "at most 100 requirements");
    }
    for (i, (r, (_, read))) in reqs.iter().zip(&parsed.entries).enumerate() {
        let p = format!("{path}[{i}]");
        if r.key.is_empty() {
            e.push(format!("{p}.key"), "must not be empty");
        } else {
            label_key(e, &format!("{p}.key"), &r.key);
        }
        if labels::RESTRICTED.contains(&r.key.as_str()) {
            e.push(
                format!("{p}.key"),
                format!(
                    "label {} is set by the agent and may not be required",
                    r.key
                ),
            );
        } else if let Some((_, why)) = labels::NOT_MODELLED.iter().find(|(k, _)| *k == r.key) {
            e.push(
                format!("{p}.key"),
                format!(
                    "{} is a Karpenter label joiner does not support: {why}",
                    r.key
                ),
            );
        } else if !labels::is_requirable(&r.key) {
            let modelled: Vec<&str> = labels::WELL_KNOWN
                .iter()
                .chain(labels::JOINER_USER_LABELS)
                .copied()
                .filter(|k| !labels::RESTRICTED.contains(k) && labels::in_reserved_domain(k))
                .collect();
            e.push(
                format!("{p}.key"),
                format!(
                    "{} is in a domain whose labels joiner sets itself ({}), and joiner does not \
                     model this key: as a custom label it would admit every instance type. \
                     Requirable keys there: {}",
                    r.key,
                    labels::RESERVED_DOMAINS.join(", "),
                    modelled.join(", ")
                ),
            );
        }
        at_most(
            e,
            &format!("{p}.values"),
            r.values.len(),
            MAX_VALUES,
            "values",
        );
        let op = match read {
            Ok((op, _)) => *op,
            Err(EntryError::Operator(_)) => {
                e.push(
                    format!("{p}.operator"),
                    format!("must be one of {OPERATORS}"),
                );
                continue;
            }
            Err(EntryError::Values(op, m)) => {
                e.push(format!("{p}.values"), m);
                *op
            }
        };
        for (j, v) in r.values.iter().enumerate() {
            label_value(e, &format!("{p}.values[{j}]"), v);
        }
        if r.key == labels::CAPACITY_TYPE && matches!(op, Operator::In | Operator::NotIn) {
            for (j, v) in r.values.iter().enumerate() {
                if crate::catalog::CapacityType::parse(v).is_none() {
                    e.push(
                        format!("{p}.values[{j}]"),
                        "must be one of spot, on-demand, reserved",
                    );
                }
            }
        }
        if let Some(m) = r.min_values {
            if !(1..=50).contains(&m) {
                e.push(format!("{p}.minValues"), "must be between 1 and 50");
            } else if op == Operator::In && (m as usize) > r.values.len() {
                e.push(
                    format!("{p}.minValues"),
                    format!("is {m} but only {} value(s) are listed", r.values.len()),
                );
            } else if !matches!(op, Operator::In | Operator::Exists | Operator::NotIn) {
                e.push(
                    format!("{p}.minValues"),
                    "only applies to In, NotIn and Exists",
                );
            }
        }
    }
}

fn taints(e: &mut Errors, path: &str, ts: &[Taint]) {
    for (i, t) in ts.iter().enumerate() {
        let p = format!("{path}[{i}]");
        if t.key.is_empty() {
            e.push(format!("{p}.key"), "must not be empty");
        } else {
            label_key(e, &format!("{p}.key"), &t.key);
        }
        if crate::taints::Effect::parse(&t.effect).is_err() {
            e.push(
                format!("{p}.effect"),
                "must be one of NoSchedule, PreferNoSchedule, NoExecute",
            );
        }
        if !t.value.is_empty() {
            label_value(e, &format!("{p}.value"), &t.value);
        }
    }
}

/// A qualified name: optional DNS-subdomain prefix and `/`, then a name of up to 63
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn label_key(e: &mut Errors, path: &str, k: &str) {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if !crate::labels::is_dns_subdomain(p) {
            e.push(
                path,
                format!("invalid label key {k:?}: the prefix must be a DNS subdomain"),
            );
            return;
        }
    }
    if !name_ok(name) {
        e.push(
            path,
            format!("invalid label key {k:?}: the name must be 1-63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"),
        );
    }
}

fn label_value(e: &mut Errors, path: &str, v: &str) {
    if !v.is_empty() && !name_ok(v) {
        e.push(
            path,
            format!("invalid label value {v:?}: at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"),
        );
    }
}

fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn selector_tags(e: &mut Errors, path: &str, tags: &std::collections::BTreeMap<String, String>) {
    at_most(e, path, tags.len(), 50, "tags");
    for (k, v) in tags {
        if k.is_empty() {
            e.push(path, "tag keys must not be empty");
        }
        if v.is_empty() {
            e.push(
                format!("{path}[{k:?}]"),
                "tag values must not be empty (use * to match any value)",
            );
        }
    }
}

fn aws_id(e: &mut Errors, path: &str, id: &str, prefix: &str) {
    let ok = id
        .strip_prefix(prefix)
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit()));
    if !ok {
        e.push(path, format!("must look like {prefix}0123456789abcdef"));
    }
}

fn budget_nodes(e: &mut Errors, path: &str, v: &str) {
    let ok = match v.strip_suffix('%') {
        Some(p) => p.parse::<u32>().is_ok_and(|n| n <= 100),
        None => v.parse::<u32>().is_ok(),
    };
    if !ok {
        e.push(
            path,
            "must be a non-negative integer or a percentage from 0% to 100%",
        );
    }
}

/// A 5-field cron expression or one of the `@` macros, checked for shape and ranges.
fn cron(s: &str) -> Result<(), String> {
    const MACROS: &[&str] = &[
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    if s.starts_with('@') {
        return if MACROS.contains(&s) {
            Ok(())
        } else {
            Err(format!(
                "unknown macro {s:?}; use one of {}",
                MACROS.join(", ")
            ))
        };
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(
            "must have 5 fields (minute hour day-of-month month day-of-week) or be an @ macro"
                .into(),
        );
    }
    let ranges = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
    let names = ["minute", "hour", "day-of-month", "month", "day-of-week"];
    for ((f, (lo, hi)), name) in fields.iter().zip(ranges).zip(names) {
        for part in f.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, st)) => (r, Some(st)),
                None => (part, None),
            };
            if let Some(st) = step {
                if st.parse::<u32>().map_or(true, |n| n == 0) {
                    return Err(format!("{name} field {f:?}: invalid step"));
                }
            }
            if range == "*" || range == "?" {
                continue;
            }
            let ends: Vec<&str> = range.split('-').collect();
            if ends.len() > 2 {
                return Err(format!("{name} field {f:?}: invalid range"));
            }
            for end in ends {
                let ok = end.parse::<u32>().is_ok_and(|n| (lo..=hi).contains(&n))
                    || (name == "month"
                        && end.len() == 3
                        && end.chars().all(|c| c.is_ascii_alphabetic()))
                    || (name == "day-of-week"
                        && end.len() == 3
                        && end.chars().all(|c| c.is_ascii_alphabetic()));
                if !ok {
                    return Err(format!("{name} field {f:?}: values must be {lo}-{hi}"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::node_class::*;
    use super::super::node_pool::*;
    use super::super::NodeClassReference;
    use super::*;

    fn pool() -> NodePoolSpec {
        NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: Default::default(),
                spec: NodeClaimTemplateSpec {
                    node_class_ref: NodeClassReference {
                        group: "joiner.dev".into(),
                        kind: "NodeClass".into(),
                        name: "default".into(),
                    },
                    requirements: vec![NodeSelectorRequirementWithMinValues {
                        key: labels::CAPACITY_TYPE.into(),
                        operator: "In".into(),
                        values: vec!["spot".into(), "on-demand".into()],
                        min_values: None,
                    }],
                    expire_after: "720h".into(),
                    ..Default::default()
                },
            },
            disruption: Disruption::default(),
            limits: [("cpu".to_string(), "1000".to_string())]
                .into_iter()
                .collect(),
            weight: Some(10),
            ..Default::default()
        }
    }

    #[test]
    fn valid_pool_has_no_errors() {
        assert_eq!(node_pool(&pool(), "spec"), vec![]);
    }

    #[test]
    fn a_node_count_limit_is_a_whole_number() {
        let mut p = pool();
        p.limits.insert("nodes".into(), "10".into());
        assert_eq!(node_pool(&p, "spec"), vec![]);
        p.limits.insert("nodes".into(), "10Gi".into());
        let errs = node_pool(&p, "spec");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].path, "spec.limits[\"nodes\"]");
    }

    #[test]
    fn static_pools_headroom_and_repair_are_checked_with_their_paths() {
        let mut p = pool();
        p.disruption.consolidation_policy = "Balanced".into();
        p.disruption.spot_to_spot_consolidation = true;
        p.disruption.consolidation_evictions_per_hour = Some(30);
        p.headroom = vec![
            Headroom {
                cpu: Some("1".into()),
                memory: Some("2Gi".into()),
                pods: Some(4),
                ..Default::default()
            },
            Headroom {
                nodes: Some(2),
                schedule: Some("0 8 * * mon-fri".into()),
                duration: Some("10h".into()),
                ..Default::default()
            },
        ];
        p.repair = Some(Repair {
            policies: vec![RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: "Unknown".into(),
                toleration_duration: "5m".into(),
            }],
        });
        assert_eq!(node_pool(&p, "spec"), vec![]);

        let mut bad = pool();
        bad.replicas = Some(-1);
        bad.headroom = vec![
            Headroom {
                cpu: Some("0".into()),
                nodes: Some(1),
                ..Default::default()
            },
            Headroom::default(),
            Headroom {
                pods: Some(3),
                schedule: Some("@daily".into()),
                ..Default::default()
            },
        ];
        bad.repair = Some(Repair {
            policies: vec![RepairPolicy {
                condition_type: String::new(),
                condition_status: "Maybe".into(),
                toleration_duration: "soon".into(),
            }],
        });
        let errs: Vec<String> = node_pool(&bad, "spec")
            .iter()
            .map(|e| e.to_string())
            .collect();
        for x in [
            "spec.replicas: must not be negative",
            "spec.limits[\"cpu\"]: a static NodePool (replicas set) supports only the nodes limit",
            "spec.weight: a static NodePool (replicas set) takes no weight: it never launches for pending pods",
            "spec.headroom: a static NodePool (replicas set) keeps a fixed node count; headroom needs a dynamic pool",
            "spec.headroom[0].nodes: either nodes (spare nodes) or cpu/memory/pods (room for pods), not both",
            "spec.headroom[0].cpu: must be more than 0",
            "spec.headroom[1]: one of cpu, memory or nodes is required",
            "spec.headroom[2]: pods needs cpu or memory: the size of one pod to make room for",
            "spec.headroom[2].duration: required when schedule is set",
            "spec.repair.policies[0].conditionType: must not be empty",
            "spec.repair.policies[0].conditionStatus: must be one of True, False, Unknown",
        ] {
            assert!(errs.iter().any(|e| e == x), "missing {x:?} in {errs:#?}");
        }
        assert!(errs
            .iter()
            .any(|e| e.starts_with("spec.repair.policies[0].tolerationDuration: ")));
        // A static pool with only a node limit is fine.
        let mut ok = pool();
        ok.replicas = Some(3);
        ok.weight = None;
        ok.limits = [("nodes".to_string(), "5".to_string())].into();
        assert_eq!(node_pool(&ok, "spec"), vec![]);
    }

    #[test]
    fn a_v1beta1_policy_name_says_what_it_became() {
        let mut p = pool();
        p.disruption.consolidation_policy = "WhenUnderutilized".into();
        let errs = node_pool(&p, "spec");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].path, "spec.disruption.consolidationPolicy");
        assert!(
            errs[0]
                .message
                .contains("renamed WhenEmptyOrUnderutilized in Karpenter v1"),
            "{}",
            errs[0].message
        );
    }

    #[test]
    fn unmodelled_keys_in_karpenter_and_joiner_domains_are_refused() {
        let with = |key: &str| {
            let mut p = pool();
            p.template
                .spec
                .requirements
                .push(NodeSelectorRequirementWithMinValues {
                    key: key.into(),
                    operator: "In".into(),
                    values: vec!["x".into()],
                    min_values: None,
                });
            node_pool(&p, "spec")
        };
        for key in [
            "karpenter.k8s.aws/instance-gpu-memry",
            "karpenter.sh/something",
            "joiner.dev/anything",
            "node.karpenter.sh/x",
            "topology.k8s.aws/zone",
        ] {
            let errs = with(key);
            assert_eq!(errs.len(), 1, "{key}: {errs:?}");
            assert_eq!(errs[0].path, "spec.template.spec.requirements[1].key");
            assert!(errs[0].message.contains(key), "{}", errs[0].message);
            assert!(
                errs[0]
                    .message
                    .contains("karpenter.k8s.aws/instance-gpu-name"),
                "lists what is modelled: {}",
                errs[0].message
            );
        }
        // Karpenter's own that joiner does not build say why.
        let errs = with("karpenter.k8s.aws/placement-group-id");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].message.contains("placement group"),
            "{}",
            errs[0].message
        );
        // Every key Karpenter v1.14 derives from the instance type, the zone ID and the
        // NodeClass name is modelled.
        for key in labels::TYPE_LABELS
            .iter()
            .chain(&[labels::ZONE_ID, labels::NODE_CLASS])
        {
            assert_eq!(with(key), vec![], "{key}");
        }
        for key in [
            labels::INSTANCE_GPU_NAME,
            labels::INSTANCE_LOCAL_NVME,
            "joiner.dev/critical",
            "example.com/team",
            "team",
        ] {
            assert_eq!(with(key), vec![], "{key}");
        }
    }

    #[test]
    fn every_error_with_its_path() {
        let mut p = pool();
        p.template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: "kubernetes.io/arch".into(),
                operator: "Equals".into(),
                values: vec!["amd64".into()],
                min_values: None,
            });
        p.template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: labels::INSTANCE_FAMILY.into(),
                operator: "In".into(),
                values: vec!["c5".into()],
                min_values: Some(3),
            });
        p.template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: labels::INSTANCE_CPU.into(),
                operator: "Gt".into(),
                values: vec!["four".into()],
                min_values: None,
            });
        p.template.spec.taints.push(super::super::Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: "NoPlace".into(),
        });
        p.template
            .metadata
            .labels
            .insert("karpenter.sh/nodepool".into(), "x".into());
        p.template.spec.expire_after = "30 days".into();
        p.disruption.consolidation_policy = "Always".into();
        p.disruption.budgets.push(Budget {
            nodes: "150%".into(),
            schedule: Some("0 25 * * *".into()),
            duration: None,
            reasons: vec!["Bored".into()],
        });
        p.limits.insert("memory".into(), "lots".into());
        p.weight = Some(0);
        let errs: Vec<String> = node_pool(&p, "spec")
            .iter()
            .map(|e| e.to_string())
            .collect();
        let expect = [
            "spec.template.spec.requirements[1].operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte",
            "spec.template.spec.requirements[2].minValues: is 3 but only 1 value(s) are listed",
            "spec.template.spec.requirements[3].values: operator Gt needs an integer value, got \"four\"",
            "spec.template.spec.taints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute",
            "spec.template.metadata.labels[\"karpenter.sh/nodepool\"]: label karpenter.sh/nodepool is set by the agent and may not be set here",
            "spec.disruption.consolidationPolicy: must be one of WhenEmpty, WhenEmptyOrUnderutilized, Balanced",
            "spec.disruption.budgets[1].nodes: must be a non-negative integer or a percentage from 0% to 100%",
            "spec.disruption.budgets[1].duration: required when schedule is set",
            "spec.disruption.budgets[1].reasons[0]: must be one of Underutilized, Empty, Drifted",
            "spec.weight: must be between 1 and 100",
        ];
        for x in expect {
            assert!(errs.iter().any(|e| e == x), "missing {x:?} in {errs:#?}");
        }
        assert!(errs
            .iter()
            .any(|e| e.starts_with("spec.template.spec.expireAfter: ")));
        assert!(errs
            .iter()
            .any(|e| e.starts_with("spec.limits[\"memory\"]: invalid quantity")));
    }

    #[test]
    fn cron_and_budgets() {
        assert!(cron("0 9 * * mon-fri").is_ok());
        assert!(cron("*/15 0-6 1,15 * 0").is_ok());
        assert!(cron("@daily").is_ok());
        assert!(cron("@often").is_err());
        assert!(cron("0 24 * * *").unwrap_err().contains("hour"));
        assert!(cron("* * *").is_err());
    }

    fn class() -> NodeClassSpec {
        NodeClassSpec {
            subnet_selector_terms: vec![SubnetSelectorTerm {
                tags: [("joiner.dev/discovery".to_string(), "demo".to_string())]
                    .into_iter()
                    .collect(),
                id: None,
            }],
            security_group_selector_terms: vec![SecurityGroupSelectorTerm {
                id: Some("sg-0123abcd".into()),
                ..Default::default()
            }],
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some("al2023@latest".into()),
                ..Default::default()
            }],
            role: Some("joiner-node".into()),
            ..Default::default()
        }
    }

    /// An AL2 alias is refused with its reason: EKS publishes no AL2 node images any more.
    #[test]
    fn an_al2_alias_is_refused_with_the_reason() {
        let mut c = class();
        c.ami_selector_terms[0].alias = Some("al2@latest".into());
        let errs: Vec<String> = node_class(&c, "spec")
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("spec.amiSelectorTerms[0].alias: al2 is not available")
                && errs[0].contains("al2023@latest"),
            "{errs:?}"
        );
    }

    #[test]
    fn node_class_defaults_and_errors() {
        let c = class();
        assert_eq!(
            c.metadata_options.http_tokens, "required",
            "IMDSv2 by default"
        );
        assert_eq!(c.metadata_options.http_put_response_hop_limit, 1);
        assert_eq!(node_class(&c, "spec"), vec![]);
        let mut c = class();
        c.instance_profile = Some("x".into());
        c.subnet_selector_terms.push(SubnetSelectorTerm::default());
        c.ami_selector_terms[0].alias = Some("ubuntu@22".into());
        c.metadata_options.http_tokens = "sometimes".into();
        c.metadata_options.http_put_response_hop_limit = 0;
        c.tags
            .insert("kubernetes.io/cluster/demo".into(), "owned".into());
        c.kubelet = Some(KubeletConfiguration {
            max_pods: Some(0),
            eviction_hard: [("memory.free".to_string(), "5%".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        });
        c.block_device_mappings = vec![BlockDeviceMapping {
            device_name: "/dev/xvda".into(),
            ebs: Some(BlockDevice {
                volume_size: Some("10Mi".into()),
                volume_type: Some("gp9".into()),
                ..Default::default()
            }),
            root_volume: true,
        }];
        let errs: Vec<String> = node_class(&c, "spec")
            .iter()
            .map(|e| e.to_string())
            .collect();
        let expect = [
            "spec: role and instanceProfile are mutually exclusive",
            "spec.subnetSelectorTerms[1]: one of tags or id is required",
            "spec.amiSelectorTerms[0].alias: must be family@version with family al2023 or bottlerocket (e.g. al2023@latest)",
            "spec.metadataOptions.httpTokens: must be one of required, optional",
            "spec.metadataOptions.httpPutResponseHopLimit: must be between 1 and 64",
            "spec.tags[\"kubernetes.io/cluster/demo\"]: tag is set by the agent and may not be set here",
            "spec.kubelet.maxPods: must be at least 1",
            "spec.blockDeviceMappings[0].ebs.volumeSize: must be between 1Gi and 64Ti",
            "spec.blockDeviceMappings[0].ebs.volumeType: must be one of gp2, gp3, io1, io2, sc1, st1, standard",
        ];
        for x in expect {
            assert!(errs.iter().any(|e| e == x), "missing {x:?} in {errs:#?}");
        }
        assert!(errs
            .iter()
            .any(|e| e
                .starts_with("spec.kubelet.evictionHard[\"memory.free\"]: signal must be one of")));
    }

    #[test]
    fn kubelet_settings_from_spec() {
        let mut c = class();
        c.kubelet = Some(KubeletConfiguration {
            max_pods: Some(110),
            kube_reserved: [("cpu".to_string(), "200m".to_string())]
                .into_iter()
                .collect(),
            eviction_hard: [("memory.available".to_string(), "200Mi".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        });
        let s = c.kubelet_settings();
        assert_eq!(s.max_pods, Some(110));
        assert_eq!(s.kube_reserved_cpu_milli, Some(200));
        assert_eq!(s.eviction_hard_memory_bytes, 200 << 20);
    }
}
