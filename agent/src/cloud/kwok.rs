//! [`KwokCloud`]: the [`Cloud`] of a cluster whose kubelets KWOK plays. A launch creates the
//! Node itself, as a kubelet would register it (providerID `kwok://<name>`, labels, taints,
//! capacity and allocatable) and annotated `kwok.x-k8s.io/node: fake` so KWOK makes it
//! Ready and runs its pods; terminating deletes it. This is what Karpenter's KWOK cloud
//! provider does, and it lets both controllers be measured on a real control plane with
//! nothing waiting on an EC2 emulator (`scripts/bench-perf-suite`, `agent/benches`).
//!
//! The catalogue is [`crate::catalog::kwok`]: the types, prices and zones Karpenter's KWOK
//! provider offers. The NodeClass's EC2 fields (subnets, security groups, AMIs, role, user
//! data, block devices) are not resolved: nothing is launched in EC2, so they are left as
//! written. Its kubelet overrides would be applied with EKS's reservations, which KWOK nodes
//! do not have, so a KWOK world's NodeClass should set none (a warning says so).
//!
//! The instances are the Nodes this cloud created (label `joiner.dev/cluster`), known
//! through one metadata-only watch, so garbage collection and adoption read memory instead
//! of listing Nodes every pass. A Node's labels carry what EC2 would keep as tags
//! (`joiner.dev/cluster`, `joiner.dev/nodepool`, `joiner.dev/nodeclaim`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::ice_cache::IceCache;
use super::{Cloud, CloudError, Instance, LaunchRequest, Launched};
use super::{TAG_CLUSTER, TAG_NODECLAIM, TAG_NODEPOOL};
use crate::api::node_class::{ResolvedAmi, ResolvedSubnet};
use crate::api::{NodeClass, NodeClassStatus};
use crate::catalog::{kwok, CapacityType, Catalog};
use crate::labels;
use crate::resources::{fmt_bytes, fmt_cpu, Resources};
use crate::scheduler::UnavailableOfferings;

/// The annotation KWOK's default selector manages Nodes by.
pub const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// providerID scheme of the Nodes this cloud creates (Karpenter's KWOK provider's).
pub const PROVIDER_PREFIX: &str = "kwok://";
/// What a KWOK Node reports as its image: there is none.
const IMAGE_ID: &str = "kwok";

/// The Nodes this cloud created, as the watch last reported them.
#[derive(Default)]
struct Index {
    by_name: HashMap<String, Instance>,
    /// NodeClaim name -> Node name.
    by_claim: HashMap<String, String>,
    /// Objects of a relist in progress (between Init and InitDone).
    relist: Option<Vec<Instance>>,
}

impl Index {
    fn put(&mut self, i: Instance) {
        if let Some(c) = i.tags.get(TAG_NODECLAIM) {
            self.by_claim.insert(c.clone(), i.instance_id.clone());
        }
        self.by_name.insert(i.instance_id.clone(), i);
    }

    fn remove(&mut self, name: &str) {
        if let Some(i) = self.by_name.remove(name) {
            if let Some(c) = i.tags.get(TAG_NODECLAIM) {
                if self.by_claim.get(c).is_some_and(|n| n == name) {
                    self.by_claim.remove(c);
                }
            }
        }
    }
}

/// The KWOK world's cloud. Cheap to share behind an `Arc`.
pub struct KwokCloud {
    client: Client,
    cluster: String,
    catalog: Catalog,
    ice: IceCache,
    index: Arc<Mutex<Index>>,
    synced: tokio::sync::watch::Receiver<bool>,
    warned_kubelet: Mutex<bool>,
    _watch: crate::task::AbortOnDrop,
}

impl std::fmt::Debug for KwokCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KwokCloud")
            .field("cluster", &self.cluster)
            .field("types", &self.catalog.len())
            .finish_non_exhaustive()
    }
}

/// The instance a Node of this cloud stands for; `None` for Nodes it did not create.
fn to_instance(meta: &kube::api::ObjectMeta) -> Option<Instance> {
    let l = meta.labels.as_ref()?;
    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
    l.get(TAG_CLUSTER)?;
    let name = meta.name.clone()?;
    Some(Instance {
        provider_id: format!("{PROVIDER_PREFIX}{name}"),
        instance_id: name,
        instance_type: get(labels::INSTANCE_TYPE),
        zone: get(labels::ZONE),
        capacity_type: CapacityType::parse(&get(labels::CAPACITY_TYPE))
            .unwrap_or(CapacityType::OnDemand),
        image_id: IMAGE_ID.into(),
        state: if meta.deletion_timestamp.is_some() {
            "shutting-down".into()
        } else {
            "running".into()
        },
        tags: [TAG_CLUSTER, TAG_NODEPOOL, TAG_NODECLAIM]
            .into_iter()
            .filter_map(|k| Some((k.to_string(), l.get(k)?.clone())))
            .collect(),
        launch_time: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0),
    })
}

