//! Volume topology: where a pod's persistent volumes let it run, as node requirements.
//!
//! kube-scheduler's VolumeBinding filter refuses a node that a pod's bound volume cannot
//! reach (the PersistentVolume's `spec.nodeAffinity`), and a node outside the zones a
//! WaitForFirstConsumer StorageClass may provision in (`allowedTopologies`); it refuses every
//! node while an Immediate claim is unbound. A node launched in the cheapest zone for such a
//! pod is a node it can never use. So, as Karpenter's volume topology does
//! (`pkg/controllers/provisioning/scheduling/volumetopology.go`), each claim of the pod
//! becomes alternatives of requirements, one per node-selector term of its volume or per
//! allowed topology of its class, and the pod's own node-affinity terms are crossed with
//! them: the pod may run where one of its terms and one alternative of every claim hold.
//!
//! A claim that cannot be judged yet (missing, being deleted, lost, Immediate and unbound,
//! bound to a volume not seen) makes the pod not schedulable yet, with the reason: kube-scheduler
//! would refuse it everywhere, so capacity launched for it would be wasted.
//!
//! The views kept per object are small: the agent keeps every claim, volume and class of
//! the cluster, and reads only these fields.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;

use super::input::Pod;
use crate::catalog::volume_limits;
use crate::labels;
use crate::requirements::{Operator, Requirement, Requirements};

/// The annotation the PV controller sets once it has bound a claim to its volume; a claim
/// naming a volume without it is still being bound (kube-scheduler's binder and Karpenter
/// both read it).
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// Zone labels that name the same domain as [`labels::ZONE`]: the EBS CSI driver's
/// topology key (Karpenter's AWS provider normalises it, `pkg/operator/operator.go`) and
/// the deprecated beta label (Karpenter's `NormalizedLabels`).
const ZONE_ALIASES: &[&str] = &[
    "topology.ebs.csi.aws.com/zone",
    "failure-domain.beta.kubernetes.io/zone",
];

/// What the agent reads of a PersistentVolumeClaim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimView {
    pub volume_name: Option<String>,
    pub storage_class: Option<String>,
    pub bind_completed: bool,
    pub deleting: bool,
    /// `status.phase: Lost`: bound to a volume that no longer exists.
    pub lost: bool,
}

impl ClaimView {
    pub fn from_api(c: &core::PersistentVolumeClaim) -> ClaimView {
        let spec = c.spec.as_ref();
        ClaimView {
            volume_name: spec
                .and_then(|s| s.volume_name.clone())
                .filter(|n| !n.is_empty()),
            // The beta annotation first, then the field, as kube-scheduler reads a claim's
            // class (k8s.io/component-helpers storage/volume, GetPersistentVolumeClaimClass).
            storage_class: c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class").cloned())
                .or_else(|| spec.and_then(|s| s.storage_class_name.clone()))
                .filter(|n| !n.is_empty()),
            bind_completed: c
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(BIND_COMPLETED)),
            deleting: c.metadata.deletion_timestamp.is_some(),
            lost: c
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|p| p == "Lost"),
        }
    }
}

/// What the agent reads of a PersistentVolume: its node affinity as alternatives (empty: it
/// can be reached from any node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeView {
    pub terms: Vec<Requirements>,
    pub deleting: bool,
    /// The CSI driver that attaches it (`spec.csi.driver`, or the EBS CSI driver for an
    /// in-tree EBS volume under CSI migration); None for a volume nothing attaches.
    pub driver: Option<String>,
}

impl VolumeView {
    /// The volume's required node affinity. A local or hostPath volume's hostname term is
    /// dropped, as Karpenter drops it: the pod's next node is never the same host.
    pub fn from_api(v: &core::PersistentVolume) -> Result<VolumeView, String> {
        let spec = v.spec.as_ref();
        let host_bound = spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some());
        let mut terms = Vec::new();
        let required = spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref());
        for (i, t) in required
            .iter()
            .flat_map(|r| r.node_selector_terms.iter())
            .enumerate()
        {
            let path = format!("spec.nodeAffinity.required.nodeSelectorTerms[{i}]");
            let mut r = super::convert::node_term(t, &path)?;
            if host_bound {
                r.remove(labels::HOSTNAME);
            }
            terms.push(normalized(r));
        }
        let driver = spec.and_then(|s| {
            s.csi.as_ref().map(|c| c.driver.clone()).or_else(|| {
                s.aws_elastic_block_store
                    .as_ref()
                    .map(|_| volume_limits::EBS_CSI_DRIVER.to_string())
            })
        });
        Ok(VolumeView {
            terms,
            deleting: v.metadata.deletion_timestamp.is_some(),
            driver,
        })
    }
}

