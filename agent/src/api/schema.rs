//! The API server's share of validation: the CustomResourceDefinitions with the rules of
//! [`super::validate`] that an OpenAPI schema can say (enums, patterns, bounds, required
//! fields) and those that cross fields as CEL `x-kubernetes-validations`, the way Karpenter's
//! own CRDs refuse a bad NodePool at `kubectl apply` instead of in the controller's log.
//!
//! The schemas are derived from the Rust types (`CustomResource` + schemars); [`crds`] adds
//! the rules below to what is derived. Always take the CRDs from here, never from
//! `NodePool::crd()` directly. The `logic` tests in `crds::rules` check the source tree for
//! that, and that the validator refuses every object of their table of bad objects by the
//! field it names; their `real_control_plane` module applies the same table to a real
//! kube-apiserver, which must refuse each by the same field.
//!
//! What stays with the validator alone (the agent refuses such an object when it reads it,
//! on the object's status and in an Event): cron ranges (`0 25 * * *`), a quantity's size
//! where no CEL quantity function says it (the kubelet reservations' and eviction
//! thresholds' units), and a requirement that conflicts with a template label through a
//! `Gt`/`Lt` bound.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{json, Value};

use super::launch_policy::{MinValuesPolicy, PriceRatio};
use super::validate::{
    CONDITION_STATUSES, CONSOLIDATION_POLICIES, EVICTION_SIGNALS, MAX_VALUES, RESERVED_RESOURCES,
    VOLUME_TYPES,
};
use super::{NodeClaim, NodeClass, NodeOverlay, NodePool};
use crate::labels;

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of 1-63 characters of
/// `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub const LABEL_KEY: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: empty, or a name as in [`LABEL_KEY`].
pub const LABEL_VALUE: &str = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";
/// A Go duration as [`super::duration::parse_seconds`] reads it (`720h`, `1h30m`, `1.5s`, `0`).
pub const DURATION: &str = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$";
/// [`DURATION`] or `Never`.
pub const DURATION_OR_NEVER: &str =
    r"^(Never|0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$";
/// A resource quantity (Kubernetes' `resource.Quantity` syntax).
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A budget's `nodes`: a count or a percentage up to 100 %.
pub const BUDGET_NODES: &str = r"^((100|[0-9]{1,2})%|[0-9]{1,9})$";
/// A cron schedule's shape: five fields or an `@` macro (the ranges are the validator's).
pub const CRON: &str = r"^\s*(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|[0-9A-Za-z*?,/-]+(\s+[0-9A-Za-z*?,/-]+){4})\s*$";
/// A bounded requirement's one integer value.
const INTEGER: &str = r"^-?[0-9]{1,18}$";

/// The four CRDs with their validation, as the agent serves them and the provider installs
/// them: NodePool, NodeClass, NodeClaim, NodeOverlay.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![node_pool(), node_class(), node_claim(), node_overlay()]
}

pub fn node_pool() -> CustomResourceDefinition {
    with_rules(NodePool::crd(), node_pool_rules)
}

pub fn node_class() -> CustomResourceDefinition {
    with_rules(NodeClass::crd(), node_class_rules)
}

pub fn node_claim() -> CustomResourceDefinition {
    with_rules(NodeClaim::crd(), node_claim_rules)
}

pub fn node_overlay() -> CustomResourceDefinition {
    with_rules(NodeOverlay::crd(), node_overlay_rules)
}

fn with_rules(crd: CustomResourceDefinition, rules: fn(&mut Spec)) -> CustomResourceDefinition {
    let mut v = serde_json::to_value(&crd).expect("a CRD serialises");
    let spec = v
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .expect("a CRD with a spec");
    rules(&mut Spec(spec));
    serde_json::from_value(v).expect("the CRD with its rules deserialises")
}

/// The spec's schema, edited by dotted path from the spec: `a.b` a property, `a[]` the
/// items of a list, `a{}` the values of a map; `""` is the spec itself.
struct Spec<'a>(&'a mut Value);

