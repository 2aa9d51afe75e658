//! The agent's own kinds, read and written in whichever group it serves.
//!
//! kube's typed `Api<K>` takes its URL from the type, and the derived types name
//! `joiner.dev`; under `--api karpenter` the same objects live in Karpenter's groups. This
//! is the typed API the controllers use instead: requests go to the served group's
//! resource, objects are (de)serialized as the one set of types, and what is created
//! carries the served `apiVersion`.

use std::fmt::Debug;
use std::marker::PhantomData;

use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A cluster-scoped kind of the served API, typed as `K`.
pub struct ServedApi<K> {
    api: Api<DynamicObject>,
    resource: ApiResource,
    kind: PhantomData<K>,
}

fn from_dynamic<K: DeserializeOwned>(obj: DynamicObject) -> kube::Result<K> {
    let v = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
    serde_json::from_value(v).map_err(kube::Error::SerdeError)
}

impl<K: Serialize + DeserializeOwned> ServedApi<K> {
    pub fn new(client: Client, resource: ApiResource) -> Self {
        ServedApi {
            api: Api::all_with(client, &resource),
            resource,
            kind: PhantomData,
        }
    }

    /// The served `apiVersion` of `K` (`joiner.dev/v1`, `karpenter.sh/v1`, ...).
    pub fn api_version(&self) -> &str {
        &self.resource.api_version
    }

    pub async fn get(&self, name: &str) -> kube::Result<K> {
        from_dynamic(self.api.get(name).await?)
    }

    pub async fn get_opt(&self, name: &str) -> kube::Result<Option<K>> {
        self.api.get_opt(name).await?.map(from_dynamic).transpose()
    }

    /// Creates `obj` under the served group and kind, whatever its own type names.
    pub async fn create(&self, pp: &PostParams, obj: &K) -> kube::Result<K> {
        let mut v = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
        v["apiVersion"] = self.resource.api_version.clone().into();
        v["kind"] = self.resource.kind.clone().into();
        let dynamic: DynamicObject = serde_json::from_value(v).map_err(kube::Error::SerdeError)?;
        from_dynamic(self.api.create(pp, &dynamic).await?)
    }

    pub async fn patch<P: Serialize + Debug>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> kube::Result<K> {
        from_dynamic(self.api.patch(name, pp, patch).await?)
    }

    pub async fn patch_status<P: Serialize + Debug>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> kube::Result<K> {
        from_dynamic(self.api.patch_status(name, pp, patch).await?)
    }

    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> kube::Result<()> {
        self.api.delete(name, dp).await.map(|_| ())
    }
}
