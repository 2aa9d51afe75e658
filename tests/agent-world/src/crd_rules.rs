//! The table of bad NodePool, NodeClass, NodeOverlay and NodeClaim objects, and of good
//! ones, that every layer must judge alike: the agent's validator, the CRDs' rules on a real
//! kube-apiserver (`agent/tests/logic/crds/rules.rs`) and the provider at plan
//! (`tests/e2e/tests/e2e/crd_rules.rs`). Each bad object is its kind's base spec with one
//! mistake merged in, and names the field it must be refused at.

use joiner_agent::api::validate::FieldError;
use joiner_agent::api::{NodeClaim, NodeClaimSpec, NodeClassSpec, NodeOverlaySpec, NodePoolSpec};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Pool,
    Class,
    Overlay,
    Claim,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pool => "NodePool",
            Kind::Class => "NodeClass",
            Kind::Overlay => "NodeOverlay",
            Kind::Claim => "NodeClaim",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pool => "nodepools.joiner.dev",
            Kind::Class => "nodeclasses.joiner.dev",
            Kind::Overlay => "nodeoverlays.joiner.dev",
            Kind::Claim => "nodeclaims.joiner.dev",
        }
    }

    /// A spec the validator and the API server both accept.
    pub fn base(self) -> Value {
        match self {
            Kind::Pool => json!({
                "template": {
                    "metadata": {"labels": {"team": "a"}, "annotations": {"example.com/owner": "a"}},
                    "spec": {
                        "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5", "m5", "r5"], "minValues": 2},
                            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]},
                        ],
                        "taints": [{"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"}],
                        "expireAfter": "720h",
                        "terminationGracePeriod": "1h30m",
                    },
                },
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "30s",
                    "budgets": [
                        {"nodes": "10%"},
                        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"]},
                    ],
                },
                "limits": {"cpu": "1000", "memory": "1000Gi"},
                "weight": 10,
            }),
            Kind::Class => json!({
                "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"id": "sg-0123abcd"}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "joiner-node",
                "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                    "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": true}}],
                "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
                "tags": {"team": "a"},
                "kubelet": {"maxPods": 110, "kubeReserved": {"cpu": "200m"},
                    "evictionHard": {"memory.available": "5%", "nodefs.available": "1Gi"}},
            }),
            Kind::Overlay => json!({
                "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
                "priceAdjustment": "-28%",
                "weight": 10,
            }),
            Kind::Claim => json!({
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                    {"key": "karpenter.k8s.aws/instance-memory", "operator": "Gte", "values": ["4096"]},
                ],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi", "pods": "3"}},
                "expireAfter": "720h",
            }),
        }
    }

    /// The agent's verdict on a spec: every error as `path: message`.
    pub fn validate(self, spec: &Value) -> Vec<String> {
        fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> T {
            serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
        }
        let show = |e: Vec<FieldError>| e.iter().map(|e| e.to_string()).collect();
        match self {
            Kind::Pool => {
                let s: NodePoolSpec = parse(spec);
                show(joiner_agent::api::validate::node_pool(&s, "spec"))
            }
            Kind::Class => {
                let s: NodeClassSpec = parse(spec);
                show(joiner_agent::api::validate::node_class(&s, "spec"))
            }
            Kind::Overlay => {
                let s: NodeOverlaySpec = parse(spec);
                show(joiner_agent::api::node_overlay::validate(&s, "spec"))
            }
            Kind::Claim => {
                let s: NodeClaimSpec = parse(spec);
                NodeClaim::new("c", s).view().err().into_iter().collect()
            }
        }
    }
}

/// One bad object: the base spec of its kind with `patch` merged in (RFC 7386: `null`
/// removes a field), refused naming `field` (a prefix of the validator's path, and found in
/// the API server's message), whose message also says `says`.
pub struct Bad {
    pub kind: Kind,
    pub what: &'static str,
    pub patch: Value,
    pub field: &'static str,
    pub says: &'static str,
}

fn bad(kind: Kind, what: &'static str, patch: Value, field: &'static str) -> Bad {
    Bad {
        kind,
        what,
        patch,
        field,
        says: "",
    }
}

pub fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

impl Bad {
    pub fn spec(&self) -> Value {
        let mut s = self.kind.base();
        merge(&mut s, &self.patch);
        s
    }
}