/// What the agent reads of a StorageClass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassView {
    /// `volumeBindingMode: WaitForFirstConsumer`; otherwise Immediate (the default).
    pub wait_for_first_consumer: bool,
    /// One alternative per allowed topology term (empty: any zone).
    pub allowed: Vec<Requirements>,
    /// The CSI driver its volumes are provisioned by (the in-tree EBS plugin translated).
    pub driver: String,
}

impl ClassView {
    pub fn from_api(c: &StorageClass) -> Result<ClassView, String> {
        let wait_for_first_consumer = match c.volume_binding_mode.as_deref() {
            None | Some("Immediate") => false,
            Some("WaitForFirstConsumer") => true,
            Some(_) => {
                return Err(
                    "volumeBindingMode: must be one of Immediate, WaitForFirstConsumer".into(),
                )
            }
        };
        let mut allowed = Vec::new();
        for (i, term) in c.allowed_topologies.iter().flatten().enumerate() {
            let mut r = Requirements::new();
            for (j, e) in term.match_label_expressions.iter().flatten().enumerate() {
                let req = Requirement::new(Operator::In, &e.values).map_err(|m| {
                    format!("allowedTopologies[{i}].matchLabelExpressions[{j}].values: {m}")
                })?;
                r.add(&e.key, req);
            }
            if !r.is_empty() {
                allowed.push(normalized(r));
            }
        }
        Ok(ClassView {
            wait_for_first_consumer,
            allowed,
            driver: volume_limits::csi_driver(&c.provisioner).to_string(),
        })
    }
}

/// Requirements with zone aliases under the zone label the catalogue's offerings carry.
fn normalized(mut r: Requirements) -> Requirements {
    for alias in ZONE_ALIASES {
        if let Some(req) = r.remove(alias) {
            r.add(labels::ZONE, req);
        }
    }
    r
}

/// The cluster's claims, volumes and classes as the agent keeps them.
pub trait VolumeLookup {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ClaimView>>;
    /// A volume, or why it cannot be read.
    fn volume(&self, name: &str) -> Option<Arc<Result<VolumeView, String>>>;
    /// A class, or why it cannot be read.
    fn class(&self, name: &str) -> Option<Arc<Result<ClassView, String>>>;
}

/// The claims a pod's volumes use: each `persistentVolumeClaim`'s, and each generic
/// ephemeral volume's, which the ephemeral volume controller names `<pod>-<volume>`.
pub fn claim_names(p: &core::Pod) -> Vec<String> {
    let pod = p.metadata.name.as_deref().unwrap_or_default();
    p.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral.as_ref().map(|_| format!("{pod}-{}", v.name))
            }
        })
        .collect()
}

/// The alternatives one claim allows, or why the pod cannot be placed yet.
fn claim_alternatives(
    namespace: &str,
    name: &str,
    lookup: &impl VolumeLookup,
) -> Result<Vec<Requirements>, String> {
    let what = format!("persistentvolumeclaim {namespace}/{name}");
    let claim = lookup
        .claim(namespace, name)
        .ok_or_else(|| format!("{what} not found"))?;
    if claim.deleting {
        return Err(format!("{what} is being deleted"));
    }
    if claim.lost {
        return Err(format!("{what} is lost: its persistentvolume is gone"));
    }
    if let Some(volume) = &claim.volume_name {
        if !claim.bind_completed {
            return Err(format!(
                "{what} is not bound yet: it names persistentvolume {volume} but has no {BIND_COMPLETED}"
            ));
        }
        let view = lookup
            .volume(volume)
            .ok_or_else(|| format!("{what}: persistentvolume {volume} not found"))?;
        let view = view
            .as_ref()
            .as_ref()
            .map_err(|e| format!("{what}: persistentvolume {volume}: {e}"))?;
        if view.deleting {
            return Err(format!(
                "{what}: persistentvolume {volume} is being deleted"
            ));
        }
        return Ok(view.terms.clone());
    }
    let class_name = claim
        .storage_class
        .as_deref()
        .ok_or_else(|| format!("{what} is unbound and names no storage class"))?;
    let class = lookup
        .class(class_name)
        .ok_or_else(|| format!("{what}: storageclass {class_name} not found"))?;
    let class = class
        .as_ref()
        .as_ref()
        .map_err(|e| format!("{what}: storageclass {class_name}: {e}"))?;
    if !class.wait_for_first_consumer {
        return Err(format!(
            "{what} is unbound and its storageclass {class_name} binds Immediate: it must be bound first"
        ));
    }
    Ok(class.allowed.clone())
}