fn kube_error(operation: &str, e: kube::Error) -> CloudError {
    match e {
        kube::Error::Api(s) => CloudError::new(operation, &s.reason, s.message),
        other => CloudError::new(operation, "Unknown", other.to_string()),
    }
}

/// The Node's name for a claim, which is also its instance's ID: one per claim, so a retried
/// launch finds the Node it made, and shaped as an EC2 instance ID (`i-` and 17 hex digits,
/// as EC2's resource-name hostnames are), so that an interruption message naming it passes
/// the agent's checks as a real one does.
pub fn node_name(nodeclaim: &str) -> String {
    format!("i-0{:016x}", fnv(nodeclaim))
}

/// FNV-1a: stable from run to run and release to release, unlike std's hasher.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A zone among `zones` for a claim, spread by its name: Karpenter's KWOK provider samples
/// one of the cheapest offerings at random; this does the same without a random source.
fn pick_zone<'a>(nodeclaim: &str, zones: &'a [String]) -> Option<&'a String> {
    let h = fnv(nodeclaim);
    zones.get((h % zones.len().max(1) as u64) as usize)
}

fn quantities(r: &Resources) -> BTreeMap<String, String> {
    let mut m = BTreeMap::from([
        ("cpu".to_string(), fmt_cpu(r.cpu_milli)),
        ("memory".to_string(), fmt_bytes(r.memory_bytes)),
        ("pods".to_string(), r.pods.to_string()),
    ]);
    if r.ephemeral_storage_bytes > 0 {
        m.insert(
            "ephemeral-storage".into(),
            fmt_bytes(r.ephemeral_storage_bytes),
        );
    }
    m
}

impl KwokCloud {
    /// Starts the Node watch on the current runtime.
    pub fn new(client: Client, cluster: &str) -> KwokCloud {
        let index = Arc::new(Mutex::new(Index::default()));
        let (tx, synced) = tokio::sync::watch::channel(false);
        // Metadata only: the labels say all an instance is.
        let api: Api<PartialObjectMeta<Node>> = Api::all(client.clone());
        let selector = TAG_CLUSTER.to_string() + "=" + cluster;
        let idx = index.clone();
        let task = tokio::spawn(async move {
            let mut events =
                std::pin::pin!(watcher(api, watcher::Config::default().labels(&selector)));
            while let Some(ev) = events.next().await {
                let ev: watcher::Event<PartialObjectMeta<Node>> = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        tracing::warn!(error = %e, "KWOK cloud: Node watch failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let mut ix = idx.lock().unwrap_or_else(|e| e.into_inner());
                match ev {
                    watcher::Event::Init => ix.relist = Some(Vec::new()),
                    watcher::Event::InitApply(o) => {
                        if let (Some(r), Some(i)) = (ix.relist.as_mut(), to_instance(&o.metadata)) {
                            r.push(i);
                        }
                    }
                    watcher::Event::InitDone => {
                        let listed = ix.relist.take().unwrap_or_default();
                        ix.by_name.clear();
                        ix.by_claim.clear();
                        for i in listed {
                            ix.put(i);
                        }
                        let _ = tx.send(true);
                    }
                    watcher::Event::Apply(o) => {
                        if let Some(i) = to_instance(&o.metadata) {
                            ix.put(i);
                        }
                    }
                    watcher::Event::Delete(o) => ix.remove(&o.name_any()),
                }
            }
        });
        KwokCloud {
            client,
            cluster: cluster.to_string(),
            catalog: kwok::catalog(),
            ice: IceCache::default(),
            index,
            synced,
            warned_kubelet: Mutex::new(false),
            _watch: crate::task::AbortOnDrop(task),
        }
    }

    async fn wait_synced(&self) -> Result<(), CloudError> {
        let mut rx = self.synced.clone();
        let synced = tokio::time::timeout(Duration::from_secs(60), rx.wait_for(|s| *s))
            .await
            .is_ok_and(|r| r.is_ok());
        match synced {
            true => Ok(()),
            false => Err(CloudError::new(
                "kube:WatchNodes",
                "NotSynced",
                "the KWOK cloud's Node watch has not listed the Nodes yet",
            )),
        }
    }

    /// The Node a launch creates: what a kubelet registers (providerID, labels of the type
    /// and offering, its capacity and allocatable, the claim's taints and startup taints),
    /// plus KWOK's annotation and the cloud's tags as labels.
    fn node(
        &self,
        request: &LaunchRequest,
        name: &str,
        it: &crate::catalog::InstanceType,
        zone: &str,
        ct: CapacityType,
    ) -> Result<Node, CloudError> {
        let mut node_labels = request.labels.clone();
        node_labels.extend(it.labels.clone());
        node_labels.insert(labels::ZONE.into(), zone.into());
        node_labels.insert(labels::CAPACITY_TYPE.into(), ct.as_str().into());
        node_labels.insert(labels::HOSTNAME.into(), name.into());
        node_labels.insert(TAG_CLUSTER.into(), self.cluster.clone());
        node_labels.insert(TAG_NODEPOOL.into(), request.nodepool.clone());
        node_labels.insert(TAG_NODECLAIM.into(), request.nodeclaim.clone());
        let taints: Vec<_> = request
            .taints
            .iter()
            .chain(&request.startup_taints)
            .map(|t| {
                let mut v = json!({"key": t.key, "effect": t.effect.as_str()});
                if !t.value.is_empty() {
                    v["value"] = json!(t.value);
                }
                v
            })
            .collect();
        let (k, v) = KWOK_ANNOTATION;
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": {k: v}},
            "spec": {"providerID": format!("{PROVIDER_PREFIX}{name}"), "taints": taints},
            "status": {
                "capacity": quantities(&it.capacity),
                "allocatable": quantities(&it.allocatable),
                "nodeInfo": {
                    "architecture": it.labels.get(labels::ARCH).cloned().unwrap_or_default(),
                    "operatingSystem": it.labels.get(labels::OS).cloned().unwrap_or_default(),
                    "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "",
                    "osImage": "", "systemUUID": "",
                },
            },
        }))
        .map_err(|e| CloudError::new("kube:CreateNode", "Invalid", e.to_string()))
    }
}