impl Spec<'_> {
    fn at(&mut self, path: &str) -> &mut serde_json::Map<String, Value> {
        let mut s: &mut Value = self.0;
        for part in path.split('.').filter(|p| !p.is_empty()) {
            let (name, suffix) = match part.find(['[', '{']) {
                Some(i) => part.split_at(i),
                None => (part, ""),
            };
            s = s
                .get_mut("properties")
                .and_then(|p| p.get_mut(name))
                .unwrap_or_else(|| panic!("no property {name:?} on the way to {path:?}"));
            for c in suffix.chars().filter(|c| *c == '[' || *c == '{') {
                let key = if c == '[' {
                    "items"
                } else {
                    "additionalProperties"
                };
                s = s
                    .get_mut(key)
                    .unwrap_or_else(|| panic!("no {key} on the way to {path:?}"));
            }
        }
        s.as_object_mut()
            .unwrap_or_else(|| panic!("{path:?} is not an object schema"))
    }

    fn set(&mut self, path: &str, key: &str, value: Value) -> &mut Self {
        self.at(path).insert(key.to_string(), value);
        self
    }

    fn one_of(&mut self, path: &str, values: &[&str]) -> &mut Self {
        self.set(path, "enum", json!(values))
    }

    fn pattern(&mut self, path: &str, re: &str) -> &mut Self {
        self.set(path, "pattern", json!(re))
    }

    fn range(&mut self, path: &str, min: i64, max: Option<i64>) -> &mut Self {
        self.set(path, "minimum", json!(min));
        if let Some(m) = max {
            self.set(path, "maximum", json!(m));
        }
        self
    }

    fn non_empty(&mut self, path: &str) -> &mut Self {
        self.set(path, "minLength", json!(1))
    }

    fn max_len(&mut self, path: &str, n: i64) -> &mut Self {
        self.set(path, "maxLength", json!(n))
    }

    fn items(&mut self, path: &str, min: Option<i64>, max: i64) -> &mut Self {
        if let Some(m) = min {
            self.set(path, "minItems", json!(m));
        }
        self.set(path, "maxItems", json!(max))
    }

    fn max_props(&mut self, path: &str, n: i64) -> &mut Self {
        self.set(path, "maxProperties", json!(n))
    }

    /// A CEL rule on `path`; `field` (`.values`) names the field the message is about.
    fn rule(&mut self, path: &str, rule: &str, message: &str, field: Option<&str>) -> &mut Self {
        let mut r = json!({"rule": rule, "message": message});
        if let Some(f) = field {
            r["fieldPath"] = json!(f);
        }
        let o = self.at(path);
        match o
            .entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]))
        {
            Value::Array(a) => a.push(r),
            _ => unreachable!("x-kubernetes-validations is a list"),
        }
        self
    }

    /// A label key: its syntax and length.
    fn label_key(&mut self, path: &str) -> &mut Self {
        self.max_len(path, 316).pattern(path, LABEL_KEY)
    }

    /// A label value.
    fn label_value(&mut self, path: &str) -> &mut Self {
        self.max_len(path, 63).pattern(path, LABEL_VALUE)
    }

    /// A string-to-string label map: its keys' syntax, its values', at most 100 entries.
    fn label_map(&mut self, path: &str) -> &mut Self {
        self.max_props(path, 100)
            .label_value(&format!("{path}{{}}"))
            .rule(
                path,
                &format!(
                    "self.all(k, size(k) <= 316 && k.matches({}))",
                    cel(LABEL_KEY)
                ),
                "every key must be a label key: an optional DNS subdomain and /, then 1-63 \
                 characters of [A-Za-z0-9_.-], starting and ending alphanumeric",
                None,
            )
    }

    /// A list of node selector requirements (NodePool, NodeClaim, NodeOverlay).
    /// `min_values`: `None` for no `minValues` field (overlays), `Some(count)` with the
    /// bounds, and with `count` the rules on the values it counts (a claim relaxed under
    /// `BestEffort` may list fewer).
    fn requirements(&mut self, path: &str, min_values: Option<bool>) -> &mut Self {
        let item = format!("{path}[]");
        let ops: Vec<&str> = crate::requirements::OPERATORS.split(", ").collect();
        self.items(path, None, 100)
            .label_key(&format!("{item}.key"))
            .one_of(&format!("{item}.operator"), &ops)
            .items(&format!("{item}.values"), None, MAX_VALUES as i64)
            .label_value(&format!("{item}.values[]"))
            .rule(
                &item,
                "self.operator != 'In' || (has(self.values) && size(self.values) > 0)",
                "operator In needs at least one value",
                Some(".values"),
            )
            .rule(
                &item,
                "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
                "operators Exists and DoesNotExist take no values",
                Some(".values"),
            )
            .rule(
                &item,
                &format!(
                    "!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && \
                     size(self.values) == 1 && self.values[0].matches({}))",
                    cel(INTEGER)
                ),
                "operators Gt, Lt, Gte and Lte need exactly one integer value",
                Some(".values"),
            )
            .rule(
                &item,
                &format!(
                    "self.key != {ct} || !(self.operator in ['In', 'NotIn']) || !has(self.values) \
                     || self.values.all(v, v in ['{}', '{}', '{}'])",
                    labels::CAPACITY_TYPE_SPOT,
                    labels::CAPACITY_TYPE_ON_DEMAND,
                    labels::CAPACITY_TYPE_RESERVED,
                    ct = cel(labels::CAPACITY_TYPE),
                ),
                "capacity type values must be spot, on-demand or reserved",
                Some(".values"),
            );
        if min_values.is_some() {
            self.range(&format!("{item}.minValues"), 1, Some(50));
        }
        if min_values == Some(true) {
            self.rule(
                    &item,
                    "!has(self.minValues) || self.operator != 'In' || (has(self.values) && size(self.values) >= self.minValues)",
                    "minValues may not exceed the number of values listed",
                    Some(".minValues"),
                )
                .rule(
                    &item,
                    "!has(self.minValues) || self.operator in ['In', 'NotIn', 'Exists']",
                    "minValues only applies to In, NotIn and Exists",
                    Some(".minValues"),
                );
        }
        self
    }

    /// A list of taints.
    fn taints(&mut self, path: &str) -> &mut Self {
        let item = format!("{path}[]");
        self.items(path, None, 100)
            .non_empty(&format!("{item}.key"))
            .label_key(&format!("{item}.key"))
            .label_value(&format!("{item}.value"))
            .one_of(
                &format!("{item}.effect"),
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            )
    }

    /// A cron `schedule` with its `duration` on the object at `path`: both or neither.
    fn window(&mut self, path: &str) -> &mut Self {
        self.pattern(&format!("{path}.schedule"), CRON)
            .pattern(&format!("{path}.duration"), DURATION)
            .rule(
                path,
                "!has(self.schedule) || has(self.duration)",
                "duration is required when schedule is set",
                Some(".duration"),
            )
            .rule(
                path,
                "!has(self.duration) || has(self.schedule)",
                "schedule is required when duration is set",
                Some(".schedule"),
            )
    }

    /// EC2 selector tags: non-empty keys and values (`*` matches any value).
    fn selector_tags(&mut self, path: &str) -> &mut Self {
        self.max_props(path, 50)
            .non_empty(&format!("{path}{{}}"))
            .rule(
                path,
                "self.all(k, k != '')",
                "tag keys must not be empty",
                None,
            )
    }
}

