//! What the resources over a cluster-scoped `joiner.dev` object share
//! (`joiner_node_class`, `joiner_node_overlay`, `joiner_node_pool`): each kind says only
//! what is its own by implementing [`CustomObject`] (its attributes, its spec and the
//! agent's validation of it, its plan warnings, what a delete waits for), and every
//! `CustomObject` is a [`Resource`] whose lifecycle is written once, here:
//!
//! - the address: `cluster_name` and `name`, both forcing a new object, and the id
//!   `<cluster_name>:<name>`, which is also the import ID;
//! - validation: the kind's own checks, then the agent's validator over the spec the
//!   configuration declares, its field paths translated to attribute paths;
//! - create and update: one server-side apply of that spec (installing the CRDs first when
//!   the cluster does not serve them yet);
//! - read: the state stands while the live spec equals it, and is rebuilt from the live
//!   object otherwise (drift, import), keeping the configured timeouts;
//! - delete: the object is deleted and waited for until its finalizers are done.
//!
//! `joiner_agent` is not one of them: it owns a set of built-in objects (a namespace, RBAC,
//! a Deployment it waits to roll out) rather than one spec, so only its import ID and the
//! gone-cluster rule are shared, through `kubernetes::custom`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use joiner_agent::api::validate::FieldError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value as Json;

use crate::context::ProviderContext;
use crate::kubernetes::{custom, Kind, Kube};
use crate::model::attr::model;
use crate::model::paths::PathMap;
use crate::model::Model;
use crate::protocol::prelude::*;
use crate::validators;

/// Create and update are one apply; the CRDs' installation is the slow part.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// One kind of `joiner.dev` object as a Terraform resource: what differs between them. The
/// implementing type is the resource itself (`resources::all()` lists it).
#[async_trait]
pub trait CustomObject: Send + Sync + 'static {
    /// `joiner_<name>`.
    const TYPE_NAME: &'static str;
    /// The resource's description in the schema.
    const DESCRIPTION: &'static str;
    /// The object's kind in the cluster (`crate::kubernetes::kinds`).
    const KIND: Kind;
    /// How the agent validator's field paths map onto the resource's attributes.
    const PATHS: &'static PathMap;
    /// How long a delete waits for the agent's finalizers by default.
    const DELETE_TIMEOUT: Duration;

    /// The resource's typed model, with the attributes of [`Common`] and `id`.
    type Model: Model + Default + Send + Sync;
    /// The CRD's spec, as the agent reads it.
    type Spec: Serialize + DeserializeOwned + PartialEq + Send + Sync;

    /// The kind's own attributes and blocks, added after the address.
    fn attributes(schema: Schema) -> Schema;
    /// The spec a configuration declares, with the CRD's defaults filled in, so that it
    /// compares equal to what the cluster stores.
    fn spec(m: &Self::Model) -> Self::Spec;
    /// The annotations of the object itself, beside its spec.
    fn annotations(_m: &Self::Model) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// The model of a live object: what read returns when the state no longer says what
    /// the cluster holds, and after import.
    fn from_live(cluster: &str, name: &str, spec: &Self::Spec, obj: &Json) -> Self::Model;
    /// Whether a state whose spec equals the live one still stands (annotations, outputs).
    fn in_sync(_state: &Self::Model, _obj: &Json) -> bool {
        true
    }

    /// Checks of the configuration the agent's validator does not make.
    fn check(_m: &Self::Model) -> Diagnostics {
        Diagnostics::new()
    }
    /// The agent validator's errors about `spec`.
    fn agent_errors(spec: &Self::Spec) -> Vec<FieldError>;
    /// The attribute an error about the whole spec points at, and whether the attributes
    /// it is about are known yet (see [`PathMap::diagnostics`]).
    fn whole_spec_at(_m: &Self::Model) -> Option<(&'static str, bool)> {
        None
    }

    /// The kind's part of the plan, once the id is set: computed outputs, warnings, and
    /// errors that need more than the configuration. `m` is the planned model.
    async fn plan(
        _ctx: &ProviderContext,
        _plan: &mut Plan,
        _m: &Self::Model,
    ) -> Result<(), Diagnostics> {
        Ok(())
    }

    /// What a delete still waits for, said while the object `name` is there.
    async fn deleting(_kube: &Kube, _name: &str, obj: &Json) -> String {
        format!("finalizers {}", obj["metadata"]["finalizers"])
    }
}

