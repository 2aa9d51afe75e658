//! Karpenter `EC2NodeClass` (v1, v1beta1), `AWSNodeTemplate` (v1alpha1) and a v1alpha5
//! Provisioner's inline `provider` block to `joiner_node_class`.

use super::hcl::{identifier, Block, Expr};
use super::{inline, scalar, str_at, string_map, text, text_map, Options};
use joiner_agent::api::tags;
use serde_yaml::Value;

pub fn is_node_class(doc: &Value) -> bool {
    matches!(
        (str_at(doc, &["apiVersion"]), str_at(doc, &["kind"])),
        (
            Some("karpenter.k8s.aws/v1" | "karpenter.k8s.aws/v1beta1"),
            Some("EC2NodeClass")
        ) | (Some("karpenter.k8s.aws/v1alpha1"), Some("AWSNodeTemplate"))
    )
}

pub fn convert(doc: &Value, name: &str, opts: &Options) -> Result<Block, String> {
    let spec = doc.get("spec").ok_or("spec is missing")?;
    if str_at(doc, &["kind"]) == Some("AWSNodeTemplate") {
        return from_alpha_provider(spec, name, opts);
    }
    let mut b = start(name);
    b.attr("cluster_name", Expr::Raw(opts.cluster_name.clone()))
        .attr("name", Expr::Str(name.to_string()));
    role(&mut b, spec, opts);
    let family = str_at(spec, &["amiFamily"]);
    match spec.get("amiSelectorTerms").and_then(Value::as_sequence) {
        Some(terms) if !terms.is_empty() => {
            if let Some(f) = family {
                b.comment(&format!(
                    "changed: amiFamily {f} has no joiner field; an alias term names the family."
                ));
            }
            for t in terms {
                let mut tb = Block::new("ami_selector_term", &[]);
                for k in ["alias", "id", "name", "owner"] {
                    if let Some(v) = t.get(k).and_then(scalar) {
                        tb.attr(k, text(&v, opts));
                    }
                }
                tags_attr(&mut tb, t.get("tags"), opts);
                if t.get("ssmParameter").is_some() {
                    b.comment("not converted: amiSelectorTerms[].ssmParameter.");
                }
                b.block(tb);
            }
        }
        _ => alias_for_family(&mut b, family),
    }
    for (field, block, keys) in [
        ("subnetSelectorTerms", "subnet_selector_term", &["id"][..]),
        (
            "securityGroupSelectorTerms",
            "security_group_selector_term",
            &["id", "name"][..],
        ),
    ] {
        let terms = spec.get(field).and_then(Value::as_sequence);
        for t in terms.into_iter().flatten() {
            let mut tb = Block::new(block, &[]);
            tags_attr(&mut tb, t.get("tags"), opts);
            for k in keys {
                if let Some(v) = t.get(*k).and_then(scalar) {
                    tb.attr(k, text(&v, opts));
                }
            }
            b.block(tb);
        }
        if terms.is_none_or(|t| t.is_empty()) {
            discovery_term(&mut b, block, field, opts);
        }
    }
    common(&mut b, spec, opts);
    if let Some(k) = spec.get("kubelet") {
        let kb = kubelet(&mut b, k);
        b.block(kb);
    }
    let reservations = spec
        .get("capacityReservationSelectorTerms")
        .and_then(Value::as_sequence);
    for t in reservations.into_iter().flatten() {
        let mut tb = Block::new("capacity_reservation_selector_term", &[]);
        tags_attr(&mut tb, t.get("tags"), opts);
        for (k, attr) in [
            ("id", "id"),
            ("ownerID", "owner_id"),
            ("instanceMatchCriteria", "instance_match_criteria"),
        ] {
            if let Some(v) = t.get(k).and_then(scalar) {
                tb.attr(attr, text(&v, opts));
            }
        }
        b.block(tb);
    }
    if spec.get("context").is_some() {
        b.comment("not converted: spec.context has no joiner equivalent yet.");
    }
    Ok(b)
}

/// A v1alpha5 `provider` block or a v1alpha1 `AWSNodeTemplate` spec: selectors were flat
/// tag maps, with `aws-ids` (and `aws::name`, `aws::owners` for AMIs) as special keys.
pub fn from_alpha_provider(p: &Value, name: &str, opts: &Options) -> Result<Block, String> {
    let mut b = start(name);
    b.attr("cluster_name", Expr::Raw(opts.cluster_name.clone()))
        .attr("name", Expr::Str(name.to_string()));
    role(&mut b, p, opts);
    let ami = string_map(p.get("amiSelector"));
    if ami.is_empty() {
        alias_for_family(&mut b, str_at(p, &["amiFamily"]));
    } else {
        if let Some(f) = str_at(p, &["amiFamily"]) {
            b.comment(&format!(
                "changed: amiFamily {f} has no joiner field; an alias term names the family."
            ));
        }
        alpha_selector(&mut b, "ami_selector_term", &ami, opts);
    }
    for (field, block) in [
        ("subnetSelector", "subnet_selector_term"),
        ("securityGroupSelector", "security_group_selector_term"),
    ] {
        let selector = string_map(p.get(field));
        if selector.is_empty() {
            discovery_term(&mut b, block, field, opts);
        } else {
            alpha_selector(&mut b, block, &selector, opts);
        }
    }
    common(&mut b, p, opts);
    for field in ["launchTemplate", "context"] {
        if p.get(field).is_some() {
            b.comment(&format!(
                "not converted: {field} has no joiner equivalent (joiner builds the launch template)."
            ));
        }
    }
    Ok(b)
}