/// Where the pod's claims let it run: alternatives, any one of which is enough (empty: no
/// constraint), or why it cannot be placed yet. Several claims cross their alternatives;
/// combinations that contradict themselves are dropped unless all do, as Karpenter does
/// (then the pod is left to fail to fit, with the scheduler's reasons).
pub fn requirements(
    namespace: &str,
    claims: &[String],
    lookup: &impl VolumeLookup,
) -> Result<Vec<Requirements>, String> {
    let mut alternatives: Vec<Requirements> = Vec::new();
    for name in claims {
        let per_claim = claim_alternatives(namespace, name, lookup)?;
        alternatives = cross(&alternatives, &per_claim);
    }
    Ok(alternatives)
}

/// The driver that attaches a claim's volume: its PersistentVolume's once bound, else its
/// class's provisioner. None when it cannot be told (a claim, volume or class not seen) or
/// nothing attaches it: such a claim counts against no limit, as in Karpenter's volume usage
/// (`pkg/scheduling/volumeusage.go`), which leaves out what it cannot resolve.
fn claim_driver(namespace: &str, name: &str, lookup: &impl VolumeLookup) -> Option<String> {
    let claim = lookup.claim(namespace, name)?;
    if let Some(volume) = &claim.volume_name {
        let view = lookup.volume(volume)?;
        return view.as_ref().as_ref().ok()?.driver.clone();
    }
    let class = lookup.class(claim.storage_class.as_deref()?)?;
    Some(class.as_ref().as_ref().ok()?.driver.clone())
}

/// The pod's claims (`namespace/name`) whose volumes the EBS CSI driver attaches: what it
/// holds of its node's attach limit ([`volume_limits::EBS_ATTACH_RESOURCE`]).
pub fn ebs_claims(
    namespace: &str,
    claims: &[String],
    lookup: &impl VolumeLookup,
) -> std::collections::BTreeSet<String> {
    claims
        .iter()
        .filter(|c| {
            claim_driver(namespace, c, lookup).as_deref() == Some(volume_limits::EBS_CSI_DRIVER)
        })
        .map(|c| format!("{namespace}/{c}"))
        .collect()
}

/// Adds the pod's EBS volumes to its requests, so that a node holds no more of them than it
/// can attach.
pub fn request_attachments(pod: &mut Pod, ebs_volumes: i64) {
    if ebs_volumes > 0 {
        pod.requests
            .extended
            .insert(volume_limits::EBS_ATTACH_RESOURCE.to_string(), ebs_volumes);
    }
}

/// Every pairing of `a`'s terms with `b`'s, either side empty meaning "no constraint";
/// self-contradicting pairs are dropped unless every pair contradicts itself.
fn cross(a: &[Requirements], b: &[Requirements]) -> Vec<Requirements> {
    if a.is_empty() {
        return b.to_vec();
    }
    if b.is_empty() {
        return a.to_vec();
    }
    let all: Vec<Requirements> = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| x.intersect(y)))
        .collect();
    let sound: Vec<Requirements> = all
        .iter()
        .filter(|r| r.unsatisfiable_key().is_none())
        .cloned()
        .collect();
    if sound.is_empty() {
        all
    } else {
        sound
    }
}

/// Adds volume alternatives to the pod's required node affinity, the way a nodeSelector
/// or zone ID joins it: the pod's terms crossed with them.
pub fn constrain(pod: &mut Pod, alternatives: &[Requirements]) {
    if alternatives.is_empty() {
        return;
    }
    pod.required_node_affinity = if pod.required_node_affinity.is_empty() {
        alternatives.to_vec()
    } else {
        pod.required_node_affinity
            .iter()
            .flat_map(|t| alternatives.iter().map(move |a| t.intersect(a)))
            .collect()
    };
}

/// A lookup over plain maps: tests', and anything that holds a snapshot.
#[derive(Debug, Default, Clone)]
pub struct VolumeMaps {
    /// By `namespace/name`.
    pub claims: BTreeMap<String, Arc<ClaimView>>,
    pub volumes: BTreeMap<String, Arc<Result<VolumeView, String>>>,
    pub classes: BTreeMap<String, Arc<Result<ClassView, String>>>,
}

