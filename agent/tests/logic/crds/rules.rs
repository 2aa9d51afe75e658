//! The validation the CRDs carry (`joiner_agent::api::schema`): a table of bad objects, each
//! refused by the agent's validator with the field it names, and, in `real_control_plane`,
//! by a real kube-apiserver naming the same field; good objects accepted by both. The CRDs
//! come from one place, so the API server and the agent enforce the same rules.

use joiner_agent::api::schema;
use joiner_agent::api::validate::FieldError;
use joiner_agent::api::{NodeClaim, NodeClaimSpec, NodeClassSpec, NodeOverlaySpec, NodePoolSpec};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Pool,
    Class,
    Overlay,
    Claim,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Pool => "NodePool",
            Kind::Class => "NodeClass",
            Kind::Overlay => "NodeOverlay",
            Kind::Claim => "NodeClaim",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::Pool => "nodepools.joiner.dev",
            Kind::Class => "nodeclasses.joiner.dev",
            Kind::Overlay => "nodeoverlays.joiner.dev",
            Kind::Claim => "nodeclaims.joiner.dev",
        }
    }

    /// A spec the validator and the API server both accept.
    fn base(self) -> Value {
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
    fn validate(self, spec: &Value) -> Vec<String> {
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
struct Bad {
    kind: Kind,
    what: &'static str,
    patch: Value,
    field: &'static str,
    says: &'static str,
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

fn merge(base: &mut Value, patch: &Value) {
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
    fn spec(&self) -> Value {
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

fn table() -> Vec<Bad> {
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
fn good() -> Vec<(Kind, Value)> {
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

/// The validation keywords a CRD carries: enums, patterns, CEL rules.
fn counts(v: &Value) -> (usize, usize, usize) {
    let mut c = (0, 0, 0);
    fn walk(v: &Value, c: &mut (usize, usize, usize)) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    match k.as_str() {
                        "enum" => c.0 += 1,
                        "pattern" => c.1 += 1,
                        "x-kubernetes-validations" => c.2 += x.as_array().map_or(0, Vec::len),
                        _ => {}
                    }
                    walk(x, c);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, c)),
            _ => {}
        }
    }
    walk(v, &mut c);
    c
}

#[test]
fn the_crds_carry_the_validators_rules() {
    let crds: Vec<Value> = schema::crds()
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    let mut total = (0, 0, 0);
    for c in &crds {
        let (e, p, r) = counts(c);
        let kind = c["spec"]["names"]["kind"].as_str().unwrap();
        println!("{kind}: {e} enums, {p} patterns, {r} CEL rules");
        assert!(
            e > 0 && p > 0 && r > 0,
            "{kind}: {e} enums, {p} patterns, {r} rules"
        );
        total = (total.0 + e, total.1 + p, total.2 + r);
    }
    assert!(total.0 >= 15 && total.1 >= 40 && total.2 >= 60, "{total:?}");
    let spec = |i: usize| {
        &crds[i]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    };
    let np = spec(0);
    let req = &np["properties"]["template"]["properties"]["spec"]["properties"]["requirements"];
    assert_eq!(
        req["items"]["properties"]["operator"]["enum"],
        json!(joiner_agent::requirements::OPERATORS
            .split(", ")
            .collect::<Vec<_>>())
    );
    assert_eq!(req["maxItems"], json!(100));
    let rules = req["items"]["x-kubernetes-validations"].to_string();
    for needle in [
        "['Gt', 'Lt', 'Gte', 'Lte']",
        "size(self.values) == 1",
        "size(self.values) >= self.minValues",
    ] {
        assert!(rules.contains(needle), "{needle} in {rules}");
    }
    assert_eq!(
        np["properties"]["disruption"]["properties"]["consolidationPolicy"]["enum"],
        json!(joiner_agent::api::validate::CONSOLIDATION_POLICIES)
    );
    let budgets = &np["properties"]["disruption"]["properties"]["budgets"];
    assert!(budgets["items"]["x-kubernetes-validations"]
        .to_string()
        .contains("!has(self.schedule) || has(self.duration)"));
    let claim = spec(2);
    assert_eq!(
        claim["x-kubernetes-validations"][0]["rule"],
        json!("self == oldSelf")
    );
    // The printed CRDs are these: the committed YAML (`crds_are_up_to_date`) and the agent's
    // `joiner-agent crds` come from `schema::crds` too.
    let yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/joiner.dev_nodepools.yaml"),
    )
    .unwrap();
    assert!(yaml.contains("x-kubernetes-validations"));
}

#[test]
fn the_validator_refuses_every_bad_object_by_its_field() {
    let table = table();
    assert!(table.len() >= 40, "{} rows", table.len());
    for (kind, spec) in good() {
        assert_eq!(
            kind.validate(&spec),
            Vec::<String>::new(),
            "{kind:?} {spec}"
        );
    }
    let mut wrong = Vec::new();
    for b in &table {
        let errs = b.kind.validate(&b.spec());
        if !errs
            .iter()
            .any(|e| e.starts_with(b.field) && e.contains(b.says))
        {
            wrong.push(format!(
                "{:?} {}: no error at {} in {errs:?}",
                b.kind, b.what, b.field
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every CRD is taken from `api::schema`: the derived `crd()` alone has none of the rules.
#[test]
fn the_crds_come_from_one_place() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = ["agent", "provider", "tests"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(p) = stack.pop() {
        if p.ends_with("target") || p.ends_with("node_modules") || p.ends_with(".venv") {
            continue;
        }
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                stack.push(e.path());
            }
        } else if p.extension().is_some_and(|e| e == "rs") && !p.ends_with("api/schema.rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for kind in ["NodePool", "NodeClass", "NodeClaim", "NodeOverlay"] {
                if text.contains(&format!("{kind}::crd()")) {
                    found.push(format!("{}: {kind}::crd()", p.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "take the CRDs from joiner_agent::api::schema, which adds their validation: {found:#?}"
    );
}

/// The table on a real kube-apiserver: each bad object is stored when the CRDs carry no rules
/// (so the rules, not its shape, refuse it), then refused once they do, naming its field; the
/// good objects are accepted; a NodeClaim's spec and a NodePool's static/dynamic mode do not
/// change.
mod real_control_plane {
    use super::*;
    use joiner_control_plane::{ControlPlane, Options};

    /// The CRD without any validation keyword: what the derived schema alone says.
    fn without_rules(v: &mut Value) {
        match v {
            Value::Object(o) => {
                for k in [
                    "enum",
                    "pattern",
                    "minimum",
                    "maximum",
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                    "maxProperties",
                    "x-kubernetes-validations",
                ] {
                    o.remove(k);
                }
                o.values_mut().for_each(without_rules);
            }
            Value::Array(a) => a.iter_mut().for_each(without_rules),
            _ => {}
        }
    }

    fn install(cp: &ControlPlane, dir: &std::path::Path, crds: Vec<Value>) {
        for (i, mut c) in crds.into_iter().enumerate() {
            c["apiVersion"] = json!("apiextensions.k8s.io/v1");
            c["kind"] = json!("CustomResourceDefinition");
            let f = dir.join(format!("crd-{i}.json"));
            std::fs::write(&f, c.to_string()).unwrap();
            cp.kubectl(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                f.to_str().unwrap(),
            ])
            .unwrap_or_else(|e| panic!("the API server refuses the CRD: {e:#}"));
        }
        for k in [Kind::Pool, Kind::Class, Kind::Overlay, Kind::Claim] {
            cp.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{}", k.plural()),
            ])
            .unwrap();
        }
    }

    fn create(
        cp: &ControlPlane,
        dir: &std::path::Path,
        kind: Kind,
        name: &str,
        spec: &Value,
    ) -> anyhow::Result<String> {
        let f = dir.join(format!("{name}.json"));
        let obj = json!({"apiVersion": "joiner.dev/v1", "kind": kind.name(),
            "metadata": {"name": name}, "spec": spec});
        std::fs::write(&f, obj.to_string()).unwrap();
        cp.kubectl(&["create", "-f", f.to_str().unwrap()])
    }

    fn delete_all(cp: &ControlPlane) {
        for k in [Kind::Pool, Kind::Class, Kind::Overlay, Kind::Claim] {
            cp.kubectl(&["delete", k.plural(), "--all", "--wait=true"])
                .unwrap();
        }
    }

    #[test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    fn the_api_server_refuses_every_bad_object_naming_its_field() {
        let cp = ControlPlane::start(Options {
            controller_manager: false,
            scheduler: false,
            kwok: false,
            ..Default::default()
        })
        .expect("start the control plane");
        let dir = tempfile::tempdir().unwrap();
        let table = table();
        let validated: Vec<Value> = schema::crds()
            .into_iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();

        // Without the rules every bad object is stored: it is well-formed, only wrong.
        let mut bare = validated.clone();
        bare.iter_mut().for_each(without_rules);
        install(&cp, dir.path(), bare);
        for (i, b) in table.iter().enumerate() {
            create(&cp, dir.path(), b.kind, &format!("bad-{i}"), &b.spec()).unwrap_or_else(|e| {
                panic!(
                    "{:?} {}: refused even without the rules: {e:#}",
                    b.kind, b.what
                )
            });
        }
        delete_all(&cp);

        // With them, the good objects are stored and every bad one is refused by its field.
        install(&cp, dir.path(), validated);
        // The API server takes up a changed CRD's schema shortly after it is Established,
        // and nothing can be watched for that: probe each kind's first bad row until it is
        // refused.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut probed = Vec::new();
        for probe in &table {
            if probed.contains(&probe.kind) {
                continue;
            }
            probed.push(probe.kind);
            while create(&cp, dir.path(), probe.kind, "probe", &probe.spec()).is_ok() {
                cp.kubectl(&["delete", probe.kind.plural(), "probe"])
                    .unwrap();
                assert!(
                    std::time::Instant::now() < deadline,
                    "the new {:?} schema is never used",
                    probe.kind
                );
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
        }
        for (i, (kind, spec)) in good().into_iter().enumerate() {
            create(&cp, dir.path(), kind, &format!("good-{i}"), &spec)
                .unwrap_or_else(|e| panic!("{kind:?} refused: {e:#}\n{spec}"));
        }
        let mut wrong = Vec::new();
        for (i, b) in table.iter().enumerate() {
            match create(&cp, dir.path(), b.kind, &format!("bad-{i}"), &b.spec()) {
                Ok(_) => wrong.push(format!("{:?} {}: stored", b.kind, b.what)),
                Err(e) => {
                    let msg = format!("{e:#}");
                    if !msg.contains(b.field) || !msg.contains(b.says) {
                        wrong.push(format!(
                            "{:?} {}: {msg} does not name {} ({:?})",
                            b.kind, b.what, b.field, b.says
                        ));
                    } else {
                        println!(
                            "{:?} {}: {}",
                            b.kind,
                            b.what,
                            msg.lines().last().unwrap_or("")
                        );
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");

        // What only an update can do wrong: a NodeClaim's spec changes, a pool turns static.
        let claim = r#"{"spec": {"expireAfter": "1h"}}"#;
        let err = cp
            .kubectl(&[
                "patch",
                "nodeclaims.joiner.dev",
                "good-3",
                "--type=merge",
                "-p",
                claim,
            ])
            .expect_err("a NodeClaim's spec is immutable");
        assert!(format!("{err:#}").contains("spec is immutable"), "{err:#}");
        let err = cp
            .kubectl(&[
                "patch",
                "nodepools.joiner.dev",
                "good-0",
                "--type=merge",
                "-p",
                r#"{"spec": {"replicas": 3, "weight": null, "limits": null}}"#,
            ])
            .expect_err("a pool does not turn static");
        assert!(format!("{err:#}").contains("spec.replicas"), "{err:#}");
        // Metadata and status still change on a stored NodeClaim.
        cp.kubectl(&["label", "nodeclaims.joiner.dev", "good-3", "team=a"])
            .unwrap();
    }
}
