//! What every resource that owns objects inside a cluster shares (`joiner_node_pool`,
//! `joiner_node_class`, `joiner_node_overlay`, `joiner_agent`): the import ID
//! `<cluster_name>:<name>`, a cluster that is gone meaning its objects are gone, and for the
//! cluster-scoped `joiner.dev` objects, the manifest, the apply that installs the CRDs when
//! the cluster does not serve them yet, the read that parses the stored spec, and the
//! delete that waits out the agent's finalizers.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value as Json};

use super::wait::{self, Step};
use super::{Connector, Kind, Kube, KubeError};
use crate::protocol::prelude::*;

/// `<cluster_name>:<second>`, e.g. `prod:default`; `second` names the part in the error.
pub fn split_id<'a>(id: &'a str, second: &str) -> Result<(&'a str, &'a str), Diagnostics> {
    id.split_once(':')
        .filter(|(c, n)| !c.is_empty() && !n.is_empty())
        .ok_or_else(|| {
            let detail = format!("expected <cluster_name>:<{second}>, got {id:?}");
            Diagnostic::error("Invalid import ID", detail).into()
        })
}

/// A client for `cluster`, or `None` when the cluster no longer exists: its objects went
/// with it, so a read reports them gone and a delete has nothing left to do.
pub async fn client_unless_gone(
    conn: &Connector,
    cluster: &str,
) -> Result<Option<Kube>, KubeError> {
    match conn.client(cluster).await {
        Ok(k) => Ok(Some(k)),
        Err(KubeError::ClusterGone(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Applies the cluster-scoped `joiner.dev` object `kind`/`name` that Terraform manages to
/// `cluster`, installing the CRDs first if the cluster does not serve the kind yet (a
/// NodePool applied before, or without, `joiner_agent`).
pub async fn apply(
    conn: &Connector,
    cluster: &str,
    kind: Kind,
    name: &str,
    annotations: &BTreeMap<String, String>,
    spec: &impl Serialize,
) -> Result<(), KubeError> {
    let obj = &json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "terraform"},
            "annotations": annotations,
        },
        "spec": serde_json::to_value(spec).unwrap_or_default(),
    });
    let kube = conn.client(cluster).await?;
    match kube.apply(kind, None, obj).await {
        Err(e) if e.is_not_found() => {
            super::crds::ensure(&kube).await?;
            let mut last = e;
            for _ in 0..20 {
                match kube.apply(kind, None, obj).await {
                    Err(e) if e.is_not_found() => last = e,
                    other => return other.map(drop),
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(last)
        }
        other => other.map(drop),
    }
}

/// The stored spec of `kind`/`name` in `cluster`, with the whole object; `None` when the
/// cluster or the object is gone.
pub async fn read<S: DeserializeOwned>(
    conn: &Connector,
    cluster: &str,
    kind: Kind,
    name: &str,
) -> Result<Option<(S, Json)>, Diagnostics> {
    let Some(kube) = client_unless_gone(conn, cluster).await? else {
        return Ok(None);
    };
    let Some(obj) = kube.get(kind, None, name).await? else {
        return Ok(None);
    };
    let spec = serde_json::from_value(obj["spec"].clone()).map_err(|e| {
        let k = kind.kind;
        Diagnostic::error(
            format!("Unreadable {k}"),
            format!("{k} {name} in cluster {cluster} does not parse as joiner.dev/v1: {e}"),
        )
    })?;
    Ok(Some((spec, obj)))
}

/// Deletes a cluster-scoped object and waits until it is gone (its finalizers done), or
/// until `timeout` (`default` when unset) or Terraform's stop. `pending` says, from the
/// object still there, what it waits for.
#[allow(clippy::too_many_arguments)]
pub async fn delete(
    conn: &Connector,
    stop: &StopToken,
    cluster: &str,
    kind: Kind,
    name: &str,
    timeout: Option<Duration>,
    default: Duration,
    pending: impl Fn(Kube, Json) -> BoxFuture<'static, String>,
) -> Result<(), KubeError> {
    let Some(kube) = client_unless_gone(conn, cluster).await? else {
        return Ok(());
    };
    kube.delete(kind, None, name).await?;
    let what = format!("{} {name} to be deleted", kind.kind);
    let deadline = wait::deadline(timeout, default);
    let every = Duration::from_millis(500);
    wait::until(&what, deadline, every, stop, || async {
        match kube.get(kind, None, name).await? {
            None => Ok(Step::Done(())),
            Some(obj) => Ok(Step::Pending(pending(kube.clone(), obj).await)),
        }
    })
    .await
}
