//! DaemonSet overhead per instance type.
//!
//! Karpenter users report this computed wrong (kubernetes-sigs/karpenter#715,
//! aws/karpenter-provider-aws#4665): overhead summed over every DaemonSet in the cluster
//! over-provisions, and ignoring it under-provisions. Here a DaemonSet counts only when its
//! pod would actually land on the node: its tolerations cover the NodePool's taints
//! (startup taints excepted: they are removed once the node is ready, and DaemonSet pods
//! are scheduled after that), and its nodeSelector and required node affinity can be met by
//! the node's labels, which are the NodePool's labels and requirements together with the
//! instance type's own labels and the zones and capacity types it is offered in.

use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{first_untolerated, Taint, Toleration};

use super::InstanceType;

/// What the scheduler needs to know about a DaemonSet's pod template.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonSet {
    pub namespace: String,
    pub name: String,
    /// Requests of one pod (sum of containers, max with init containers).
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: any one term must hold. Empty means no constraint.
    pub node_affinity: Vec<Requirements>,
    pub tolerations: Vec<Toleration>,
}

impl DaemonSet {
    /// Whether a pod of this DaemonSet lands on a node described completely by `node`
    /// (labels and requirements) carrying `taints`.
    pub fn lands_on(&self, node: &Requirements, taints: &[Taint]) -> bool {
        if first_untolerated(taints, &self.tolerations).is_some() {
            return false;
        }
        let selector = Requirements::from_labels(self.node_selector.iter());
        if !node.could_satisfy(&selector) {
            return false;
        }
        self.node_affinity.is_empty() || self.node_affinity.iter().any(|t| node.could_satisfy(t))
    }
}

/// The complete label picture of a node of type `it` launched from a NodePool with
/// `pool_reqs` (template labels and requirements) named `pool`.
pub fn node_requirements(pool: &str, pool_reqs: &Requirements, it: &InstanceType) -> Requirements {
    let mut node = pool_reqs.intersect(&Requirements::from_labels(it.labels.iter()));
    let zones: BTreeSet<String> = it.offerings.iter().map(|o| o.zone.clone()).collect();
    let cts: BTreeSet<String> = it
        .offerings
        .iter()
        .map(|o| o.capacity_type.as_str().to_string())
        .collect();
    node.add(labels::ZONE, Requirement::listed(zones));
    node.add(labels::CAPACITY_TYPE, Requirement::listed(cts));
    node.add(labels::KARPENTER_NODEPOOL, Requirement::one(pool));
    node.add(labels::JOINER_NODEPOOL, Requirement::one(pool));
    node.add(labels::HOSTNAME, Requirement::exists());
    node
}

/// Sum of requests of the DaemonSets whose pods land on such a node (pods count too).
pub fn overhead(daemonsets: &[DaemonSet], node: &Requirements, taints: &[Taint]) -> Resources {
    let mut total = Resources::default();
    for ds in daemonsets {
        if ds.lands_on(node, taints) {
            let mut r = ds.requests.clone();
            r.pods = r.pods.max(1);
            total.add(&r);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CapacityType, InstanceTypeRecord, KubeletSettings, Offering};
    use crate::requirements::Operator;
    use crate::taints::Effect;

    fn it(name: &str, arch: &str, gpus: u32) -> InstanceType {
        let rec = InstanceTypeRecord {
            name: name.into(),
            vcpus: 4,
            memory_mib: 16384,
            architectures: vec![arch.into()],
            hypervisor: "nitro".into(),
            bare_metal: false,
            current_generation: true,
            burstable: false,
            max_enis: 4,
            ipv4_per_eni: 15,
            gpu_count: gpus,
            gpu_manufacturer: "NVIDIA".into(),
            gpu_name: "T4".into(),
            local_storage_gb: 0,
            max_pods: None,
            ..Default::default()
        };
        let offers = vec![Offering {
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price: 0.1,
            reservation: None,
        }];
        InstanceType::new(rec, offers, &KubeletSettings::default())
    }

    fn ds(name: &str, cpu: i64) -> DaemonSet {
        DaemonSet {
            namespace: "kube-system".into(),
            name: name.into(),
            requests: Resources::pod(cpu, 64 << 20),
            ..Default::default()
        }
    }

    #[test]
    fn counts_only_daemonsets_that_land() {
        let pool =
            Requirements::from_labels(&BTreeMap::from([("team".to_string(), "a".to_string())]));
        let taints = vec![Taint::new("dedicated", "gpu", Effect::NoSchedule)];
        let everywhere = DaemonSet {
            tolerations: vec![Toleration::exists("", None)],
            ..ds("kube-proxy", 100)
        };
        let untolerating = ds("logging", 200);
        let mut arm_only = DaemonSet {
            tolerations: vec![Toleration::exists("dedicated", None)],
            ..ds("arm-agent", 300)
        };
        arm_only
            .node_selector
            .insert(labels::ARCH.into(), "arm64".into());
        let mut gpu_only = DaemonSet {
            tolerations: vec![Toleration::equal(
                "dedicated",
                "gpu",
                Some(Effect::NoSchedule),
            )],
            ..ds("nvidia-device-plugin", 50)
        };
        gpu_only.node_affinity = vec![{
            let mut r = Requirements::new();
            r.add(
                labels::INSTANCE_GPU_COUNT,
                Requirement::new(Operator::Gt, &["0"]).unwrap(),
            );
            r
        }];
        let mut other_team = DaemonSet {
            tolerations: vec![Toleration::exists("", None)],
            ..ds("team-b-agent", 400)
        };
        other_team.node_selector.insert("team".into(), "b".into());
        let mut zonal = DaemonSet {
            tolerations: vec![Toleration::exists("", None)],
            ..ds("zone-a-agent", 25)
        };
        zonal
            .node_selector
            .insert(labels::ZONE.into(), "us-east-1a".into());
        let all = [
            everywhere,
            untolerating,
            arm_only,
            gpu_only,
            other_team,
            zonal,
        ];

        let amd = node_requirements("gpu", &pool, &it("g4dn.xlarge", "x86_64", 1));
        assert_eq!(overhead(&all, &amd, &taints).cpu_milli, 100 + 50 + 25);
        assert_eq!(overhead(&all, &amd, &taints).pods, 3);
        let arm = node_requirements("gpu", &pool, &it("m6g.xlarge", "arm64", 0));
        assert_eq!(overhead(&all, &arm, &taints).cpu_milli, 100 + 300 + 25);
        // Without the taint, the untolerating DaemonSet lands too.
        assert_eq!(overhead(&all, &arm, &[]).cpu_milli, 100 + 200 + 300 + 25);
    }
}