/// A string as a CEL literal.
fn cel(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// A list of strings as a CEL list literal.
fn cel_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let v: Vec<String> = items.into_iter().map(cel).collect();
    format!("[{}]", v.join(", "))
}

/// What the API server checks of a NodePool, as [`super::validate::node_pool`] does.
fn node_pool_rules(s: &mut Spec) {
    pool_template_rules(s);
    pool_disruption_and_limit_rules(s);
    pool_headroom_and_repair_rules(s);
}

/// The template: its labels, its NodeClass, its requirements, taints and lifetimes.
fn pool_template_rules(s: &mut Spec) {
    let t = "template.spec";
    // The template's labels: syntax, and none the agent sets.
    s.label_map("template.metadata.labels")
        .rule(
            "template.metadata.labels",
            &format!(
                "self.all(k, !(k in {}))",
                cel_list(labels::RESTRICTED.iter().copied())
            ),
            &format!(
                "labels {} are set by the agent and may not be set here",
                labels::RESTRICTED.join(", ")
            ),
            None,
        )
        .rule(
            "template.metadata.annotations",
            "self.all(k, k != '')",
            "annotation keys must not be empty",
            None,
        )
        .max_props("template.metadata.annotations", 100);
    // What the template's labels imply must not contradict a requirement on the same key.
    s.rule(
        "template",
        "!has(self.metadata.labels) || !has(self.spec.requirements) || self.spec.requirements.all(r, \
         !(r.key in self.metadata.labels) || \
         (r.operator == 'In' ? (has(r.values) && self.metadata.labels[r.key] in r.values) : \
          r.operator == 'NotIn' ? !(has(r.values) && self.metadata.labels[r.key] in r.values) : \
          r.operator != 'DoesNotExist'))",
        "a requirement conflicts with a template label on the same key",
        Some(".spec.requirements"),
    );
    // nodeClassRef: a NodeClass of this group, by name.
    s.non_empty(&format!("{t}.nodeClassRef.name"))
        .one_of(&format!("{t}.nodeClassRef.group"), &[super::GROUP])
        .one_of(&format!("{t}.nodeClassRef.kind"), &["NodeClass"]);
    // Requirements: shape, and the keys a pool may require.
    let key = format!("{t}.requirements[].key");
    s.requirements(&format!("{t}.requirements"), Some(true))
        .rule(
            &key,
            &format!(
                "!(self in {})",
                cel_list(labels::RESTRICTED.iter().copied())
            ),
            "the label is set by the agent and may not be required",
            None,
        )
        .rule(
            &key,
            &format!(
                "!(self in {})",
                cel_list(labels::NOT_MODELLED.iter().map(|(k, _)| *k))
            ),
            "a Karpenter label joiner does not support (no placement groups)",
            None,
        )
        .rule(
            &key,
            &format!(
                "!self.matches({}) || self in {}",
                cel(&reserved_domain_pattern()),
                cel_list(requirable_reserved())
            ),
            &format!(
                "a key in a domain whose labels joiner sets itself ({}) must be one joiner \
                 models: {}",
                labels::RESERVED_DOMAINS.join(", "),
                requirable_reserved().join(", ")
            ),
            None,
        );
    s.taints(&format!("{t}.taints"))
        .taints(&format!("{t}.startupTaints"))
        .pattern(&format!("{t}.expireAfter"), DURATION_OR_NEVER)
        .pattern(&format!("{t}.terminationGracePeriod"), DURATION);
}