model! {
    /// The attributes of every in-cluster resource that the lifecycle itself reads.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Common {
        pub cluster_name: Option<String>,
        pub name: Option<String>,
        pub timeouts: Value,
    }
}

/// The object's cluster and name, once both are known.
fn address(v: &Value) -> Option<(String, String)> {
    let c = Common::from_value(v);
    c.cluster_name.zip(c.name)
}

fn id_value(cluster: &str, name: &str) -> Value {
    Value::string(format!("{cluster}:{name}"))
}

#[async_trait]
impl<O: CustomObject> Resource<ProviderContext> for O {
    fn type_name(&self) -> &'static str {
        O::TYPE_NAME
    }

    fn schema(&self) -> Schema {
        let address = Schema::new(0)
            .description(O::DESCRIPTION)
            .attribute(
                Attribute::string("id")
                    .computed()
                    .description("`<cluster_name>:<name>`, also the import ID."),
            )
            .attribute(Attribute::string("cluster_name").required().force_new())
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(validators::dns_subdomain),
            );
        O::attributes(address)
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(WRITE_TIMEOUT),
            read: None,
            update: Some(WRITE_TIMEOUT),
            delete: Some(O::DELETE_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let m = O::Model::from_value(config);
        let mut d = O::check(&m);
        let errors = O::agent_errors(&O::spec(&m));
        d.extend(O::PATHS.diagnostics(O::KIND.kind, errors, config, O::whole_spec_at(&m)));
        d
    }

    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        let m = O::Model::from_value(&plan.planned);
        if let Some((cluster, name)) = address(&plan.planned) {
            plan.planned.set_attr("id", id_value(&cluster, &name));
        }
        O::plan(ctx, plan, &m).await
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        write::<O>(ctx, change).await
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        write::<O>(ctx, change).await
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let Some((cluster, name)) = address(&req.state) else {
            return Ok(None);
        };
        let found = custom::read::<O::Spec>(&ctx.kube, &cluster, O::KIND, &name);
        let Some((live, obj)) = found.await? else {
            return Ok(None);
        };
        let state = O::Model::from_value(&req.state);
        if live == O::spec(&state) && O::in_sync(&state, &obj) {
            return Ok(Some(Applied::new(req.state).with_private(req.private)));
        }
        let mut fresh = O::from_live(&cluster, &name, &live, &obj).to_value();
        fresh.set_attr("timeouts", Common::from_value(&req.state).timeouts);
        Ok(Some(Applied::new(fresh).with_private(req.private)))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let Some((cluster, name)) = address(&change.prior) else {
            return Ok(());
        };
        let pending = |kube: Kube, obj: Json| -> BoxFuture<'static, String> {
            let name = name.clone();
            Box::pin(async move { O::deleting(&kube, &name, &obj).await })
        };
        custom::delete(
            &ctx.kube,
            &ctx.stop,
            &cluster,
            O::KIND,
            &name,
            change.timeout,
            O::DELETE_TIMEOUT,
            pending,
        )
        .await?;
        Ok(())
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        let (cluster, name) = custom::split_id(id, "name")?;
        let mut state = O::Model::default().to_value();
        state.set_attr("id", Value::string(id));
        state.set_attr("cluster_name", Value::string(cluster));
        state.set_attr("name", Value::string(name));
        Ok(Applied::new(state))
    }
}

async fn write<O: CustomObject>(
    ctx: &ProviderContext,
    change: Change,
) -> Result<Applied, Diagnostics> {
    let m = O::Model::from_value(&change.planned);
    let common = Common::from_value(&change.planned);
    let cluster = common.cluster_name.unwrap_or_default();
    let name = common.name.unwrap_or_default();
    let (annotations, spec) = (O::annotations(&m), O::spec(&m));
    custom::apply(&ctx.kube, &cluster, O::KIND, &name, &annotations, &spec).await?;
    let mut state = change.planned;
    state.set_attr("id", id_value(&cluster, &name));
    Ok(Applied::new(state))
}
