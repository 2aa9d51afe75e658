//! The cluster an end-to-end test runs against: a kube-sim by default, and also a real
//! cluster when `KUBECONFIG` is set. Tests take a [`TargetCluster`] so that the same
//! assertions run on both; sim-only hooks (the AWS bridge, fake nodes) are behind
//! [`TargetCluster::sim`].

use std::path::{Path, PathBuf};

use crate::server::{client_for, KubeSim, Options};

pub enum TargetCluster {
    Sim(Box<KubeSim>),
    Real(PathBuf),
}

impl TargetCluster {
    /// A fresh kube-sim with these options.
    pub fn sim_with(opts: Options) -> anyhow::Result<TargetCluster> {
        Ok(TargetCluster::Sim(Box::new(KubeSim::start(opts)?)))
    }

    /// The real cluster named by `KUBECONFIG`, if any.
    pub fn real() -> Option<TargetCluster> {
        joiner_test_support::real_cluster_kubeconfig().map(TargetCluster::Real)
    }

    /// Every target a test should run on: a kube-sim, plus the real cluster when set.
    pub fn all(opts: Options) -> anyhow::Result<Vec<TargetCluster>> {
        let mut v = vec![Self::sim_with(opts)?];
        v.extend(Self::real());
        Ok(v)
    }

    pub fn name(&self) -> &'static str {
        match self {
            TargetCluster::Sim(_) => "kube-sim",
            TargetCluster::Real(_) => "real cluster",
        }
    }

    pub fn kubeconfig_path(&self) -> &Path {
        match self {
            TargetCluster::Sim(s) => s.kubeconfig_path(),
            TargetCluster::Real(p) => p,
        }
    }

    pub fn sim(&self) -> Option<&KubeSim> {
        match self {
            TargetCluster::Sim(s) => Some(s),
            TargetCluster::Real(_) => None,
        }
    }

    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        match self {
            TargetCluster::Sim(s) => s.client().await,
            TargetCluster::Real(p) => client_for(p, None).await,
        }
    }
}