/// Disruption, limits, weight and price ratio, and what a static pool may not take.
fn pool_disruption_and_limit_rules(s: &mut Spec) {
    // Disruption.
    s.one_of("disruption.consolidationPolicy", CONSOLIDATION_POLICIES)
        .pattern("disruption.consolidateAfter", DURATION_OR_NEVER)
        .items("disruption.budgets", None, 50)
        .pattern("disruption.budgets[].nodes", BUDGET_NODES)
        .window("disruption.budgets[]")
        .items("disruption.budgets[].reasons", None, 50)
        .one_of(
            "disruption.budgets[].reasons[]",
            &["Underutilized", "Empty", "Drifted"],
        );
    // Limits: quantities; `nodes` a count.
    s.max_props("limits", 100)
        .pattern("limits{}", QUANTITY)
        .rule(
            "limits",
            "self.all(k, k != '')",
            "resource names must not be empty",
            None,
        )
        .rule(
            "limits",
            "!('nodes' in self) || self['nodes'].matches('^[0-9]{1,9}$')",
            "the nodes limit is a node count: a whole number such as \"10\"",
            None,
        );
    s.range("weight", 1, Some(100))
        .one_of(
            "minValuesPolicy",
            &MinValuesPolicy::VALUES.split(", ").collect::<Vec<_>>(),
        )
        .pattern("candidatePriceRatio", r"^[0-9]+(\.[0-9]+)?$")
        .max_len("candidatePriceRatio", 32)
        .rule(
            "candidatePriceRatio",
            &format!(
                "!self.matches('^[0-9]+(\\\\.[0-9]+)?$') || (double(self) >= 1.0 && double(self) <= {:.1})",
                PriceRatio::MAX
            ),
            &format!("must be a decimal number from 1 to {}", PriceRatio::MAX),
            None,
        );
    // Static pools (replicas), as Karpenter's: only a node limit, no weight; nor headroom.
    s.range("replicas", 0, None)
        .rule(
            "",
            "!has(self.replicas) || !has(self.limits) || self.limits.all(k, k == 'nodes')",
            "a static NodePool (replicas set) supports only the nodes limit",
            Some(".limits"),
        )
        .rule(
            "",
            "!has(self.replicas) || !has(self.weight)",
            "a static NodePool (replicas set) takes no weight",
            Some(".weight"),
        )
        .rule(
            "",
            "!has(self.replicas) || !has(self.headroom) || size(self.headroom) == 0",
            "a static NodePool (replicas set) takes no headroom",
            Some(".headroom"),
        )
        .rule(
            "",
            "has(self.replicas) == has(oldSelf.replicas)",
            "a NodePool cannot switch between static (replicas set) and dynamic (replicas unset)",
            Some(".replicas"),
        );
}

