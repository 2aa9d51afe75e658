//! Keeps the cloud's instance-type catalogue warm on every replica.
//!
//! Building it takes several EC2 calls (instance types, offerings, Spot prices) that the
//! first provisioning round would otherwise wait for: about 10 s against the emulator, and
//! a leader elected during a scale-out should not pay it either. Every replica loads it once
//! its caches are synced, again when a NodeClass changes, and at least every minute, so the
//! cloud layer's TTL cache is refreshed before a round needs it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::controllers::context::Context;
use crate::controllers::state::Change;

const EVERY: Duration = Duration::from_secs(60);

pub async fn run(ctx: Arc<Context>) {
    let mut rx = ctx.state.subscribe();
    loop {
        for class in ctx.state.node_classes.list() {
            if class.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let started = Instant::now();
            match ctx.cloud.catalog(&class).await {
                Ok(c) => tracing::debug!(
                    nodeclass = %class.name_any(),
                    types = c.len(),
                    ms = started.elapsed().as_millis() as u64,
                    "catalogue warm"
                ),
                Err(e) => {
                    ctx.metrics.cloud_error(&e);
                    tracing::warn!(nodeclass = %class.name_any(), error = %e, "warming the catalogue failed; provisioning will retry it");
                }
            }
        }
        let change = async {
            loop {
                match rx.recv().await {
                    Ok(Change::NodeClass(_)) => return true,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return false,
                }
            }
        };
        if let Ok(false) = tokio::time::timeout(EVERY, change).await {
            return;
        }
    }
}
