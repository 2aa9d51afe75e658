//! The cluster an end-to-end test runs against: a kube-sim; the real control plane
//! (etcd + kube-apiserver + controller-manager + scheduler + KWOK, `joiner-control-plane`)
//! when `JOINER_REAL_CLUSTER` asks for it (`joiner_control_plane::selection`); or, instead
//! of that, the external cluster `JOINER_TEST_KUBECONFIG` names (never the one an inherited
//! `KUBECONFIG` names). Tests take a [`TargetCluster`] so that the same
//! assertions run on each; sim-only hooks (the store, fake nodes) are behind
//! [`TargetCluster::sim`], and the EC2 → Node bridge runs on any of them
//! ([`TargetCluster::bridge`]).

use std::path::{Path, PathBuf};

use joiner_control_plane::ControlPlane;

use crate::aws::{BridgeOptions, NodeSink};
use crate::server::{client_for, KubeSim, Options};

pub enum TargetCluster {
    Sim(Box<KubeSim>),
    /// The control plane this test process started (shared by its tests, each in its own
    /// namespace).
    ControlPlane(&'static ControlPlane),
    /// A control plane of this test's own, stopped when the target is dropped: for tests
    /// that need the cluster to themselves (cluster-scoped CRDs, Nodes and a controller
    /// that acts on everything it sees), such as the agent's end-to-end scenarios.
    OwnControlPlane(Box<ControlPlane>),
    /// The external cluster `JOINER_TEST_KUBECONFIG` names.
    Real(PathBuf),
}

impl TargetCluster {
    /// A fresh kube-sim with these options.
    pub fn sim_with(opts: Options) -> anyhow::Result<TargetCluster> {
        Ok(TargetCluster::Sim(Box::new(KubeSim::start(opts)?)))
    }

    /// The external cluster named by `JOINER_TEST_KUBECONFIG`, if any.
    pub fn real() -> Option<TargetCluster> {
        joiner_test_support::real_cluster_kubeconfig().map(TargetCluster::Real)
    }

    /// The real control plane of this test process, when `JOINER_REAL_CLUSTER` asks for it.
    /// Asked for and not built, or failing to start, is an error, never a skip.
    pub fn control_plane() -> anyhow::Result<Option<TargetCluster>> {
        if joiner_control_plane::selection()? == joiner_control_plane::Selection::Off {
            return Ok(None);
        }
        Ok(Some(TargetCluster::ControlPlane(ControlPlane::shared()?)))
    }

    /// A fresh real control plane for this test alone; the caller asked for it (a test
    /// that runs only there), so a missing build is an error naming how to build it.
    /// Starting blocks for several seconds, so it runs on a blocking thread, not on the
    /// caller's runtime.
    pub async fn own_control_plane() -> anyhow::Result<TargetCluster> {
        let cp = tokio::task::spawn_blocking(|| {
            ControlPlane::start(joiner_control_plane::Options::default())
        })
        .await??;
        Ok(TargetCluster::OwnControlPlane(Box::new(cp)))
    }

    /// Every target a test should run on: a kube-sim, plus the external cluster
    /// `JOINER_TEST_KUBECONFIG` names, or else the real control plane when
    /// `JOINER_REAL_CLUSTER` is `1`.
    ///
    /// `JOINER_REAL_CLUSTER=only` leaves kube-sim out: scripts/test runs the kube-sim half
    /// while the control plane is still building, and the real half once it is there.
    pub fn all(opts: Options) -> anyhow::Result<Vec<TargetCluster>> {
        let only_real = joiner_control_plane::selection()? == joiner_control_plane::Selection::Only;
        let mut v = Vec::new();
        if !only_real {
            v.push(Self::sim_with(opts)?);
        }
        match Self::real() {
            Some(r) => v.push(r),
            None => v.extend(Self::control_plane()?),
        }
        Ok(v)
    }

    pub fn name(&self) -> &'static str {
        match self {
            TargetCluster::Sim(_) => "kube-sim",
            TargetCluster::ControlPlane(_) | TargetCluster::OwnControlPlane(_) => {
                "real control plane"
            }
            TargetCluster::Real(_) => "real cluster",
        }
    }

    pub fn kubeconfig_path(&self) -> &Path {
        match self {
            TargetCluster::Sim(s) => s.kubeconfig_path(),
            TargetCluster::ControlPlane(c) => c.kubeconfig_path(),
            TargetCluster::OwnControlPlane(c) => c.kubeconfig_path(),
            TargetCluster::Real(p) => p,
        }
    }

    /// The real control plane behind this target, if it is one this process started.
    pub fn control_plane_ref(&self) -> Option<&ControlPlane> {
        match self {
            TargetCluster::ControlPlane(c) => Some(c),
            TargetCluster::OwnControlPlane(c) => Some(c),
            _ => None,
        }
    }

    /// The control plane this target owns alone, to act on its components (restarting the
    /// API server); `None` for a shared one or any other target.
    pub fn own_control_plane_mut(&mut self) -> Option<&mut ControlPlane> {
        match self {
            TargetCluster::OwnControlPlane(c) => Some(c),
            _ => None,
        }
    }

    /// The API server's URL and CA certificate (PEM), for a client configured by hand (the
    /// agent's bootstrap user data); unknown for a cluster named only by a kubeconfig.
    pub fn server(&self) -> Option<(String, String)> {
        match self {
            TargetCluster::Sim(s) => Some((s.url(), s.ca_pem().to_string())),
            TargetCluster::ControlPlane(c) => Some((c.url().to_string(), c.ca_pem().to_string())),
            TargetCluster::OwnControlPlane(c) => {
                Some((c.url().to_string(), c.ca_pem().to_string()))
            }
            TargetCluster::Real(_) => None,
        }
    }

    pub fn sim(&self) -> Option<&KubeSim> {
        match self {
            TargetCluster::Sim(s) => Some(s),
            _ => None,
        }
    }

    /// Whether a real kube-scheduler and kube-controller-manager run behind this target
    /// (kube-sim runs its own simplified controllers; a foreign cluster, presumably, too).
    pub fn is_real(&self) -> bool {
        !matches!(self, TargetCluster::Sim(_))
    }

    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        match self {
            TargetCluster::Sim(s) => s.client().await,
            TargetCluster::ControlPlane(c) => client_for(c.kubeconfig_path(), None).await,
            TargetCluster::OwnControlPlane(c) => client_for(c.kubeconfig_path(), None).await,
            TargetCluster::Real(p) => client_for(p, None).await,
        }
    }

    /// Starts the EC2 → Node bridge for this target until `shutdown` turns true: on
    /// kube-sim it writes the store and plays the kubelet; on the real control plane it is
    /// a kube-rs client and KWOK plays the kubelet; on a foreign cluster it writes Node
    /// status itself.
    pub async fn bridge(
        &self,
        opts: BridgeOptions,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let sink = match self {
            TargetCluster::Sim(s) => NodeSink::Store(s.store().clone()),
            TargetCluster::ControlPlane(_) | TargetCluster::OwnControlPlane(_) => NodeSink::Api {
                client: self.client().await?,
                kwok: true,
            },
            TargetCluster::Real(_) => NodeSink::Api {
                client: self.client().await?,
                kwok: false,
            },
        };
        crate::aws::spawn_on(sink, opts, shutdown);
        Ok(())
    }
}
