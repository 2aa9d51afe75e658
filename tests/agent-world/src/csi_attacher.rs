//! The EBS CSI driver's external-attacher, for a real control plane, which has
//! kube-controller-manager's attach-detach controller but no CSI driver. The controller
//! creates a VolumeAttachment for each CSI volume a pod on a Node it manages uses (the Node's
//! `volumes.kubernetes.io/controller-managed-attach-detach` annotation), refuses a second
//! node a `ReadWriteOnce` volume while an attachment remains (its Multi-Attach Event), and
//! deletes the attachment once no pod there uses the volume. The external-attacher is what
//! answers: it puts its finalizer on each attachment of its driver and reports it attached,
//! and it lets a deleted one go (takes its finalizer off) once the driver has detached the
//! volume.
//!
//! A test holds the detachments from a node ([`CsiAttacher::hold`]) to play a driver that
//! has not detached yet, and lets them go ([`CsiAttacher::release`]). kube-sim plays the same
//! part inside itself (`kube_sim::attach`, with a detach delay on the Node).
//!
//! Not played: the finalizer the real attacher also puts on the PersistentVolume, which only
//! delays the volume's deletion, and the CSI calls themselves.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::ebs_provisioner::DRIVER;

/// The finalizer the external-attacher of `ebs.csi.aws.com` puts on its attachments (the
/// driver's name, every character that is not a letter or digit made `-`).
pub const FINALIZER: &str = "external-attacher/ebs-csi-aws-com";

/// The attacher, running until dropped.
pub struct CsiAttacher {
    held: Arc<Mutex<HashSet<String>>>,
    wake: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl CsiAttacher {
    /// Starts watching every VolumeAttachment; each change makes one pass over all of them.
    pub fn start(client: kube::Client) -> CsiAttacher {
        let held = Arc::new(Mutex::new(HashSet::new()));
        let wake = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(run(client, held.clone(), wake.clone()));
        CsiAttacher { held, wake, task }
    }

    /// Holds every detachment from `node` until [`CsiAttacher::release`]: its deleted
    /// attachments stay, with their deletion timestamp, as while a driver detaches.
    pub fn hold(&self, node: &str) {
        self.held.lock().unwrap().insert(node.to_string());
    }

    /// The driver has detached from `node`: its deleted attachments go.
    pub fn release(&self, node: &str) {
        self.held.lock().unwrap().remove(node);
        self.wake.notify_one();
    }
}

impl Drop for CsiAttacher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    client: kube::Client,
    held: Arc<Mutex<HashSet<String>>>,
    wake: Arc<tokio::sync::Notify>,
) {
    let api: Api<VolumeAttachment> = Api::all(client);
    let mut changes = watcher(api.clone(), watcher::Config::default()).boxed();
    loop {
        tokio::select! {
            change = changes.next() => if change.is_none() { return },
            _ = wake.notified() => {}
        }
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for a in list.items.iter().filter(|a| a.spec.attacher == DRIVER) {
            let node_held = held.lock().unwrap().contains(&a.spec.node_name);
            if let Err(e) = answer(&api, a, node_held).await {
                eprintln!("csi attacher: VolumeAttachment {}: {e}", a.name_any());
            }
        }
    }
}

/// What the external-attacher does with one attachment: takes and attaches a live one, lets
/// a deleted one go unless its node's detachments are held.
async fn answer(api: &Api<VolumeAttachment>, a: &VolumeAttachment, held: bool) -> kube::Result<()> {
    let name = a.name_any();
    let ours = a.finalizers().iter().any(|f| f == FINALIZER);
    if a.metadata.deletion_timestamp.is_some() {
        if ours && !held {
            let rest: Vec<&String> = a.finalizers().iter().filter(|f| *f != FINALIZER).collect();
            let patch =
                json!({"metadata": {"finalizers": rest, "resourceVersion": a.resource_version()}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        return Ok(());
    }
    if !ours {
        let mut all = a.finalizers().to_vec();
        all.push(FINALIZER.to_string());
        let patch =
            json!({"metadata": {"finalizers": all, "resourceVersion": a.resource_version()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    if !a.status.as_ref().is_some_and(|s| s.attached) {
        let patch = json!({"status": {"attached": true}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}
