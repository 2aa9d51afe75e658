//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder
//! renews every `retry`; a follower takes the Lease when it has seen no renewal for the
//! Lease's duration (measured on its own clock from when it last saw the record change, so
//! clock skew between replicas does not matter). A leader that stops gracefully releases
//! the Lease, so the follower takes over on its next retry instead of after the duration.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

pub const LEASE_NAME: &str = "joiner-agent";

pub struct Elector {
    api: Api<Lease>,
    identity: String,
    duration: Duration,
    retry: Duration,
    /// (holder, renewTime) last seen, and when we first saw it.
    observed: Option<(String, Option<MicroTime>, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Elector {
    pub fn new(
        client: Client,
        namespace: &str,
        identity: &str,
        duration: Duration,
        retry: Duration,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            identity: identity.to_string(),
            duration,
            retry,
            observed: None,
        }
    }

    fn spec(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            acquire_time: acquire.or_else(|| Some(now())),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One attempt: Ok(true) when we hold the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let current = match self.api.get_opt(LEASE_NAME).await? {
            Some(l) => l,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.into()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(0, None)),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                };
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let renew = spec.renew_time.clone();
        let changed = match &self.observed {
            Some((h, r, _)) => *h != holder || *r != renew,
            None => true,
        };
        if changed {
            self.observed = Some((holder.clone(), renew.clone(), Instant::now()));
        }
        let seen_at = self
            .observed
            .as_ref()
            .map(|o| o.2)
            .unwrap_or_else(Instant::now);
        let lease_duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(1) as u64))
            .unwrap_or(self.duration);
        let mine = holder == self.identity;
        let free = holder.is_empty();
        // A record seen for the first time counts as freshly renewed: a restarted replica
        // waits a full duration before taking over from a holder it never saw renew.
        let expired = !changed && seen_at.elapsed() >= lease_duration;
        if !(mine || free || expired) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + if mine { 0 } else { 1 };
        let acquire = if mine {
            spec.acquire_time.clone()
        } else {
            None
        };
        let mut next = current.clone();
        next.spec = Some(self.spec(transitions, acquire));
        match self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &next)
            .await
        {
            Ok(l) => {
                let s = l.spec.unwrap_or_default();
                self.observed = Some((
                    s.holder_identity.unwrap_or_default(),
                    s.renew_time,
                    Instant::now(),
                ));
                Ok(true)
            }
            // Someone else wrote first (resourceVersion conflict).
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up so a follower takes over at once.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(LEASE_NAME).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(identity = %self.identity, "released the leader Lease"),
            Err(e) => {
                tracing::warn!(error = %e, "releasing the leader Lease (coordination.k8s.io Lease update)")
            }
        }
    }

    /// Runs the election until `shutdown`: `leader` is true while we hold the Lease. A
    /// leader that cannot renew within the Lease duration steps down.
    pub async fn run(mut self, leader: watch::Sender<bool>, mut shutdown: watch::Receiver<bool>) {
        let mut last_renewed: Option<Instant> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    last_renewed = Some(Instant::now());
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.identity, "became leader");
                        let _ = leader.send(true);
                    }
                }
                Ok(false) => {
                    if *leader.borrow() {
                        tracing::warn!(identity = %self.identity, "lost the leader Lease to another replica");
                        let _ = leader.send(false);
                    }
                    last_renewed = None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: coordination.k8s.io Lease get/update failed");
                    if *leader.borrow() && last_renewed.is_none_or(|t| t.elapsed() >= self.duration)
                    {
                        tracing::error!("could not renew the leader Lease in time; stepping down");
                        let _ = leader.send(false);
                    }
                }
            }
            let stopping = tokio::select! {
                _ = tokio::time::sleep(self.retry) => false,
                _ = shutdown.wait_for(|s| *s) => true,
            };
            if stopping {
                if *leader.borrow() {
                    self.release().await;
                    let _ = leader.send(false);
                }
                return;
            }
        }
    }
}