/// Headroom and repair policies.
fn pool_headroom_and_repair_rules(s: &mut Spec) {
    // Headroom.
    let h = "headroom[]";
    s.items("headroom", None, 50)
        .pattern("headroom[].cpu", QUANTITY)
        .max_len("headroom[].cpu", 64)
        .pattern("headroom[].memory", QUANTITY)
        .max_len("headroom[].memory", 64)
        .range("headroom[].pods", 1, None)
        .range("headroom[].nodes", 1, None)
        .rule(
            h,
            "!has(self.nodes) || !(has(self.cpu) || has(self.memory) || has(self.pods))",
            "either nodes (spare nodes) or cpu/memory/pods (room for pods), not both",
            Some(".nodes"),
        )
        .rule(
            h,
            "has(self.cpu) || has(self.memory) || has(self.pods) || has(self.nodes)",
            "one of cpu, memory or nodes is required",
            None,
        )
        .rule(
            h,
            "!has(self.pods) || has(self.cpu) || has(self.memory)",
            "pods needs cpu or memory: the size of one pod to make room for",
            None,
        )
        .rule(
            "headroom[].cpu",
            "!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))",
            "must be more than 0",
            None,
        )
        .rule(
            "headroom[].memory",
            "!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))",
            "must be more than 0",
            None,
        )
        .window(h);
    // Repair.
    s.items("repair.policies", None, 50)
        .non_empty("repair.policies[].conditionType")
        .one_of("repair.policies[].conditionStatus", CONDITION_STATUSES)
        .pattern("repair.policies[].tolerationDuration", DURATION);
}

/// `^([^/]*\.)?(karpenter\.sh|k8s\.aws|joiner\.dev)/`: a key in a reserved domain.
fn reserved_domain_pattern() -> String {
    let domains: Vec<String> = labels::RESERVED_DOMAINS
        .iter()
        .map(|d| d.replace('.', r"\."))
        .collect();
    format!(r"^([^/]*\.)?({})/", domains.join("|"))
}

/// The keys in a reserved domain a NodePool may require: those joiner models.
pub fn requirable_reserved() -> Vec<&'static str> {
    labels::WELL_KNOWN
        .iter()
        .chain(labels::JOINER_USER_LABELS)
        .copied()
        .filter(|k| !labels::RESTRICTED.contains(k) && labels::in_reserved_domain(k))
        .collect()
}

/// What the API server checks of a NodeClass, as [`super::validate::node_class`] does.
fn node_class_rules(s: &mut Spec) {
    class_selector_rules(s);
    class_node_rules(s);
    class_kubelet_rules(s);
}

/// The subnet, security group and AMI selector terms.
fn class_selector_rules(s: &mut Spec) {
    // Subnets.
    let sn = "subnetSelectorTerms";
    s.items(sn, Some(1), 30)
        .selector_tags("subnetSelectorTerms[].tags")
        .pattern("subnetSelectorTerms[].id", "^subnet-[0-9a-fA-F]+$")
        .rule(
            "subnetSelectorTerms[]",
            "(has(self.tags) && size(self.tags) > 0) || has(self.id)",
            "one of tags or id is required",
            None,
        )
        .rule(
            "subnetSelectorTerms[]",
            "!(has(self.id) && has(self.tags) && size(self.tags) > 0)",
            "id may not be combined with tags",
            None,
        );
    // Security groups.
    let sg = "securityGroupSelectorTerms[]";
    s.items("securityGroupSelectorTerms", Some(1), 30)
        .selector_tags("securityGroupSelectorTerms[].tags")
        .pattern("securityGroupSelectorTerms[].id", "^sg-[0-9a-fA-F]+$")
        .rule(
            sg,
            "(has(self.tags) && size(self.tags) > 0) || has(self.id) || has(self.name)",
            "one of tags, id or name is required",
            None,
        )
        .rule(
            sg,
            "!has(self.id) || !((has(self.tags) && size(self.tags) > 0) || has(self.name))",
            "id may not be combined with tags or name",
            None,
        );
    // AMIs.
    let ami = "amiSelectorTerms[]";
    s.items("amiSelectorTerms", Some(1), 30)
        .selector_tags("amiSelectorTerms[].tags")
        .pattern("amiSelectorTerms[].id", "^ami-[0-9a-fA-F]+$")
        .pattern(
            "amiSelectorTerms[].alias",
            "^(al2023|bottlerocket)@.+$",
        )
        .rule(
            ami,
            "!has(self.alias) || !(has(self.id) || has(self.name) || has(self.owner) || (has(self.tags) && size(self.tags) > 0))",
            "alias may not be combined with id, name, tags or owner",
            None,
        )
        .rule(
            ami,
            "has(self.alias) || has(self.id) || has(self.name) || (has(self.tags) && size(self.tags) > 0)",
            "one of alias, id, name or tags is required",
            None,
        )
        .rule(
            "amiSelectorTerms",
            "!self.exists(t, has(t.alias)) || size(self) == 1",
            "a term with alias must be the only term",
            None,
        );
}

