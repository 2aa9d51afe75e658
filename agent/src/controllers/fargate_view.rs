//! Keeps the round off the pods that belong to Fargate (see [`crate::fargate`]).
//!
//! The profiles are read through [`crate::cloud::Cloud`] at most every [`REFRESH`]: a profile
//! only ever changes by replacement (minutes on EKS), and a round must not wait on EKS. When
//! the read fails the last list stands and the error is counted; before the first success
//! no pod is held back, which is the old behaviour, not a new failure.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::controllers::state::PodRecord;

use crate::cloud::Cloud;
use crate::controllers::events::{Recorder, Type};
use crate::controllers::operator::metrics::Metrics;
use crate::fargate::{selecting_profile, FargateProfile};

pub const REFRESH: Duration = Duration::from_secs(30);

/// Held by the controllers' context and read by the scheduling input, so it takes what it
/// uses one by one rather than the context itself.
#[derive(Default)]
pub struct FargateView {
    profiles: Mutex<(Option<Instant>, Vec<FargateProfile>)>,
    /// Pod UIDs already given the Event, so a pod that waits is told once.
    told: Mutex<HashSet<String>>,
}

impl FargateView {
    /// The profiles, re-read when older than [`REFRESH`].
    pub async fn profiles(&self, cloud: &dyn Cloud, metrics: &Metrics) -> Vec<FargateProfile> {
        let stale = {
            let g = self.profiles.lock().unwrap_or_else(|p| p.into_inner());
            g.0.is_none_or(|t| t.elapsed() >= REFRESH)
        };
        if stale {
            match cloud.fargate_profiles().await {
                Ok(ps) => {
                    *self.profiles.lock().unwrap_or_else(|p| p.into_inner()) =
                        (Some(Instant::now()), ps);
                }
                Err(e) => {
                    metrics.cloud_error(&e);
                    tracing::warn!(error = %e, "Fargate profiles not read; the last list stands");
                    // Try again next refresh, not every round.
                    self.profiles.lock().unwrap_or_else(|p| p.into_inner()).0 =
                        Some(Instant::now());
                }
            }
        }
        self.profiles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// The profile that selects this pending pod, if any. The first time a pod is found so,
    /// it gets a Warning Event saying why no node is launched and what to do.
    pub async fn holds(
        &self,
        recorder: &Recorder,
        profiles: &[FargateProfile],
        pod: &PodRecord,
    ) -> bool {
        let ns = pod.namespace();
        let Some(profile) = selecting_profile(profiles, ns, pod.labels(), &pod.annotations) else {
            return false;
        };
        let uid = pod.uid.clone();
        let first = self
            .told
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid);
        if first {
            tracing::info!(pod = %format!("{ns}/{}", pod.name()), profile, "pending pod belongs to Fargate: no EC2 capacity launched");
            recorder
                .publish(
                    &pod.reference(),
                    Type::Warning,
                    "FargateProfileSelectsPod",
                    &format!(
                        "Fargate profile {profile:?} selects this pod, but it was created before the \
                         profile was ACTIVE, so EKS did not admit it to Fargate. joiner-agent launches no \
                         EC2 capacity for it; delete the pod (its controller recreates it on Fargate), \
                         or annotate it eks.amazonaws.com/compute-type=ec2 to run it on EC2."
                    ),
                )
                .await;
        }
        true
    }

    /// Forgets pods that are no longer pending (a recreated pod has a new UID anyway).
    pub fn retain_told(&self, pending: &HashSet<String>) {
        self.told
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|u| pending.contains(u));
    }
}