/// `instanceStorePolicy`: RAID0 is joiner's `instance_store_policy`; Karpenter knows no other.
fn instance_store_policy(b: &mut Block, spec: &Value) {
    match str_at(spec, &["instanceStorePolicy"]) {
        Some("RAID0") => {
            b.attr("instance_store_policy", Expr::Str("RAID0".into()));
        }
        Some(other) => {
            b.comment(&format!(
                "not converted: instanceStorePolicy {other} (joiner knows RAID0 only)."
            ));
        }
        None => {}
    }
}

fn start(name: &str) -> Block {
    Block::new("resource", &["joiner_node_class", &identifier(name)])
}

/// One term per id of `aws-ids` (comma-separated), one term for the remaining tags.
fn alpha_selector(b: &mut Block, block: &str, selector: &[(String, String)], opts: &Options) {
    let mut tags = Vec::new();
    for (k, v) in selector {
        match k.as_str() {
            "aws-ids" | "aws::ids" => {
                for id in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let mut tb = Block::new(block, &[]);
                    tb.attr("id", text(id, opts));
                    b.block(tb);
                }
            }
            "aws::name" => {
                let mut tb = Block::new(block, &[]);
                tb.attr("name", text(v, opts));
                b.block(tb);
            }
            "aws::owners" => {
                b.comment(&format!(
                    "changed: aws::owners {v} is an owner on each name or tag term."
                ));
            }
            _ => tags.push((k.clone(), v.clone())),
        }
    }
    if !tags.is_empty() {
        let mut tb = Block::new(block, &[]);
        tb.attr("tags", text_map(&tags, opts));
        b.block(tb);
    }
}

/// joiner requires subnet and security-group terms; Karpenter's older releases could take
/// them from elsewhere (Helm values, the launch template). The getting-started tag is the
/// likeliest intent, and `terraform plan` shows the selection before anything launches.
fn discovery_term(b: &mut Block, block: &str, field: &str, opts: &Options) {
    b.comment(&format!(
        "changed: the manifest has no {field}; joiner needs one. This assumes Karpenter's getting-started tag."
    ));
    let mut tb = Block::new(block, &[]);
    tb.attr(
        "tags",
        Expr::Map(vec![(
            "karpenter.sh/discovery".to_string(),
            Expr::Raw(opts.cluster_name.clone()),
        )]),
    );
    b.block(tb);
}

fn alias_for_family(b: &mut Block, family: Option<&str>) {
    let alias = match family.unwrap_or("AL2") {
        "AL2023" => "al2023@latest",
        "Bottlerocket" => "bottlerocket@latest",
        "AL2" => {
            b.comment(
                "changed: amiFamily AL2 (the default before v1) has no images any more: EKS stopped publishing AL2 node images on 2025-11-26, so al2023@latest stands in; its nodes boot with nodeadm, so review any AL2 user data (bootstrap.sh flags).",
            );
            "al2023@latest"
        }
        other => {
            b.comment(&format!(
                "changed: amiFamily {other} has no joiner alias; al2023@latest stands in, replace it with id or name terms for your AMI."
            ));
            "al2023@latest"
        }
    };
    let mut tb = Block::new("ami_selector_term", &[]);
    tb.attr("alias", Expr::Str(alias.to_string()));
    b.block(tb);
}

fn role(b: &mut Block, spec: &Value, opts: &Options) {
    match (str_at(spec, &["role"]), str_at(spec, &["instanceProfile"])) {
        (Some(r), _) => {
            b.attr("role", text(r, opts));
        }
        (None, Some(p)) => {
            b.attr("instance_profile", text(p, opts));
        }
        (None, None) => {
            b.comment("changed: the manifest names no role or instance profile (Karpenter took a default from its Helm values).");
            b.attr("role", Expr::Raw(opts.node_role.clone()));
        }
    }
}

fn tags_attr(b: &mut Block, tags: Option<&Value>, opts: &Options) {
    let tags = string_map(tags);
    if !tags.is_empty() {
        b.attr("tags", text_map(&tags, opts));
    }
}