/// The nodes' identity, disks, instance metadata, tags and capacity reservations.
fn class_node_rules(s: &mut Spec) {
    // The nodes' IAM identity.
    s.non_empty("role")
        .non_empty("instanceProfile")
        .rule(
            "",
            "!(has(self.role) && has(self.instanceProfile))",
            "role and instanceProfile are mutually exclusive",
            None,
        )
        .rule(
            "",
            "has(self.role) || has(self.instanceProfile)",
            "one of role or instanceProfile is required",
            None,
        );
    // Disks.
    let b = "blockDeviceMappings[]";
    s.items("blockDeviceMappings", None, 50)
        .rule(
            "blockDeviceMappings",
            "self.filter(m, has(m.rootVolume) && m.rootVolume).size() <= 1",
            "at most one mapping may be the root volume",
            None,
        )
        .non_empty(&format!("{b}.deviceName"))
        .pattern(&format!("{b}.ebs.volumeSize"), QUANTITY)
        .max_len(&format!("{b}.ebs.volumeSize"), 64)
        .rule(
            &format!("{b}.ebs.volumeSize"),
            "!isQuantity(self) || (quantity(self).compareTo(quantity('1Gi')) >= 0 && quantity(self).compareTo(quantity('64Ti')) <= 0)",
            "must be between 1Gi and 64Ti",
            None,
        )
        .one_of(&format!("{b}.ebs.volumeType"), VOLUME_TYPES)
        .range(&format!("{b}.ebs.iops"), 0, None)
        .range(&format!("{b}.ebs.throughput"), 0, None);
    // Instance metadata.
    s.one_of("metadataOptions.httpEndpoint", &["enabled", "disabled"])
        .one_of("metadataOptions.httpProtocolIPv6", &["enabled", "disabled"])
        .one_of("metadataOptions.httpTokens", &["required", "optional"])
        .range("metadataOptions.httpPutResponseHopLimit", 1, Some(64));
    // Tags: none the agent sets.
    s.max_props("tags", 50)
        .rule(
            "tags",
            &format!(
                "self.all(k, !k.startsWith('kubernetes.io/cluster/') && !k.startsWith('joiner.dev/') \
                 && k != {} && k != 'eks:eks-cluster-name')",
                cel(labels::KARPENTER_NODEPOOL)
            ),
            "tags kubernetes.io/cluster/*, joiner.dev/* and eks:eks-cluster-name are set by \
             the agent, and karpenter.sh/nodepool marks Karpenter's own instances: none may be \
             set here",
            None,
        )
        .rule(
            "tags",
            "self.all(k, size(k) >= 1 && size(k) <= 128)",
            "tag keys must be 1 to 128 characters",
            None,
        );
    // Capacity reservations.
    let cr = "capacityReservationSelectorTerms[]";
    s.items("capacityReservationSelectorTerms", None, 30)
        .pattern(&format!("{cr}.id"), "^cr-[0-9a-z]+$")
        .pattern(&format!("{cr}.ownerID"), "^[0-9]{12}$")
        .one_of(
            &format!("{cr}.instanceMatchCriteria"),
            &["open", "targeted"],
        )
        .selector_tags(&format!("{cr}.tags"))
        .rule(
            cr,
            "has(self.id) || (has(self.tags) && size(self.tags) > 0) || has(self.ownerID) || has(self.instanceMatchCriteria)",
            "one of id, tags, ownerID or instanceMatchCriteria is required",
            None,
        )
        .rule(
            cr,
            "!has(self.id) || !((has(self.tags) && size(self.tags) > 0) || has(self.ownerID) || has(self.instanceMatchCriteria))",
            "id may not be combined with tags, ownerID or instanceMatchCriteria",
            None,
        );
}

