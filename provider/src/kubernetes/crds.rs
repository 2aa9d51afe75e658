//! The `joiner.dev` CRDs, applied by `joiner_agent` and, when missing, by the first
//! NodePool or NodeClass written (so those need not wait for the agent resource).

use serde_json::Value as Json;

use super::connect::Kube;
use super::error::KubeError;
use super::objects::kinds;

pub fn all() -> Vec<Json> {
    joiner_agent::api::schema::crds()
        .into_iter()
        .map(|c| {
            let mut j = serde_json::to_value(c).unwrap_or_default();
            j["apiVersion"] = "apiextensions.k8s.io/v1".into();
            j["kind"] = "CustomResourceDefinition".into();
            j
        })
        .collect()
}

pub async fn ensure(kube: &Kube) -> Result<(), KubeError> {
    for crd in all() {
        kube.apply(kinds::CRD, None, &crd).await?;
    }
    Ok(())
}