/// The fields every generation spells the same way.
fn common(b: &mut Block, spec: &Value, opts: &Options) {
    if let Some(u) = str_at(spec, &["userData"]) {
        b.attr("user_data", text(u, opts));
    }
    // Tags a joiner NodeClass refuses: the agent's own (it writes them on every instance),
    // and Karpenter's ownership tag.
    let (owned, tags): (Vec<_>, Vec<_>) = string_map(spec.get("tags"))
        .into_iter()
        .partition(|(k, _)| tags::reserved(k).is_some());
    for (k, _) in &owned {
        let why = match tags::reserved(k) {
            Some(tags::Reserved::Karpenters) => "marks Karpenter's own instances",
            _ => "is set by the agent on every instance",
        };
        b.comment(&format!("not converted: tag {k} {why}."));
    }
    if !tags.is_empty() {
        b.attr("tags", text_map(&tags, opts));
    }
    if let Some(v) = spec
        .get("associatePublicIPAddress")
        .and_then(Value::as_bool)
    {
        b.attr("associate_public_ip_address", Expr::Bool(v));
    }
    if let Some(v) = spec.get("detailedMonitoring").and_then(Value::as_bool) {
        b.attr("detailed_monitoring", Expr::Bool(v));
    }
    instance_store_policy(b, spec);
    if let Some(m) = spec.get("metadataOptions") {
        let mut mb = Block::new("metadata_options", &[]);
        // joiner's defaults are left out: the provider reads a default back as unset, so
        // spelling it out would show as a change after `terraform import`.
        for (k, hk, default) in [
            ("httpEndpoint", "http_endpoint", "enabled"),
            ("httpProtocolIPv6", "http_protocol_ipv6", "disabled"),
            ("httpTokens", "http_tokens", "required"),
        ] {
            if let Some(v) = str_at(m, &[k]).filter(|v| *v != default) {
                mb.attr(hk, Expr::Str(v.to_string()));
            }
        }
        if let Some(v) = m
            .get("httpPutResponseHopLimit")
            .and_then(Value::as_i64)
            .filter(|v| *v != 1)
        {
            mb.attr("http_put_response_hop_limit", Expr::Int(v));
        }
        if str_at(m, &["httpTokens"]) == Some("optional") {
            b.comment("changed: httpTokens optional allows IMDSv1; joiner accepts it, but required is its default.");
        }
        if !mb.is_empty() {
            b.block(mb);
        }
    }
    for d in spec
        .get("blockDeviceMappings")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        let mut db = Block::new("block_device_mapping", &[]);
        if let Some(n) = str_at(d, &["deviceName"]) {
            db.attr("device_name", Expr::Str(n.to_string()));
        }
        if let Some(r) = d.get("rootVolume").and_then(Value::as_bool) {
            db.attr("root_volume", Expr::Bool(r));
        }
        let ebs = d.get("ebs").unwrap_or(&Value::Null);
        for (k, hk) in [
            ("volumeSize", "volume_size"),
            ("volumeType", "volume_type"),
            ("kmsKeyID", "kms_key_id"),
            ("snapshotID", "snapshot_id"),
        ] {
            if let Some(v) = ebs.get(k).and_then(scalar) {
                db.attr(hk, Expr::Str(v));
            }
        }
        for (k, hk) in [("iops", "iops"), ("throughput", "throughput")] {
            if let Some(v) = ebs.get(k).and_then(Value::as_i64) {
                db.attr(hk, Expr::Int(v));
            }
        }
        // Both default to true in joiner (and Karpenter); only a `false` is written.
        for (k, hk) in [
            ("encrypted", "encrypted"),
            ("deleteOnTermination", "delete_on_termination"),
        ] {
            if let Some(false) = ebs.get(k).and_then(Value::as_bool) {
                db.attr(hk, Expr::Bool(false));
            }
        }
        b.block(db);
    }
}

fn kubelet(b: &mut Block, k: &Value) -> Block {
    let mut kb = Block::new("kubelet", &[]);
    for (f, hf) in [
        ("maxPods", "max_pods"),
        ("podsPerCore", "pods_per_core"),
        ("evictionMaxPodGracePeriod", "eviction_max_pod_grace_period"),
    ] {
        if let Some(v) = k.get(f).and_then(Value::as_i64) {
            kb.attr(hf, Expr::Int(v));
        }
    }
    for (f, hf) in [
        ("systemReserved", "system_reserved"),
        ("kubeReserved", "kube_reserved"),
        ("evictionHard", "eviction_hard"),
        ("evictionSoft", "eviction_soft"),
        ("evictionSoftGracePeriod", "eviction_soft_grace_period"),
    ] {
        let m = string_map(k.get(f));
        if !m.is_empty() {
            kb.attr(
                hf,
                Expr::Map(m.into_iter().map(|(k, v)| (k, Expr::Str(v))).collect()),
            );
        }
    }
    if let Some(dns) = k.get("clusterDNS").and_then(Value::as_sequence) {
        kb.attr(
            "cluster_dns",
            Expr::List(dns.iter().filter_map(scalar).map(Expr::Str).collect()),
        );
    }
    let known = [
        "maxPods",
        "podsPerCore",
        "evictionMaxPodGracePeriod",
        "systemReserved",
        "kubeReserved",
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
        "clusterDNS",
    ];
    for (f, v) in k.as_mapping().into_iter().flatten() {
        if let Some(f) = f.as_str() {
            if !known.contains(&f) {
                b.comment(&format!(
                    "not converted: kubelet.{f} = {} has no joiner equivalent.",
                    inline(v)
                ));
            }
        }
    }
    kb
}