#[async_trait::async_trait]
impl Cloud for KwokCloud {
    async fn catalog(&self, node_class: &NodeClass) -> Result<Catalog, CloudError> {
        if node_class.spec.kubelet.is_some() {
            let mut warned = self
                .warned_kubelet
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !*warned {
                *warned = true;
                tracing::warn!(
                    nodeclass = node_class.metadata.name.as_deref().unwrap_or(""),
                    "KWOK cloud: the NodeClass's kubelet overrides are applied with EKS's reservations, which KWOK nodes do not have; leave them unset in a KWOK world"
                );
            }
        }
        Ok(self.catalog.clone())
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        // The cheapest candidate offering not in the insufficient-capacity cache, Spot first
        // when the claim allows it (the candidates are cheapest first).
        let mut choice = None;
        'pick: for &ct in &request.capacity_types {
            for c in request.candidates.iter().filter(|c| c.capacity_type == ct) {
                let zones: Vec<String> = c
                    .zones
                    .iter()
                    .filter(|z| request.zones.is_empty() || request.zones.contains(z))
                    .filter(|z| !self.ice.contains(ct, &c.instance_type, z))
                    .cloned()
                    .collect();
                if let Some(z) = pick_zone(&request.nodeclaim, &zones) {
                    choice = Some((c.instance_type.clone(), z.clone(), ct));
                    break 'pick;
                }
            }
        }
        let Some((itype, zone, ct)) = choice else {
            return Err(CloudError::new(
                "kube:CreateNode",
                "NoCandidatesLeft",
                format!(
                    "NodeClaim {}: none of its {} candidate types has an offering left",
                    request.nodeclaim,
                    request.candidates.len()
                ),
            ));
        };
        let it = self.catalog.get(&itype).ok_or_else(|| {
            CloudError::new(
                "kube:CreateNode",
                "InvalidInstanceType",
                format!("{itype} is not a KWOK instance type"),
            )
        })?;
        let name = node_name(&request.nodeclaim);
        let node = self.node(request, &name, it, &zone, ct)?;
        let api: Api<Node> = Api::all(self.client.clone());
        let created = match api.create(&PostParams::default(), &node).await {
            Ok(n) => n,
            // Launched before (a retry after a crash or a lost answer): adopt that Node.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let n = api
                    .get(&name)
                    .await
                    .map_err(|e| kube_error("kube:GetNode", e))?;
                if n.labels().get(TAG_NODECLAIM) != Some(&request.nodeclaim) {
                    return Err(CloudError::new(
                        "kube:CreateNode",
                        "AlreadyExists",
                        format!("Node {name} exists and belongs to no claim of this cluster"),
                    ));
                }
                n
            }
            Err(e) => return Err(kube_error("kube:CreateNode", e)),
        };
        let instance = to_instance(&created.metadata).ok_or_else(|| {
            CloudError::new("kube:CreateNode", "Invalid", "created Node lost its labels")
        })?;
        // Known at once, not only when the watch reports it.
        self.index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(instance.clone());
        Ok(Launched {
            instance_id: instance.instance_id,
            provider_id: instance.provider_id,
            instance_type: instance.instance_type,
            zone: instance.zone,
            capacity_type: instance.capacity_type,
            image_id: IMAGE_ID.into(),
        })
    }

    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.wait_synced().await?;
        let ix = self.index.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ix.by_name.values().cloned().collect())
    }

    async fn instance_for(&self, nodeclaim: &str) -> Result<Option<Instance>, CloudError> {
        self.wait_synced().await?;
        let ix = self.index.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ix
            .by_claim
            .get(nodeclaim)
            .and_then(|n| ix.by_name.get(n))
            .cloned())
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        let api: Api<Node> = Api::all(self.client.clone());
        for id in instance_ids {
            match api.delete(id, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kube_error("kube:DeleteNode", e)),
            }
            if let Some(i) = self
                .index
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .by_name
                .get_mut(id)
            {
                i.state = "shutting-down".into();
            }
        }
        Ok(())
    }

    fn unavailable(&self) -> UnavailableOfferings {
        self.ice.snapshot()
    }

    fn mark_unavailable(&self, capacity_type: CapacityType, instance_type: &str, zone: &str) {
        self.ice.insert(capacity_type, instance_type, zone);
    }

    async fn prune_launch_templates(&self, _in_use: &[NodeClass]) -> Result<(), CloudError> {
        Ok(())
    }

    async fn fargate_profiles(&self) -> Result<Vec<crate::fargate::FargateProfile>, CloudError> {
        Ok(Vec::new())
    }

    /// The world's zones as one subnet each and the one image every KWOK Node reports: a
    /// NodeClass's status then says what its nodes run on, and drift compares images with
    /// something true (a KWOK node is never drifted by its image).
    async fn resolve(&self, _node_class: &NodeClass) -> Result<NodeClassStatus, CloudError> {
        Ok(NodeClassStatus {
            subnets: kwok::ZONES
                .iter()
                .map(|z| ResolvedSubnet {
                    id: format!("kwok-{z}"),
                    zone: z.to_string(),
                    zone_id: Some(format!("kwok-{z}")),
                })
                .collect(),
            amis: vec![ResolvedAmi {
                id: IMAGE_ID.into(),
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    /// A KWOK "instance" carries its tags as Node labels: adopting one labels the Node.
    async fn tag_adopted(
        &self,
        instance_id: &str,
        nodeclaim: &str,
        nodepool: &str,
    ) -> Result<(), CloudError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"labels": {
            TAG_CLUSTER: self.cluster, TAG_NODECLAIM: nodeclaim, TAG_NODEPOOL: nodepool,
        }}});
        api.patch(instance_id, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube_error("kube:PatchNode", e))?;
        Ok(())
    }

    /// The KWOK world has no capacity reservations.
    async fn capacity_reservations(
        &self,
        _ids: &[String],
    ) -> Result<Vec<crate::catalog::reservations::ReservationRecord>, CloudError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_zone_is_one_of_its_allowed_zones_and_stable() {
        let zones: Vec<String> = kwok::ZONES.iter().map(|z| z.to_string()).collect();
        let z = pick_zone("default-abc12", &zones).unwrap();
        assert_eq!(pick_zone("default-abc12", &zones), Some(z));
        let spread: std::collections::BTreeSet<_> = (0..40)
            .filter_map(|i| pick_zone(&format!("default-{i}"), &zones))
            .collect();
        assert_eq!(spread.len(), 4, "claims spread over the zones");
        assert_eq!(pick_zone("x", &[]), None);
    }

    #[test]
    fn only_this_clusters_labelled_nodes_are_instances() {
        let mut meta = kube::api::ObjectMeta {
            name: Some(node_name("default-abc12")),
            ..Default::default()
        };
        assert!(to_instance(&meta).is_none());
        meta.labels = Some(
            [
                (TAG_CLUSTER, "c"),
                (TAG_NODECLAIM, "default-abc12"),
                (labels::INSTANCE_TYPE, "c-2x-amd64-linux"),
                (labels::ZONE, "test-zone-b"),
                (labels::CAPACITY_TYPE, "spot"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let i = to_instance(&meta).unwrap();
        assert_eq!(
            i.provider_id,
            format!("kwok://{}", node_name("default-abc12"))
        );
        let hex = i.instance_id.strip_prefix("i-").unwrap();
        assert!(
            hex.len() == 17 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "an EC2-shaped instance ID: {}",
            i.instance_id
        );
        assert_eq!(i.capacity_type, CapacityType::Spot);
        assert_eq!(i.state, "running");
        assert_eq!(i.tags[TAG_NODECLAIM], "default-abc12");
    }
}