/// The kubelet's settings.
fn class_kubelet_rules(s: &mut Spec) {
    // Kubelet.
    let k = "kubelet";
    s.range("kubelet.maxPods", 1, None)
        .range("kubelet.podsPerCore", 1, None);
    for field in ["systemReserved", "kubeReserved"] {
        let p = format!("{k}.{field}");
        s.max_props(&p, 10)
            .pattern(&format!("{p}{{}}"), QUANTITY)
            .rule(
                &p,
                &format!(
                    "self.all(r, r in {})",
                    cel_list(RESERVED_RESOURCES.iter().copied())
                ),
                &format!("resources must be one of {}", RESERVED_RESOURCES.join(", ")),
                None,
            );
    }
    let pct_or_quantity = format!(
        r"^(((100(\.0*)?)|([0-9]{{1,2}}(\.[0-9]*)?))%|{})$",
        QUANTITY.trim_start_matches('^').trim_end_matches('$')
    );
    for field in ["evictionHard", "evictionSoft"] {
        let p = format!("{k}.{field}");
        s.max_props(&p, 10)
            .pattern(&format!("{p}{{}}"), &pct_or_quantity)
            .rule(
                &p,
                &format!(
                    "self.all(x, x in {})",
                    cel_list(EVICTION_SIGNALS.iter().copied())
                ),
                &format!("signals must be one of {}", EVICTION_SIGNALS.join(", ")),
                None,
            );
    }
    s.max_props("kubelet.evictionSoftGracePeriod", 10)
        .pattern("kubelet.evictionSoftGracePeriod{}", DURATION)
        .rule(
            k,
            "!has(self.evictionSoft) || self.evictionSoft.all(x, has(self.evictionSoftGracePeriod) && x in self.evictionSoftGracePeriod)",
            "evictionSoftGracePeriod is required for every evictionSoft signal",
            Some(".evictionSoftGracePeriod"),
        );
}

fn node_claim_rules(s: &mut Spec) {
    // A NodeClaim is one launch: what it asked for does not change (Karpenter's rule).
    s.rule("", "self == oldSelf", "spec is immutable", None)
        .non_empty("nodeClassRef.name")
        .requirements("requirements", Some(false))
        .taints("taints")
        .taints("startupTaints")
        .pattern("expireAfter", DURATION_OR_NEVER)
        .pattern("terminationGracePeriod", DURATION)
        .max_props("resources.requests", 100)
        .pattern("resources.requests{}", QUANTITY);
}

fn node_overlay_rules(s: &mut Spec) {
    let offering: Vec<&str> = labels::WELL_KNOWN
        .iter()
        .copied()
        .filter(|k| super::node_overlay::selectable(k))
        .collect();
    s.requirements("requirements", None)
        .rule(
            "requirements[].key",
            &format!("self in {}", cel_list(offering.iter().copied())),
            &format!(
                "an overlay selects by the labels the instance catalogue knows for every \
                 offering: {}",
                offering.join(", ")
            ),
            None,
        )
        .pattern("price", r"^[0-9]+(\.[0-9]+)?$")
        .pattern("priceAdjustment", r"^[+-][0-9]+(\.[0-9]+)?%?$")
        .max_len("priceAdjustment", 32)
        .rule(
            "priceAdjustment",
            "!self.matches('^-[0-9]+(\\\\.[0-9]+)?%$') || double(self.substring(1, size(self) - 1)) <= 100.0",
            "a discount of more than 100 % is not a price",
            None,
        )
        .rule(
            "",
            "!(has(self.price) && has(self.priceAdjustment))",
            "price and priceAdjustment are mutually exclusive",
            Some(".priceAdjustment"),
        )
        .rule(
            "",
            "has(self.price) || has(self.priceAdjustment) || (has(self.capacity) && size(self.capacity) > 0)",
            "sets nothing: give price, priceAdjustment or capacity",
            None,
        )
        .max_props("capacity", 50)
        .pattern(
            "capacity{}",
            &format!(r"^\+?{}", QUANTITY.trim_start_matches(r"^(\+|-)?")),
        )
        .rule(
            "capacity",
            "self.all(k, !(k in ['cpu', 'memory', 'pods', 'ephemeral-storage']) && (k.contains('/') || k.startsWith('hugepages-')))",
            "capacity adds extended resources only: a domain-qualified name (example.com/device) \
             or hugepages-<size>, never cpu, memory, pods or ephemeral-storage",
            None,
        )
        .range("weight", 1, Some(10_000));
}