/// A NodePool's requirements replaced by `reqs`.
fn reqs(reqs: Value) -> Value {
    json!({"template": {"spec": {"requirements": reqs}}})
}

fn req(key: &str, op: &str, values: &[&str]) -> Value {
    json!([{"key": key, "operator": op, "values": values}])
}

const CT: &str = "karpenter.sh/capacity-type";
const FAMILY: &str = "karpenter.k8s.aws/instance-family";

pub fn table() -> Vec<Bad> {
    use Kind::*;
    let mut t = vec![
        // NodePool: requirements.
        bad(
            Pool,
            "an operator that does not exist",
            reqs(json!([{"key": FAMILY, "operator": "Equals", "values": ["c5"]}])),
            "spec.template.spec.requirements[0].operator",
        ),
        bad(
            Pool,
            "Gte with two values",
            reqs(req("karpenter.k8s.aws/instance-cpu", "Gte", &["4", "8"])),
            "spec.template.spec.requirements[0].values",
        ),
        bad(
            Pool,
            "Gt with a word",
            reqs(req("karpenter.k8s.aws/instance-cpu", "Gt", &["four"])),
            "spec.template.spec.requirements[0].values",
        ),
        bad(
            Pool,
            "Lt with no value",
            reqs(json!([{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt"}])),
            "spec.template.spec.requirements[0].values",
        ),
        bad(
            Pool,
            "In with no value",
            reqs(json!([{"key": FAMILY, "operator": "In"}])),
            "spec.template.spec.requirements[0].values",
        ),
        bad(
            Pool,
            "Exists with values",
            reqs(req(FAMILY, "Exists", &["c5"])),
            "spec.template.spec.requirements[0].values",
        ),
        bad(
            Pool,
            "minValues above the values listed",
            reqs(json!([{"key": FAMILY, "operator": "In", "values": ["c5"], "minValues": 3}])),
            "spec.template.spec.requirements[0].minValues",
        ),
        bad(
            Pool,
            "minValues of 0",
            reqs(json!([{"key": FAMILY, "operator": "In", "values": ["c5"], "minValues": 0}])),
            "spec.template.spec.requirements[0].minValues",
        ),
        bad(
            Pool,
            "minValues above 50",
            reqs(json!([{"key": FAMILY, "operator": "Exists", "minValues": 51}])),
            "spec.template.spec.requirements[0].minValues",
        ),
        bad(
            Pool,
            "minValues on a bound",
            reqs(
                json!([{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["2"], "minValues": 1}]),
            ),
            "spec.template.spec.requirements[0].minValues",
        ),
        bad(
            Pool,
            "requiring the pool label the agent sets",
            reqs(req("karpenter.sh/nodepool", "In", &["x"])),
            "spec.template.spec.requirements[0].key",
        ),
        bad(
            Pool,
            "requiring the hostname",
            reqs(req("kubernetes.io/hostname", "In", &["x"])),
            "spec.template.spec.requirements[0].key",
        ),
        bad(
            Pool,
            "a misspelt Karpenter label",
            reqs(req("karpenter.k8s.aws/instance-gpu-memry", "Exists", &[])),
            "spec.template.spec.requirements[0].key",
        ),
        bad(
            Pool,
            "a joiner.dev label joiner does not model",
            reqs(req("joiner.dev/anything", "Exists", &[])),
            "spec.template.spec.requirements[0].key",
        ),
        bad(
            Pool,
            "a Karpenter label joiner does not support",
            reqs(req("karpenter.k8s.aws/placement-group-id", "Exists", &[])),
            "spec.template.spec.requirements[0].key",
        ),
        bad(
            Pool,
            "a key that is no label key",
            reqs(req("Team Name", "Exists", &[])),
            "spec.template.spec.requirements[0].key",
        ),
        bad(
            Pool,
            "a capacity type that does not exist",
            reqs(req(CT, "In", &["preemptible"])),
            "spec.template.spec.requirements[0].values",
        ),
        bad(
            Pool,
            "a value that is no label value",
            reqs(req(FAMILY, "In", &["c5 large"])),
            "spec.template.spec.requirements[0].values",
        ),
        // NodePool: the template's labels, annotations, taints, reference, lifetimes.
        bad(
            Pool,
            "a template label the agent sets",
            json!({"template": {"metadata": {"labels": {"karpenter.sh/nodepool": "x"}}}}),
            "spec.template.metadata.labels",
        ),
        bad(
            Pool,
            "a template label with a bad value",
            json!({"template": {"metadata": {"labels": {"team": "-a-"}}}}),
            "spec.template.metadata.labels",
        ),
        bad(
            Pool,
            "a template label with a bad key",
            json!({"template": {"metadata": {"labels": {"a/b/c": "x"}}}}),
            "spec.template.metadata.labels",
        ),
        bad(
            Pool,
            "a template label its requirements refuse",
            json!({"template": {"metadata": {"labels": {CT: "reserved"}}}}),
            "spec.template.spec.requirements",
        ),
        bad(
            Pool,
            "an empty annotation key",
            json!({"template": {"metadata": {"annotations": {"": "x"}}}}),
            "spec.template.metadata.annotations",
        ),
        bad(
            Pool,
            "a taint effect that does not exist",
            json!({"template": {"spec": {"taints": [{"key": "a", "effect": "NoPlace"}]}}}),
            "spec.template.spec.taints[0].effect",
        ),
        bad(
            Pool,
            "a taint with no key",
            json!({"template": {"spec": {"taints": [{"key": "", "effect": "NoSchedule"}]}}}),
            "spec.template.spec.taints[0].key",
        ),
        bad(
            Pool,
            "a startup taint effect that does not exist",
            json!({"template": {"spec": {"startupTaints": [{"key": "a", "effect": "Never"}]}}}),
            "spec.template.spec.startupTaints[0].effect",
        ),
        bad(
            Pool,
            "expireAfter in days",
            json!({"template": {"spec": {"expireAfter": "30 days"}}}),
            "spec.template.spec.expireAfter",
        ),
        bad(
            Pool,
            "terminationGracePeriod in words",
            json!({"template": {"spec": {"terminationGracePeriod": "soon"}}}),
            "spec.template.spec.terminationGracePeriod",
        ),
        bad(
            Pool,
            "Karpenter's EC2NodeClass kind",
            json!({"template": {"spec": {"nodeClassRef": {"kind": "EC2NodeClass"}}}}),
            "spec.template.spec.nodeClassRef.kind",
        ),
        bad(
            Pool,
            "Karpenter's group",
            json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws"}}}}),
            "spec.template.spec.nodeClassRef.group",
        ),
        bad(
            Pool,
            "a NodeClass with no name",
            json!({"template": {"spec": {"nodeClassRef": {"name": ""}}}}),
            "spec.template.spec.nodeClassRef.name",
        ),
        // NodePool: disruption.
        bad(
            Pool,
            "consolidationPolicy Sometimes",
            json!({"disruption": {"consolidationPolicy": "Sometimes"}}),
            "spec.disruption.consolidationPolicy",
        ),
        bad(
            Pool,
            "v1beta1's WhenUnderutilized",
            json!({"disruption": {"consolidationPolicy": "WhenUnderutilized"}}),
            "spec.disruption.consolidationPolicy",
        ),
        bad(
            Pool,
            "consolidateAfter in words",
            json!({"disruption": {"consolidateAfter": "5 minutes"}}),
            "spec.disruption.consolidateAfter",
        ),
        bad(
            Pool,
            "a budget over 100 %",
            json!({"disruption": {"budgets": [{"nodes": "150%"}]}}),
            "spec.disruption.budgets[0].nodes",
        ),
        bad(
            Pool,
            "a budget schedule with no duration",
            json!({"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}}),
            "spec.disruption.budgets[0].duration",
        ),
        bad(
            Pool,
            "a budget duration with no schedule",
            json!({"disruption": {"budgets": [{"nodes": "1", "duration": "1h"}]}}),
            "spec.disruption.budgets[0].schedule",
        ),
        bad(
            Pool,
            "a budget schedule that is no cron",
            json!({"disruption": {"budgets": [{"nodes": "1", "schedule": "every day", "duration": "1h"}]}}),
            "spec.disruption.budgets[0].schedule",
        ),
        bad(
            Pool,
            "a budget reason that does not exist",
            json!({"disruption": {"budgets": [{"nodes": "1", "reasons": ["Bored"]}]}}),
            "spec.disruption.budgets[0].reasons[0]",
        ),
        // NodePool: limits, weight, launch policies.
        bad(
            Pool,
            "a limit that is no quantity",
            json!({"limits": {"memory": "lots"}}),
            "spec.limits",
        ),
        bad(
            Pool,
            "a node limit that is no count",
            json!({"limits": {"nodes": "10Gi"}}),
            "spec.limits",
        ),
        bad(Pool, "weight 0", json!({"weight": 0}), "spec.weight"),
        bad(Pool, "weight 101", json!({"weight": 101}), "spec.weight"),
        bad(
            Pool,
            "a minValuesPolicy that does not exist",
            json!({"minValuesPolicy": "Lenient"}),
            "spec.minValuesPolicy",
        ),
        bad(
            Pool,
            "a candidatePriceRatio below 1",
            json!({"candidatePriceRatio": "0.5"}),
            "spec.candidatePriceRatio",
        ),
        bad(
            Pool,
            "a candidatePriceRatio in words",
            json!({"candidatePriceRatio": "twice"}),
            "spec.candidatePriceRatio",
        ),
        // NodePool: static pools, headroom, repair.
        bad(
            Pool,
            "negative replicas",
            json!({"replicas": -1, "weight": null, "limits": null}),
            "spec.replicas",
        ),
        bad(
            Pool,
            "a static pool with a cpu limit",
            json!({"replicas": 3, "weight": null}),
            "spec.limits",
        ),
        bad(
            Pool,
            "a static pool with a weight",
            json!({"replicas": 3, "limits": null}),
            "spec.weight",
        ),
        bad(
            Pool,
            "a static pool with headroom",
            json!({"replicas": 3, "weight": null, "limits": null, "headroom": [{"nodes": 1}]}),
            "spec.headroom",
        ),
        bad(
            Pool,
            "headroom of nodes and cpu",
            json!({"headroom": [{"nodes": 1, "cpu": "1"}]}),
            "spec.headroom[0].nodes",
        ),
        bad(
            Pool,
            "headroom of nothing",
            json!({"headroom": [{}]}),
            "spec.headroom[0]",
        ),
        bad(
            Pool,
            "headroom of pods of no size",
            json!({"headroom": [{"pods": 3}]}),
            "spec.headroom[0]",
        ),
        bad(
            Pool,
            "headroom of 0 cpu",
            json!({"headroom": [{"cpu": "0"}]}),
            "spec.headroom[0].cpu",
        ),
        bad(
            Pool,
            "headroom of 0 pods",
            json!({"headroom": [{"cpu": "1", "pods": 0}]}),
            "spec.headroom[0].pods",
        ),
        bad(
            Pool,
            "headroom scheduled with no duration",
            json!({"headroom": [{"nodes": 1, "schedule": "0 8 * * *"}]}),
            "spec.headroom[0].duration",
        ),
        bad(
            Pool,
            "a repair status that does not exist",
            json!({"repair": {"policies": [{"conditionType": "Ready", "conditionStatus": "Maybe", "tolerationDuration": "5m"}]}}),
            "spec.repair.policies[0].conditionStatus",
        ),
        bad(
            Pool,
            "a repair policy with no condition",
            json!({"repair": {"policies": [{"conditionType": "", "conditionStatus": "False", "tolerationDuration": "5m"}]}}),
            "spec.repair.policies[0].conditionType",
        ),
        bad(
            Pool,
            "a repair toleration in words",
            json!({"repair": {"policies": [{"conditionType": "Ready", "conditionStatus": "False", "tolerationDuration": "soon"}]}}),
            "spec.repair.policies[0].tolerationDuration",
        ),
        // NodeClass.
        bad(
            Class,
            "no subnet terms",
            json!({"subnetSelectorTerms": []}),
            "spec.subnetSelectorTerms",
        ),
        bad(
            Class,
            "an empty subnet term",
            json!({"subnetSelectorTerms": [{}]}),
            "spec.subnetSelectorTerms[0]",
        ),
        bad(
            Class,
            "a subnet id with tags",
            json!({"subnetSelectorTerms": [{"id": "subnet-0abc", "tags": {"a": "b"}}]}),
            "spec.subnetSelectorTerms[0]",
        ),
        bad(
            Class,
            "a subnet id that is none",
            json!({"subnetSelectorTerms": [{"id": "sub-123"}]}),
            "spec.subnetSelectorTerms[0].id",
        ),
        bad(
            Class,
            "an empty subnet tag value",
            json!({"subnetSelectorTerms": [{"tags": {"a": ""}}]}),
            "spec.subnetSelectorTerms[0].tags",
        ),
        bad(
            Class,
            "no security group terms",
            json!({"securityGroupSelectorTerms": []}),
            "spec.securityGroupSelectorTerms",
        ),
        bad(
            Class,
            "a security group id that is none",
            json!({"securityGroupSelectorTerms": [{"id": "sg-xyz"}]}),
            "spec.securityGroupSelectorTerms[0].id",
        ),
        bad(
            Class,
            "an empty security group term",
            json!({"securityGroupSelectorTerms": [{}]}),
            "spec.securityGroupSelectorTerms[0]",
        ),
        bad(
            Class,
            "a security group id with a name",
            json!({"securityGroupSelectorTerms": [{"id": "sg-0abc", "name": "x"}]}),
            "spec.securityGroupSelectorTerms[0]",
        ),
        bad(
            Class,
            "an alias of no family joiner knows",
            json!({"amiSelectorTerms": [{"alias": "ubuntu@22"}]}),
            "spec.amiSelectorTerms[0].alias",
        ),
        bad(
            Class,
            "an alias with an id",
            json!({"amiSelectorTerms": [{"alias": "al2023@latest", "id": "ami-0abc"}]}),
            "spec.amiSelectorTerms[0]",
        ),
        bad(
            Class,
            "an alias beside another term",
            json!({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-0abc"}]}),
            "spec.amiSelectorTerms",
        ),
        bad(
            Class,
            "an AMI id that is none",
            json!({"amiSelectorTerms": [{"id": "image-1"}]}),
            "spec.amiSelectorTerms[0].id",
        ),
        Bad {
            kind: Class,
            what: "a role and an instance profile",
            patch: json!({"instanceProfile": "x"}),
            field: "spec",
            says: "role and instanceProfile are mutually exclusive",
        },
        Bad {
            kind: Class,
            what: "neither role nor instance profile",
            patch: json!({"role": null}),
            field: "spec",
            says: "one of role or instanceProfile is required",
        },
        bad(Class, "an empty role", json!({"role": ""}), "spec.role"),
        bad(
            Class,
            "httpTokens sometimes",
            json!({"metadataOptions": {"httpTokens": "sometimes"}}),
            "spec.metadataOptions.httpTokens",
        ),
        bad(
            Class,
            "httpEndpoint on",
            json!({"metadataOptions": {"httpEndpoint": "on"}}),
            "spec.metadataOptions.httpEndpoint",
        ),
        bad(
            Class,
            "a hop limit of 0",
            json!({"metadataOptions": {"httpPutResponseHopLimit": 0}}),
            "spec.metadataOptions.httpPutResponseHopLimit",
        ),
        bad(
            Class,
            "a tag the agent sets",
            json!({"tags": {"kubernetes.io/cluster/demo": "owned"}}),
            "spec.tags",
        ),
        bad(
            Class,
            "a 10Mi root volume",
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "10Mi"}}]}),
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
        bad(
            Class,
            "a volume type that does not exist",
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp9"}}]}),
            "spec.blockDeviceMappings[0].ebs.volumeType",
        ),
        bad(
            Class,
            "negative iops",
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"iops": -1}}]}),
            "spec.blockDeviceMappings[0].ebs.iops",
        ),
        bad(
            Class,
            "two root volumes",
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true}, {"deviceName": "/dev/xvdb", "rootVolume": true}]}),
            "spec.blockDeviceMappings",
        ),
        bad(
            Class,
            "a mapping with no device",
            json!({"blockDeviceMappings": [{"deviceName": ""}]}),
            "spec.blockDeviceMappings[0].deviceName",
        ),
        bad(
            Class,
            "maxPods 0",
            json!({"kubelet": {"maxPods": 0}}),
            "spec.kubelet.maxPods",
        ),
        bad(
            Class,
            "an eviction signal that does not exist",
            json!({"kubelet": {"evictionHard": {"memory.free": "5%"}}}),
            "spec.kubelet.evictionHard",
        ),
        bad(
            Class,
            "an eviction threshold that is no quantity",
            json!({"kubelet": {"evictionHard": {"memory.available": "lots"}}}),
            "spec.kubelet.evictionHard",
        ),
        bad(
            Class,
            "a soft eviction with no grace period",
            json!({"kubelet": {"evictionSoft": {"memory.available": "5%"}}}),
            "spec.kubelet.evictionSoftGracePeriod",
        ),
        bad(
            Class,
            "a reservation of gpus",
            json!({"kubelet": {"kubeReserved": {"nvidia.com/gpu": "1"}}}),
            "spec.kubelet.kubeReserved",
        ),
        bad(
            Class,
            "a capacity reservation id that is none",
            json!({"capacityReservationSelectorTerms": [{"id": "cr-ABC!"}]}),
            "spec.capacityReservationSelectorTerms[0].id",
        ),
        bad(
            Class,
            "an owner that is no account",
            json!({"capacityReservationSelectorTerms": [{"ownerID": "123"}]}),
            "spec.capacityReservationSelectorTerms[0].ownerID",
        ),
        bad(
            Class,
            "a match criterion that does not exist",
            json!({"capacityReservationSelectorTerms": [{"instanceMatchCriteria": "sometimes"}]}),
            "spec.capacityReservationSelectorTerms[0].instanceMatchCriteria",
        ),
        bad(
            Class,
            "an empty capacity reservation term",
            json!({"capacityReservationSelectorTerms": [{}]}),
            "spec.capacityReservationSelectorTerms[0]",
        ),
        bad(
            Class,
            "a reservation id with an owner",
            json!({"capacityReservationSelectorTerms": [{"id": "cr-0abc", "ownerID": "123456789012"}]}),
            "spec.capacityReservationSelectorTerms[0]",
        ),
        // NodeOverlay.
        bad(
            Overlay,
            "selecting on the NodePool",
            json!({"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]}]}),
            "spec.requirements[0].key",
        ),
        bad(
            Overlay,
            "an operator that does not exist",
            json!({"requirements": [{"key": FAMILY, "operator": "Maybe"}]}),
            "spec.requirements[0].operator",
        ),
        bad(
            Overlay,
            "Gt with two values",
            json!({"requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["1", "2"]}]}),
            "spec.requirements[0].values",
        ),
        bad(
            Overlay,
            "a price and an adjustment",
            json!({"price": "1"}),
            "spec.priceAdjustment",
        ),
        bad(
            Overlay,
            "a discount of more than 100 %",
            json!({"priceAdjustment": "-101%"}),
            "spec.priceAdjustment",
        ),
        bad(
            Overlay,
            "an adjustment with no sign",
            json!({"priceAdjustment": "10%"}),
            "spec.priceAdjustment",
        ),
        bad(
            Overlay,
            "a price in words",
            json!({"priceAdjustment": null, "price": "cheap"}),
            "spec.price",
        ),
        bad(
            Overlay,
            "capacity of cpu",
            json!({"capacity": {"cpu": "1"}}),
            "spec.capacity",
        ),
        bad(
            Overlay,
            "capacity of an unqualified resource",
            json!({"capacity": {"fuse": "1"}}),
            "spec.capacity",
        ),
        bad(
            Overlay,
            "negative capacity",
            json!({"capacity": {"example.com/dev": "-1"}}),
            "spec.capacity",
        ),
        bad(Overlay, "weight 0", json!({"weight": 0}), "spec.weight"),
        Bad {
            kind: Overlay,
            what: "an overlay that sets nothing",
            patch: json!({"priceAdjustment": null}),
            field: "spec",
            says: "sets nothing",
        },
        // NodeClaim (the agent writes them; a bad one from elsewhere is refused too).
        bad(
            Claim,
            "an operator that does not exist",
            json!({"requirements": [{"key": FAMILY, "operator": "Maybe"}]}),
            "spec.requirements[0].operator",
        ),
        bad(
            Claim,
            "Gte with two values",
            json!({"requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["1", "2"]}]}),
            "spec.requirements[0].values",
        ),
        bad(
            Claim,
            "In with no value",
            json!({"requirements": [{"key": FAMILY, "operator": "In"}]}),
            "spec.requirements[0].values",
        ),
    ];
    t.sort_by_key(|b| b.kind.name());
    t
}

/// More objects both must accept, beyond each kind's base.
pub fn good() -> Vec<(Kind, Value)> {
    use Kind::*;
    let with = |kind: Kind, patch: Value| {
        let mut s = kind.base();
        merge(&mut s, &patch);
        (kind, s)
    };
    vec![
        (Pool, Pool.base()),
        (Class, Class.base()),
        (Overlay, Overlay.base()),
        (Claim, Claim.base()),
        // The smallest pool: defaults for everything.
        (
            Pool,
            json!({"template": {"spec": {"nodeClassRef": {"name": "default"}}}}),
        ),
        {
            let (kind, mut s) = with(Pool, json!({"replicas": 3, "weight": null, "limits": null}));
            s["limits"] = json!({"nodes": "5"});
            (kind, s)
        },
        with(
            Pool,
            json!({
                "template": {"metadata": {"labels": {CT: "spot"}}, "spec": {
                    "requirements": [
                        {"key": CT, "operator": "In", "values": ["spot"]},
                        {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gte", "values": ["5"]},
                        {"key": "karpenter.k8s.aws/instance-memory", "operator": "Lte", "values": ["65536"]},
                        {"key": "example.com/team", "operator": "DoesNotExist"},
                        {"key": "joiner.dev/critical", "operator": "Exists", "minValues": 1},
                    ],
                    "expireAfter": "Never", "terminationGracePeriod": "0",
                }},
                "disruption": {"consolidationPolicy": "Balanced", "consolidateAfter": "Never",
                    "budgets": [{"nodes": "100%", "reasons": ["Underutilized", "Empty", "Drifted"]}],
                    "spotToSpotConsolidation": true, "consolidationEvictionsPerHour": 30},
                "limits": {"cpu": "1000", "memory": "1.5Ti", "nvidia.com/gpu": "8", "nodes": "10"},
                "minValuesPolicy": "BestEffort", "candidatePriceRatio": "1.5",
                "headroom": [{"cpu": "500m", "memory": "2Gi", "pods": 4},
                             {"nodes": 2, "schedule": "0 8 * * mon-fri", "duration": "10h"}],
                "repair": {"policies": [{"conditionType": "Ready", "conditionStatus": "Unknown", "tolerationDuration": "5m"}]},
            }),
        ),
        with(
            Class,
            json!({
                "role": null, "instanceProfile": "joiner-node",
                "subnetSelectorTerms": [{"id": "subnet-0abc"}, {"tags": {"Name": "*"}}],
                "securityGroupSelectorTerms": [{"name": "web"}, {"tags": {"a": "b"}}],
                "amiSelectorTerms": [{"id": "ami-0abc"}, {"name": "my-ami-*", "owner": "self"}],
                "capacityReservationSelectorTerms": [{"id": "cr-0abc123"},
                    {"tags": {"team": "a"}, "ownerID": "123456789012", "instanceMatchCriteria": "targeted"}],
                "kubelet": {"podsPerCore": 10, "systemReserved": {"memory": "100Mi", "pid": "1000"},
                    "evictionSoft": {"memory.available": "500Mi"}, "evictionSoftGracePeriod": {"memory.available": "1m30s"}},
                "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "64Ti", "iops": 3000, "throughput": 125}},
                                        {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Gi"}}],
                "metadataOptions": {"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled", "httpTokens": "optional", "httpPutResponseHopLimit": 64},
            }),
        ),
        with(
            Class,
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0"}]}),
        ),
        with(
            Overlay,
            json!({"priceAdjustment": null, "price": "0.05", "weight": 10000}),
        ),
        with(
            Overlay,
            json!({"priceAdjustment": "+0.5", "requirements": [
            {"key": CT, "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1a"]}]}),
        ),
        with(
            Overlay,
            json!({"priceAdjustment": null, "capacity": {"smarter-devices/fuse": "1", "hugepages-2Mi": "1Gi"}}),
        ),
    ]
}