impl VolumeLookup for VolumeMaps {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ClaimView>> {
        self.claims.get(&format!("{namespace}/{name}")).cloned()
    }
    fn volume(&self, name: &str) -> Option<Arc<Result<VolumeView, String>>> {
        self.volumes.get(name).cloned()
    }
    fn class(&self, name: &str) -> Option<Arc<Result<ClassView, String>>> {
        self.classes.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn zones(r: &Requirements) -> Vec<String> {
        r.get(labels::ZONE)
            .and_then(|z| z.finite_values())
            .map(|v| v.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn world() -> VolumeMaps {
        let mut m = VolumeMaps::default();
        let pv: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-b"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1b"]}]}
            ]}}}
        }))
        .unwrap();
        m.volumes
            .insert("pv-b".into(), Arc::new(VolumeView::from_api(&pv)));
        let local: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-local"},
            "spec": {"local": {"path": "/mnt"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["ip-10-0-0-1"]}]}
            ]}}}
        }))
        .unwrap();
        m.volumes
            .insert("pv-local".into(), Arc::new(VolumeView::from_api(&local)));
        for (name, mode, topo) in [
            (
                "wffc-c",
                "WaitForFirstConsumer",
                json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1c"]}]}]),
            ),
            (
                "wffc-bc",
                "WaitForFirstConsumer",
                json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1b", "us-east-1c"]}]}]),
            ),
            ("wffc-any", "WaitForFirstConsumer", json!(null)),
            ("immediate", "Immediate", json!(null)),
            ("odd", "Sometimes", json!(null)),
        ] {
            let sc: StorageClass = serde_json::from_value(json!({
                "metadata": {"name": name}, "provisioner": "ebs.csi.aws.com",
                "volumeBindingMode": mode, "allowedTopologies": topo,
            }))
            .unwrap();
            m.classes
                .insert(name.into(), Arc::new(ClassView::from_api(&sc)));
        }
        let claim = |volume: Option<&str>, class: Option<&str>, bound: bool| {
            Arc::new(ClaimView {
                volume_name: volume.map(Into::into),
                storage_class: class.map(Into::into),
                bind_completed: bound,
                ..Default::default()
            })
        };
        for (name, c) in [
            ("bound-b", claim(Some("pv-b"), Some("wffc-c"), true)),
            ("binding", claim(Some("pv-b"), None, false)),
            ("local", claim(Some("pv-local"), None, true)),
            ("dangling", claim(Some("pv-gone"), None, true)),
            ("wait-c", claim(None, Some("wffc-c"), false)),
            ("wait-bc", claim(None, Some("wffc-bc"), false)),
            ("wait-any", claim(None, Some("wffc-any"), false)),
            ("now", claim(None, Some("immediate"), false)),
            ("classless", claim(None, None, false)),
            ("unknown-class", claim(None, Some("nope"), false)),
            ("odd-class", claim(None, Some("odd"), false)),
        ] {
            m.claims.insert(format!("db/{name}"), c);
        }
        m
    }

    fn reqs(claims: &[&str]) -> Result<Vec<Requirements>, String> {
        let claims: Vec<String> = claims.iter().map(|c| c.to_string()).collect();
        requirements("db", &claims, &world())
    }

    #[test]
    fn a_bound_volume_pins_its_zone_under_the_zone_label() {
        let r = reqs(&["bound-b"]).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(zones(&r[0]), ["us-east-1b"], "the EBS CSI key normalised");
        assert!(r[0].get("topology.ebs.csi.aws.com/zone").is_none());
    }

    #[test]
    fn an_unbound_wait_for_first_consumer_claim_takes_its_class_topologies() {
        assert_eq!(zones(&reqs(&["wait-c"]).unwrap()[0]), ["us-east-1c"]);
        assert_eq!(reqs(&["wait-any"]).unwrap(), Vec::<Requirements>::new());
    }

    #[test]
    fn claims_cross_and_keep_what_agrees() {
        let r = reqs(&["wait-bc", "bound-b"]).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(zones(&r[0]), ["us-east-1b"]);
        // b and c contradict: kept, so the scheduler says why nothing fits.
        let r = reqs(&["wait-c", "bound-b"]).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].unsatisfiable_key().is_some());
    }

    #[test]
    fn a_local_volume_does_not_pin_the_host() {
        assert_eq!(reqs(&["local"]).unwrap(), vec![Requirements::new()]);
    }

    #[test]
    fn claims_that_cannot_be_judged_yet_say_why() {
        for (claim, words) in [
            ("now", "binds Immediate"),
            ("binding", BIND_COMPLETED),
            ("dangling", "persistentvolume pv-gone not found"),
            ("missing", "persistentvolumeclaim db/missing not found"),
            ("classless", "names no storage class"),
            ("unknown-class", "storageclass nope not found"),
            ("odd-class", "volumeBindingMode"),
        ] {
            let e = reqs(&["wait-c", claim]).unwrap_err();
            assert!(e.contains(words), "{claim}: {e}");
        }
    }

    #[test]
    fn volume_alternatives_cross_the_pods_own_terms() {
        let mut pod = Pod::new("db", "db-0", 100, 1);
        let alts = reqs(&["wait-bc"]).unwrap();
        constrain(&mut pod, &alts);
        assert_eq!(pod.required_node_affinity.len(), 1);
        let mut arm = Requirements::new();
        arm.add(labels::ARCH, Requirement::one("arm64"));
        let mut amd = Requirements::new();
        amd.add(labels::ARCH, Requirement::one("amd64"));
        let mut pod = Pod::new("db", "db-0", 100, 1);
        pod.required_node_affinity = vec![arm, amd];
        constrain(&mut pod, &alts);
        assert_eq!(pod.required_node_affinity.len(), 2);
        for t in &pod.required_node_affinity {
            assert_eq!(zones(t), ["us-east-1b", "us-east-1c"]);
            assert!(t.get(labels::ARCH).is_some());
        }
        let before = pod.clone();
        constrain(&mut pod, &[]);
        assert_eq!(pod, before, "no volume constraint, no change");
    }

    #[test]
    fn pod_volumes_name_their_claims() {
        let p: core::Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "tmp", "emptyDir": {}},
            ]}
        }))
        .unwrap();
        assert_eq!(claim_names(&p), ["data-web-0", "web-0-scratch"]);
    }

    #[test]
    fn ebs_volumes_are_told_by_their_volume_then_their_class() {
        let mut m = world();
        let pv = |name: &str, spec: serde_json::Value| -> core::PersistentVolume {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
        };
        for (name, spec) in [
            (
                "pv-csi",
                json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}),
            ),
            (
                "pv-intree",
                json!({"awsElasticBlockStore": {"volumeID": "vol-2"}}),
            ),
            (
                "pv-efs",
                json!({"csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"}}),
            ),
        ] {
            m.volumes
                .insert(name.into(), Arc::new(VolumeView::from_api(&pv(name, spec))));
        }
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "old-ebs"}, "provisioner": "kubernetes.io/aws-ebs",
            "volumeBindingMode": "WaitForFirstConsumer"}))
        .unwrap();
        m.classes
            .insert("old-ebs".into(), Arc::new(ClassView::from_api(&sc)));
        let bound = |v: &str| {
            Arc::new(ClaimView {
                volume_name: Some(v.into()),
                bind_completed: true,
                ..Default::default()
            })
        };
        m.claims.insert("db/csi".into(), bound("pv-csi"));
        m.claims.insert("db/intree".into(), bound("pv-intree"));
        m.claims.insert("db/efs".into(), bound("pv-efs"));
        m.claims.insert(
            "db/old".into(),
            Arc::new(ClaimView {
                storage_class: Some("old-ebs".into()),
                ..Default::default()
            }),
        );
        let names: Vec<String> = ["csi", "intree", "efs", "old", "wait-c", "missing", "csi"]
            .iter()
            .map(|c| c.to_string())
            .collect();
        let ebs: Vec<String> = ebs_claims("db", &names, &m).into_iter().collect();
        // wait-c's class is the EBS driver's too; the EFS volume and a claim not seen are not
        // counted; a claim used twice counts once.
        assert_eq!(ebs, ["db/csi", "db/intree", "db/old", "db/wait-c"]);
        let mut pod = Pod::new("db", "db-0", 100, 1);
        request_attachments(&mut pod, ebs.len() as i64);
        assert_eq!(pod.requests.extended[volume_limits::EBS_ATTACH_RESOURCE], 4);
        let mut none = Pod::new("db", "db-1", 100, 1);
        request_attachments(&mut none, 0);
        assert!(none.requests.extended.is_empty());
    }

    #[test]
    fn a_claims_class_is_read_from_the_beta_annotation_first() {
        let c: core::PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "old", "annotations": {"volume.beta.kubernetes.io/storage-class": "gp3"}},
            "spec": {"storageClassName": "ignored"},
        }))
        .unwrap();
        assert_eq!(
            ClaimView::from_api(&c).storage_class.as_deref(),
            Some("gp3")
        );
        let c: core::PersistentVolumeClaim = serde_json::from_value(
            json!({"metadata": {"name": "new"}, "spec": {"storageClassName": "gp3"}}),
        )
        .unwrap();
        assert_eq!(
            ClaimView::from_api(&c).storage_class.as_deref(),
            Some("gp3")
        );
    }
}
