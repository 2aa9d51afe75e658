//! The tfplugin6 `Provider` gRPC service: decodes Terraform's requests, runs the generic
//! parts of each operation (validation, default plans, timeouts, state bookkeeping) and calls
//! the resource or data source.

use super::convert::{self, decode_dynamic, encode_dynamic, unknown_paths};
use super::diagnostics::{Diagnostic, Diagnostics};
use super::plan::default_plan;
use super::proto::tfplugin6 as pb;
use super::resource::{
    Applied, Change, ConfigureRequest, DataSource, Plan, Provider, ReadRequest, Resource,
};
use super::schema::{run_validators, Schema};
use super::stop::StopToken;
use super::timeouts::{self, format_duration, Operation, Timeouts};
use super::value::{AttributePath, Type, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tonic::{Request, Response, Status};

struct ResourceEntry<C> {
    resource: Arc<dyn Resource<C>>,
    /// The resource's schema plus the `timeouts` block when it declares timeouts.
    schema: Schema,
    ty: Type,
    timeouts: Option<Timeouts>,
}

struct DataSourceEntry<C> {
    source: Arc<dyn DataSource<C>>,
    schema: Schema,
    ty: Type,
}

/// Serves one [`Provider`] over tfplugin6.
pub struct ProviderService<P: Provider> {
    provider: P,
    provider_schema: Schema,
    resources: BTreeMap<String, ResourceEntry<P::Context>>,
    data_sources: BTreeMap<String, DataSourceEntry<P::Context>>,
    context: RwLock<Option<Arc<P::Context>>>,
    stop: StopToken,
}

impl<P: Provider> ProviderService<P> {
    pub fn new(provider: P, stop: StopToken) -> Self {
        let mut resources = BTreeMap::new();
        for r in provider.resources() {
            let mut schema = r.schema();
            let timeouts = r.timeouts();
            if let Some(t) = &timeouts {
                schema.block.blocks.push(t.block());
            }
            let ty = schema.implied_type();
            resources.insert(
                r.type_name().to_string(),
                ResourceEntry {
                    resource: r,
                    schema,
                    ty,
                    timeouts,
                },
            );
        }
        let mut data_sources = BTreeMap::new();
        for d in provider.data_sources() {
            let schema = d.schema();
            let ty = schema.implied_type();
            data_sources.insert(
                d.type_name().to_string(),
                DataSourceEntry {
                    source: d,
                    schema,
                    ty,
                },
            );
        }
        ProviderService {
            provider_schema: provider.schema(),
            provider,
            resources,
            data_sources,
            context: RwLock::new(None),
            stop,
        }
    }

    pub fn stop_token(&self) -> &StopToken {
        &self.stop
    }

    fn resource(&self, name: &str) -> Result<&ResourceEntry<P::Context>, Diagnostics> {
        self.resources.get(name).ok_or_else(|| {
            Diagnostic::error(
                "Unknown resource type",
                format!("this provider has no resource type {name:?}"),
            )
            .into()
        })
    }

    fn data_source(&self, name: &str) -> Result<&DataSourceEntry<P::Context>, Diagnostics> {
        self.data_sources.get(name).ok_or_else(|| {
            Diagnostic::error(
                "Unknown data source",
                format!("this provider has no data source {name:?}"),
            )
            .into()
        })
    }

    fn context(&self) -> Result<Arc<P::Context>, Diagnostics> {
        self.context
            .read()
            .expect("context lock poisoned")
            .clone()
            .ok_or_else(|| {
                Diagnostic::error(
                    "Provider not configured",
                    "Terraform called the provider before ConfigureProvider succeeded",
                )
                .into()
            })
    }

    fn validate_config(schema: &Schema, config: &Value, extra: Diagnostics) -> Diagnostics {
        let mut d = Diagnostics::new();
        run_validators(&schema.block, config, &AttributePath::root(), &mut d);
        d.extend(extra);
        d
    }

    // ---- the operations, with Diagnostics as the error channel ----------------------

    fn validate_resource(&self, type_name: &str, config: Option<&pb::DynamicValue>) -> Diagnostics {
        let run = || -> Result<Diagnostics, Diagnostics> {
            let e = self.resource(type_name)?;
            let config = decode_dynamic(config, &e.ty, "configuration")?;
            let mut extra = e.resource.validate(&config);
            if let Some(t) = &e.timeouts {
                for d in t.validate(&config) {
                    extra.push(d);
                }
            }
            Ok(Self::validate_config(&e.schema, &config, extra))
        };
        run().unwrap_or_else(|d| d)
    }

    fn validate_data_source(
        &self,
        type_name: &str,
        config: Option<&pb::DynamicValue>,
    ) -> Diagnostics {
        let run = || -> Result<Diagnostics, Diagnostics> {
            let e = self.data_source(type_name)?;
            let config = decode_dynamic(config, &e.ty, "configuration")?;
            let extra = e.source.validate(&config);
            Ok(Self::validate_config(&e.schema, &config, extra))
        };
        run().unwrap_or_else(|d| d)
    }

    async fn upgrade(
        &self,
        req: pb::upgrade_resource_state::Request,
    ) -> Result<pb::DynamicValue, Diagnostics> {
        let e = self.resource(&req.type_name)?;
        let raw = req.raw_state.unwrap_or_default();
        if raw.json.is_empty() {
            if raw.flatmap.is_empty() {
                return encode_dynamic(&Value::Null, &e.ty, "state");
            }
            return Err(Diagnostic::error(
                "Unsupported state format",
                "this state was written in Terraform 0.11's flatmap format, which joiner never used",
            )
            .into());
        }
        let json: serde_json::Value = serde_json::from_slice(&raw.json).map_err(|err| {
            Diagnostic::error(
                "Invalid stored state",
                format!("the stored state is not JSON: {err}"),
            )
        })?;
        let json = e.resource.upgrade_state(req.version, json)?;
        let json = prune_to_type(json, &e.ty);
        let v = super::json::from_json(&json, &e.ty).map_err(|err| {
            Diagnostic::error(
                "Invalid stored state",
                format!(
                    "the stored {} state does not match the schema: {err}",
                    req.type_name
                ),
            )
        })?;
        encode_dynamic(&v, &e.ty, "upgraded state")
    }

    async fn configure(&self, req: pb::configure_provider::Request) -> Diagnostics {
        let ty = self.provider_schema.implied_type();
        let config = match decode_dynamic(req.config.as_ref(), &ty, "provider configuration") {
            Ok(c) => c,
            Err(d) => return d,
        };
        let req = ConfigureRequest {
            config,
            terraform_version: req.terraform_version,
            stop: self.stop.clone(),
        };
        match self.provider.configure(req).await {
            Ok(ctx) => {
                *self.context.write().expect("context lock poisoned") = Some(Arc::new(ctx));
                Diagnostics::new()
            }
            Err(d) => d,
        }
    }

    async fn read(
        &self,
        req: pb::read_resource::Request,
    ) -> Result<(pb::DynamicValue, Vec<u8>), Diagnostics> {
        let e = self.resource(&req.type_name)?;
        let state = decode_dynamic(req.current_state.as_ref(), &e.ty, "state")?;
        if state.is_null() {
            return Ok((encode_dynamic(&Value::Null, &e.ty, "state")?, req.private));
        }
        let ctx = self.context()?;
        let timeout = e
            .timeouts
            .and_then(|t| t.effective(&state, Operation::Read));
        let read = e.resource.read(
            &ctx,
            ReadRequest {
                state: state.clone(),
                private: req.private,
            },
        );
        let read = interruptible(
            &self.stop,
            "refresh",
            bounded(timeout, Operation::Read, read),
        )
        .await?;
        match read {
            None => Ok((encode_dynamic(&Value::Null, &e.ty, "state")?, Vec::new())),
            Some(mut applied) => {
                carry_timeouts(e, &state, &mut applied.state);
                check_known(&applied.state, &req.type_name, "read")?;
                Ok((
                    encode_dynamic(&applied.state, &e.ty, "refreshed state")?,
                    applied.private,
                ))
            }
        }
    }

    async fn plan(
        &self,
        req: pb::plan_resource_change::Request,
    ) -> Result<pb::plan_resource_change::Response, Diagnostics> {
        let e = self.resource(&req.type_name)?;
        let prior = decode_dynamic(req.prior_state.as_ref(), &e.ty, "prior state")?;
        let proposed = decode_dynamic(req.proposed_new_state.as_ref(), &e.ty, "proposed state")?;
        let config = decode_dynamic(req.config.as_ref(), &e.ty, "configuration")?;
        if proposed.is_null() {
            // Destroy: nothing to plan.
            return Ok(pb::plan_resource_change::Response {
                planned_state: Some(encode_dynamic(&Value::Null, &e.ty, "planned state")?),
                planned_private: req.prior_private,
                ..Default::default()
            });
        }
        let mut plan = Plan {
            prior,
            proposed,
            config,
            planned: Value::Null,
            requires_replace: Vec::new(),
            planned_private: req.prior_private.clone(),
            prior_private: req.prior_private,
            warnings: Diagnostics::new(),
        };
        default_plan(&e.schema, &mut plan);
        let ctx = self.context()?;
        interruptible(&self.stop, "plan", e.resource.modify_plan(&ctx, &mut plan)).await?;
        Ok(pb::plan_resource_change::Response {
            planned_state: Some(encode_dynamic(&plan.planned, &e.ty, "planned state")?),
            requires_replace: plan.requires_replace.iter().map(convert::path).collect(),
            planned_private: plan.planned_private,
            diagnostics: convert::diagnostics(&plan.warnings),
            legacy_type_system: false,
        })
    }

    async fn apply(
        &self,
        req: pb::apply_resource_change::Request,
    ) -> pb::apply_resource_change::Response {
        let e = match self.resource(&req.type_name) {
            Ok(e) => e,
            Err(d) => return apply_response(None, Vec::new(), d),
        };
        let decoded = (|| {
            Ok::<_, Diagnostics>((
                decode_dynamic(req.prior_state.as_ref(), &e.ty, "prior state")?,
                decode_dynamic(req.planned_state.as_ref(), &e.ty, "planned state")?,
                decode_dynamic(req.config.as_ref(), &e.ty, "configuration")?,
                self.context()?,
            ))
        })();
        let (prior, planned, config, ctx) = match decoded {
            Ok(x) => x,
            Err(d) => return apply_response(None, Vec::new(), d),
        };
        let op = match (prior.is_null(), planned.is_null()) {
            (true, false) => Operation::Create,
            (false, true) => Operation::Delete,
            (false, false) => Operation::Update,
            (true, true) => {
                return apply_response(Some(encode_null(&e.ty)), Vec::new(), Diagnostics::new())
            }
        };
        let timeout = e.timeouts.and_then(|t| {
            t.effective(
                if op == Operation::Delete {
                    &prior
                } else {
                    &planned
                },
                op,
            )
        });
        let change = Change {
            prior: prior.clone(),
            planned: planned.clone(),
            config,
            private: req.planned_private.clone(),
            timeout,
        };
        let r = &e.resource;
        // Apply is not cancelled on StopProvider: cutting an AWS call short could leave an
        // object Terraform never hears about. Resources watch `stop` in their own waits.
        let result: Result<Option<Applied>, Diagnostics> = match op {
            Operation::Create => bounded(timeout, op, r.create(&ctx, change)).await.map(Some),
            Operation::Update => bounded(timeout, op, r.update(&ctx, change)).await.map(Some),
            _ => bounded(timeout, op, r.delete(&ctx, change))
                .await
                .map(|()| None),
        };
        match result {
            Ok(None) => apply_response(Some(encode_null(&e.ty)), Vec::new(), Diagnostics::new()),
            Ok(Some(mut applied)) => {
                carry_timeouts(e, &planned, &mut applied.state);
                let encoded = check_known(&applied.state, &req.type_name, op.name())
                    .and_then(|()| encode_dynamic(&applied.state, &e.ty, "new state"));
                match encoded {
                    Ok(v) => apply_response(Some(v), applied.private, applied.warnings),
                    // Keep what existed before rather than lose track of the object.
                    Err(d) => apply_response(req.prior_state.clone(), req.planned_private, d),
                }
            }
            Err(mut d) => {
                let fallback = match (d.partial_state.take(), op) {
                    (Some(mut partial), _) => {
                        carry_timeouts(e, &planned, &mut partial);
                        encode_dynamic(&partial, &e.ty, "partial state").ok()
                    }
                    (None, Operation::Create) => Some(encode_null(&e.ty)),
                    (None, _) => req.prior_state.clone(),
                };
                apply_response(fallback, req.planned_private, d)
            }
        }
    }

    async fn import(
        &self,
        req: pb::import_resource_state::Request,
    ) -> Result<pb::import_resource_state::ImportedResource, Diagnostics> {
        let e = self.resource(&req.type_name)?;
        let ctx = self.context()?;
        let applied = interruptible(&self.stop, "import", e.resource.import(&ctx, &req.id)).await?;
        if !matches!(applied.state, Value::Object(_)) {
            return Err(Diagnostic::error(
                "Import produced no object",
                format!("{} import of {:?} returned no state", req.type_name, req.id),
            )
            .into());
        }
        Ok(pb::import_resource_state::ImportedResource {
            type_name: req.type_name,
            state: Some(encode_dynamic(&applied.state, &e.ty, "imported state")?),
            private: applied.private,
        })
    }

    async fn read_data(
        &self,
        req: pb::read_data_source::Request,
    ) -> Result<pb::DynamicValue, Diagnostics> {
        let e = self.data_source(&req.type_name)?;
        let config = decode_dynamic(req.config.as_ref(), &e.ty, "configuration")?;
        let ctx = self.context()?;
        let state = interruptible(&self.stop, "read", e.source.read(&ctx, config)).await?;
        check_known(&state, &req.type_name, "read")?;
        encode_dynamic(&state, &e.ty, "data source state")
    }
}

fn encode_null(ty: &Type) -> pb::DynamicValue {
    encode_dynamic(&Value::Null, ty, "state").expect("null always encodes")
}

fn apply_response(
    state: Option<pb::DynamicValue>,
    private: Vec<u8>,
    d: Diagnostics,
) -> pb::apply_resource_change::Response {
    pb::apply_resource_change::Response {
        new_state: state,
        private,
        diagnostics: convert::diagnostics(&d),
        legacy_type_system: false,
    }
}

/// The `timeouts` block is configuration, not remote state: keep the user's value.
fn carry_timeouts<C>(e: &ResourceEntry<C>, from: &Value, to: &mut Value) {
    if e.timeouts.is_some() {
        to.set_attr(timeouts::BLOCK_NAME, from.get(timeouts::BLOCK_NAME).clone());
    }
}

fn check_known(state: &Value, type_name: &str, op: &str) -> Result<(), Diagnostics> {
    let unknown = unknown_paths(state);
    if unknown.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = unknown.iter().map(ToString::to_string).collect();
    Err(Diagnostic::error(
        "Provider left values unknown",
        format!(
            "{type_name} {op} did not set {}; this is a bug in terraform-provider-joiner",
            list.join(", ")
        ),
    )
    .into())
}

/// Runs `fut` under the operation's timeout, if any.
async fn bounded<T>(
    timeout: Option<Duration>,
    op: Operation,
    fut: impl Future<Output = Result<T, Diagnostics>>,
) -> Result<T, Diagnostics> {
    let Some(limit) = timeout else {
        return fut.await;
    };
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(Diagnostic::error_at(
            AttributePath::new(timeouts::BLOCK_NAME).attr(op.name()),
            format!("Timed out after {}", format_duration(limit)),
            format!(
                "the {} did not finish in time; the remote object may still be changing. \
                 Raise timeouts.{} if this operation is expected to take longer",
                op.name(),
                op.name()
            ),
        )
        .into()),
    }
}

/// Runs a side-effect-free step, returning early when Terraform asks the provider to stop.
async fn interruptible<T>(
    stop: &StopToken,
    what: &str,
    fut: impl Future<Output = Result<T, Diagnostics>>,
) -> Result<T, Diagnostics> {
    tokio::select! {
        r = fut => r,
        () = stop.stopped() => Err(Diagnostic::error(
            "Interrupted",
            format!("the {what} was stopped because Terraform asked the provider to stop"),
        ).into()),
    }
}

/// Drops object attributes the current schema no longer has, so that state written by an
/// older provider (same schema version, an attribute removed) still loads.
fn prune_to_type(j: serde_json::Value, ty: &Type) -> serde_json::Value {
    use serde_json::Value as J;
    match (j, ty) {
        (J::Object(m), Type::Object(attrs)) => J::Object(
            m.into_iter()
                .filter_map(|(k, v)| attrs.get(&k).map(|t| (k, prune_to_type(v, t))))
                .collect(),
        ),
        (J::Object(m), Type::Map(et)) => J::Object(
            m.into_iter()
                .map(|(k, v)| (k, prune_to_type(v, et)))
                .collect(),
        ),
        (J::Array(a), Type::List(et) | Type::Set(et)) => {
            J::Array(a.into_iter().map(|v| prune_to_type(v, et)).collect())
        }
        (j, _) => j,
    }
}

fn respond<T>(t: T) -> Result<Response<T>, Status> {
    Ok(Response::new(t))
}

/// What the provider tells clients it can do. Only `get_provider_schema_optional`: the
/// schemas are built once at start-up and need no GetProviderSchema call first, so clients
/// may serve them from their cache (OpenTofu otherwise asks before every RPC). Not
/// `plan_destroy` (destroy plans need nothing from us) nor `move_resource_state`.
fn server_capabilities() -> pb::ServerCapabilities {
    pb::ServerCapabilities {
        get_provider_schema_optional: true,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl<P: Provider> pb::provider_server::Provider for ProviderService<P> {
    /// Resource identities (protocol 6.9): none. Every resource imports by its ID string,
    /// which Terraform and OpenTofu keep supporting for providers without identities.
    async fn get_resource_identity_schemas(
        &self,
        _: Request<pb::get_resource_identity_schemas::Request>,
    ) -> Result<Response<pb::get_resource_identity_schemas::Response>, Status> {
        respond(pb::get_resource_identity_schemas::Response::default())
    }

    async fn get_metadata(
        &self,
        _: Request<pb::get_metadata::Request>,
    ) -> Result<Response<pb::get_metadata::Response>, Status> {
        respond(pb::get_metadata::Response {
            server_capabilities: Some(server_capabilities()),
            diagnostics: Vec::new(),
            data_sources: self
                .data_sources
                .keys()
                .map(|k| pb::get_metadata::DataSourceMetadata {
                    type_name: k.clone(),
                })
                .collect(),
            resources: self
                .resources
                .keys()
                .map(|k| pb::get_metadata::ResourceMetadata {
                    type_name: k.clone(),
                })
                .collect(),
        })
    }

    async fn get_provider_schema(
        &self,
        _: Request<pb::get_provider_schema::Request>,
    ) -> Result<Response<pb::get_provider_schema::Response>, Status> {
        respond(pb::get_provider_schema::Response {
            provider: Some(convert::schema(&self.provider_schema)),
            resource_schemas: self
                .resources
                .iter()
                .map(|(k, e)| (k.clone(), convert::schema(&e.schema)))
                .collect(),
            data_source_schemas: self
                .data_sources
                .iter()
                .map(|(k, e)| (k.clone(), convert::schema(&e.schema)))
                .collect(),
            diagnostics: Vec::new(),
            provider_meta: None,
            server_capabilities: Some(server_capabilities()),
        })
    }

    async fn validate_provider_config(
        &self,
        req: Request<pb::validate_provider_config::Request>,
    ) -> Result<Response<pb::validate_provider_config::Response>, Status> {
        let ty = self.provider_schema.implied_type();
        let d = match decode_dynamic(req.get_ref().config.as_ref(), &ty, "provider configuration") {
            Ok(config) => {
                let extra = self.provider.validate(&config);
                Self::validate_config(&self.provider_schema, &config, extra)
            }
            Err(d) => d,
        };
        respond(pb::validate_provider_config::Response {
            diagnostics: convert::diagnostics(&d),
        })
    }

    async fn validate_resource_config(
        &self,
        req: Request<pb::validate_resource_config::Request>,
    ) -> Result<Response<pb::validate_resource_config::Response>, Status> {
        let r = req.get_ref();
        let d = self.validate_resource(&r.type_name, r.config.as_ref());
        respond(pb::validate_resource_config::Response {
            diagnostics: convert::diagnostics(&d),
        })
    }

    async fn validate_data_resource_config(
        &self,
        req: Request<pb::validate_data_resource_config::Request>,
    ) -> Result<Response<pb::validate_data_resource_config::Response>, Status> {
        let r = req.get_ref();
        let d = self.validate_data_source(&r.type_name, r.config.as_ref());
        respond(pb::validate_data_resource_config::Response {
            diagnostics: convert::diagnostics(&d),
        })
    }

    async fn validate_data_source_config(
        &self,
        req: Request<pb::validate_data_resource_config::Request>,
    ) -> Result<Response<pb::validate_data_resource_config::Response>, Status> {
        self.validate_data_resource_config(req).await
    }

    async fn upgrade_resource_state(
        &self,
        req: Request<pb::upgrade_resource_state::Request>,
    ) -> Result<Response<pb::upgrade_resource_state::Response>, Status> {
        respond(match self.upgrade(req.into_inner()).await {
            Ok(v) => pb::upgrade_resource_state::Response {
                upgraded_state: Some(v),
                diagnostics: Vec::new(),
            },
            Err(d) => pb::upgrade_resource_state::Response {
                upgraded_state: None,
                diagnostics: convert::diagnostics(&d),
            },
        })
    }

    async fn configure_provider(
        &self,
        req: Request<pb::configure_provider::Request>,
    ) -> Result<Response<pb::configure_provider::Response>, Status> {
        let d = self.configure(req.into_inner()).await;
        respond(pb::configure_provider::Response {
            diagnostics: convert::diagnostics(&d),
        })
    }

    async fn read_resource(
        &self,
        req: Request<pb::read_resource::Request>,
    ) -> Result<Response<pb::read_resource::Response>, Status> {
        let req = req.into_inner();
        let prior = (req.current_state.clone(), req.private.clone());
        respond(match self.read(req).await {
            Ok((state, private)) => pb::read_resource::Response {
                new_state: Some(state),
                diagnostics: Vec::new(),
                private,
            },
            // On error Terraform keeps the prior state; echo it so nothing is lost.
            Err(d) => pb::read_resource::Response {
                new_state: prior.0,
                diagnostics: convert::diagnostics(&d),
                private: prior.1,
            },
        })
    }

    async fn plan_resource_change(
        &self,
        req: Request<pb::plan_resource_change::Request>,
    ) -> Result<Response<pb::plan_resource_change::Response>, Status> {
        respond(self.plan(req.into_inner()).await.unwrap_or_else(|d| {
            pb::plan_resource_change::Response {
                diagnostics: convert::diagnostics(&d),
                ..Default::default()
            }
        }))
    }

    async fn apply_resource_change(
        &self,
        req: Request<pb::apply_resource_change::Request>,
    ) -> Result<Response<pb::apply_resource_change::Response>, Status> {
        respond(self.apply(req.into_inner()).await)
    }

    async fn import_resource_state(
        &self,
        req: Request<pb::import_resource_state::Request>,
    ) -> Result<Response<pb::import_resource_state::Response>, Status> {
        respond(match self.import(req.into_inner()).await {
            Ok(r) => pb::import_resource_state::Response {
                imported_resources: vec![r],
                diagnostics: Vec::new(),
            },
            Err(d) => pb::import_resource_state::Response {
                imported_resources: Vec::new(),
                diagnostics: convert::diagnostics(&d),
            },
        })
    }

    async fn read_data_source(
        &self,
        req: Request<pb::read_data_source::Request>,
    ) -> Result<Response<pb::read_data_source::Response>, Status> {
        respond(match self.read_data(req.into_inner()).await {
            Ok(state) => pb::read_data_source::Response {
                state: Some(state),
                diagnostics: Vec::new(),
            },
            Err(d) => pb::read_data_source::Response {
                state: None,
                diagnostics: convert::diagnostics(&d),
            },
        })
    }

    async fn stop_provider(
        &self,
        _: Request<pb::stop_provider::Request>,
    ) -> Result<Response<pb::stop_provider::Response>, Status> {
        tracing::info!("StopProvider: stopping in-flight reads and waits");
        self.stop.stop();
        respond(pb::stop_provider::Response {
            error: String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    //! The generic operations, driven through the gRPC trait with a resource that keeps
    //! its objects in memory, so protocol behaviour is tested without AWS.
    use super::*;
    use crate::protocol::msgpack;
    use crate::protocol::prelude::*;
    use crate::protocol::proto::tfplugin6::provider_server::Provider as Grpc;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Store {
        objects: Mutex<BTreeMap<String, i64>>,
    }

    struct Thing;

    #[async_trait]
    impl Resource<Store> for Thing {
        fn type_name(&self) -> &'static str {
            "test_thing"
        }
        fn schema(&self) -> Schema {
            Schema::new(1)
                .attribute(
                    Attribute::string("name")
                        .required()
                        .force_new()
                        .validate(validators::string_length(1, 5)),
                )
                .attribute(Attribute::number("size").default(3))
                .attribute(Attribute::string("id").computed())
        }
        fn timeouts(&self) -> Option<Timeouts> {
            Some(Timeouts {
                create: Some(Duration::from_secs(5)),
                ..Timeouts::default()
            })
        }
        async fn modify_plan(&self, _: &Store, p: &mut Plan) -> Result<(), Diagnostics> {
            // Growing an existing thing past 10 is allowed, but worth a word at plan time.
            if !p.is_create() && p.changed("size") && p.planned.get("size").as_i64() > Some(10) {
                p.warn(Diagnostic::warning_at("size", "Big thing", "size over 10"));
            }
            Ok(())
        }
        async fn create(&self, ctx: &Store, c: Change) -> Result<Applied, Diagnostics> {
            let name = c.planned.get("name").as_str().unwrap().to_string();
            if name == "slow" {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            let size = c.planned.get("size").as_i64().unwrap();
            ctx.objects.lock().unwrap().insert(name.clone(), size);
            let mut state = c.planned.clone();
            state.set_attr("id", Value::string(format!("id-{name}")));
            Ok(Applied::new(state).with_private(b"p1".to_vec()))
        }
        async fn read(&self, ctx: &Store, r: ReadRequest) -> Result<Option<Applied>, Diagnostics> {
            let name = r.state.get("name").as_str().unwrap_or_default().to_string();
            if name == "hang" {
                std::future::pending::<()>().await;
            }
            Ok(ctx.objects.lock().unwrap().get(&name).map(|size| {
                Applied::new(Value::object([
                    ("name", Value::string(&name)),
                    ("size", Value::int(*size)),
                    ("id", Value::string(format!("id-{name}"))),
                ]))
            }))
        }
        async fn update(&self, ctx: &Store, c: Change) -> Result<Applied, Diagnostics> {
            let name = c.planned.get("name").as_str().unwrap().to_string();
            ctx.objects
                .lock()
                .unwrap()
                .insert(name, c.planned.get("size").as_i64().unwrap());
            Ok(Applied::new(c.planned))
        }
        async fn delete(&self, ctx: &Store, c: Change) -> Result<(), Diagnostics> {
            let name = c.prior.get("name").as_str().unwrap();
            ctx.objects.lock().unwrap().remove(name);
            Ok(())
        }
        async fn import(&self, _: &Store, id: &str) -> Result<Applied, Diagnostics> {
            Ok(Applied::new(Value::object([("name", Value::string(id))])))
        }
        fn upgrade_state(
            &self,
            from: i64,
            mut raw: serde_json::Value,
        ) -> Result<serde_json::Value, Diagnostics> {
            // Version 0 called `size` `count`.
            if from == 0 {
                let count = raw["count"].take();
                raw["size"] = count;
                raw.as_object_mut().unwrap().remove("count");
            }
            Ok(raw)
        }
    }

    struct TestProvider;

    #[async_trait]
    impl Provider for TestProvider {
        type Context = Store;
        fn schema(&self) -> Schema {
            Schema::new(0).attribute(Attribute::string("region").optional())
        }
        async fn configure(&self, _: ConfigureRequest) -> Result<Store, Diagnostics> {
            Ok(Store::default())
        }
        fn resources(&self) -> Vec<Arc<dyn Resource<Store>>> {
            vec![Arc::new(Thing)]
        }
        fn data_sources(&self) -> Vec<Arc<dyn DataSource<Store>>> {
            Vec::new()
        }
    }

    fn ty() -> Type {
        ProviderService::new(TestProvider, StopToken::new()).resources["test_thing"]
            .ty
            .clone()
    }

    fn dv(v: &Value) -> Option<pb::DynamicValue> {
        Some(pb::DynamicValue {
            msgpack: msgpack::encode(v, &ty()).unwrap(),
            json: Vec::new(),
        })
    }

    fn val(d: &Option<pb::DynamicValue>) -> Value {
        msgpack::decode(&d.as_ref().unwrap().msgpack, &ty()).unwrap()
    }

    async fn configured() -> ProviderService<TestProvider> {
        let s = ProviderService::new(TestProvider, StopToken::new());
        let r = s
            .configure_provider(Request::new(pb::configure_provider::Request {
                terraform_version: "1.0.3".into(),
                config: Some(pb::DynamicValue {
                    msgpack: msgpack::encode(
                        &Value::object([("region", Value::Null)]),
                        &s.provider_schema.implied_type(),
                    )
                    .unwrap(),
                    json: Vec::new(),
                }),
                client_capabilities: None,
            }))
            .await
            .unwrap();
        assert!(r.into_inner().diagnostics.is_empty());
        s
    }

    fn config(name: &str) -> Value {
        Value::object([("name", Value::string(name))])
    }

    async fn plan(
        s: &ProviderService<TestProvider>,
        prior: &Value,
        cfg: &Value,
    ) -> pb::plan_resource_change::Response {
        // Terraform's proposal: config, with prior values for computed attributes left null.
        let mut proposed = cfg.clone();
        if let Value::Object(m) = prior {
            for (k, v) in m {
                if proposed.get(k).is_null() {
                    proposed.set_attr(k, v.clone());
                }
            }
        }
        s.plan_resource_change(Request::new(pb::plan_resource_change::Request {
            type_name: "test_thing".into(),
            prior_state: dv(prior),
            proposed_new_state: dv(&proposed),
            config: dv(cfg),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
    }

    async fn apply(
        s: &ProviderService<TestProvider>,
        prior: &Value,
        planned: &Value,
        cfg: &Value,
    ) -> pb::apply_resource_change::Response {
        s.apply_resource_change(Request::new(pb::apply_resource_change::Request {
            type_name: "test_thing".into(),
            prior_state: dv(prior),
            planned_state: dv(planned),
            config: dv(cfg),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
    }

    #[tokio::test]
    async fn schema_includes_the_timeouts_block() {
        let s = ProviderService::new(TestProvider, StopToken::new());
        let r = s
            .get_provider_schema(Request::new(pb::get_provider_schema::Request {}))
            .await
            .unwrap()
            .into_inner();
        let thing = &r.resource_schemas["test_thing"];
        assert_eq!(thing.version, 1);
        let block = thing.block.as_ref().unwrap();
        assert_eq!(block.block_types[0].type_name, "timeouts");
    }

    #[tokio::test]
    async fn validation_errors_carry_the_attribute_path() {
        let s = ProviderService::new(TestProvider, StopToken::new());
        let cfg = Value::object([
            ("name", Value::string("toolong")),
            (
                "timeouts",
                Value::object([("create", Value::string("soon"))]),
            ),
        ]);
        let r = s
            .validate_resource_config(Request::new(pb::validate_resource_config::Request {
                type_name: "test_thing".into(),
                config: dv(&cfg),
                client_capabilities: None,
            }))
            .await
            .unwrap()
            .into_inner();
        let paths: Vec<String> = r
            .diagnostics
            .iter()
            .map(|d| {
                d.attribute
                    .as_ref()
                    .unwrap()
                    .steps
                    .iter()
                    .map(|s| match &s.selector {
                        Some(pb::attribute_path::step::Selector::AttributeName(n)) => n.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join(".")
            })
            .collect();
        assert_eq!(paths, ["name", "timeouts.create"]);
    }

    #[tokio::test]
    async fn lifecycle_create_read_update_replace_delete() {
        let s = configured().await;
        let cfg = config("a");
        let p = plan(&s, &Value::Null, &cfg).await;
        assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
        let planned = val(&p.planned_state);
        assert_eq!(planned.get("size"), &Value::int(3), "default applied");
        assert!(planned.get("id").is_unknown(), "output unknown on create");

        let a = apply(&s, &Value::Null, &planned, &cfg).await;
        assert!(a.diagnostics.is_empty(), "{:?}", a.diagnostics);
        let state = val(&a.new_state);
        assert_eq!(state.get("id").as_str(), Some("id-a"));
        assert_eq!(a.private, b"p1");

        // Nothing changed: the plan equals the state, nothing to replace.
        let p = plan(&s, &state, &cfg).await;
        assert_eq!(val(&p.planned_state), state);
        assert!(p.requires_replace.is_empty());

        // In place.
        let cfg2 = Value::object([("name", Value::string("a")), ("size", Value::int(4))]);
        let p = plan(&s, &state, &cfg2).await;
        assert!(p.requires_replace.is_empty());
        let planned = val(&p.planned_state);
        assert_eq!(planned.get("id").as_str(), Some("id-a"));
        let state = val(&apply(&s, &state, &planned, &cfg2).await.new_state);
        assert_eq!(state.get("size"), &Value::int(4));

        // Force-new.
        let p = plan(&s, &state, &config("b")).await;
        assert_eq!(p.requires_replace.len(), 1);
        assert!(val(&p.planned_state).get("id").is_unknown());

        // Gone out of band: read says null.
        s.context().unwrap().objects.lock().unwrap().clear();
        let r = s
            .read_resource(Request::new(pb::read_resource::Request {
                type_name: "test_thing".into(),
                current_state: dv(&state),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        assert!(r.diagnostics.is_empty());
        assert_eq!(val(&r.new_state), Value::Null);

        // Delete.
        let d = apply(&s, &state, &Value::Null, &Value::Null).await;
        assert!(d.diagnostics.is_empty());
        assert_eq!(val(&d.new_state), Value::Null);
    }

    #[tokio::test]
    async fn plan_warnings_reach_terraform_with_their_path() {
        let s = configured().await;
        let cfg = config("w");
        let planned = val(&plan(&s, &Value::Null, &cfg).await.planned_state);
        let state = val(&apply(&s, &Value::Null, &planned, &cfg).await.new_state);

        let big = Value::object([("name", Value::string("w")), ("size", Value::int(11))]);
        let p = plan(&s, &state, &big).await;
        assert_eq!(p.diagnostics.len(), 1, "{:?}", p.diagnostics);
        let d = &p.diagnostics[0];
        assert_eq!(d.severity, pb::diagnostic::Severity::Warning as i32);
        assert_eq!(d.summary, "Big thing");
        let step = &d.attribute.as_ref().unwrap().steps[0];
        assert_eq!(
            step.selector,
            Some(pb::attribute_path::step::Selector::AttributeName(
                "size".into()
            ))
        );
        // The warning does not change the plan itself.
        assert_eq!(val(&p.planned_state).get("size"), &Value::int(11));
        assert_eq!(val(&p.planned_state).get("id").as_str(), Some("id-w"));

        // An unchanged plan says nothing.
        assert!(plan(&s, &state, &cfg).await.diagnostics.is_empty());
    }

    #[tokio::test]
    async fn create_timeout_is_enforced_at_its_path() {
        tokio::time::pause();
        let s = configured().await;
        let cfg = Value::object([
            ("name", Value::string("slow")),
            ("timeouts", Value::object([("create", Value::string("2s"))])),
        ]);
        let planned = val(&plan(&s, &Value::Null, &cfg).await.planned_state);
        let a = apply(&s, &Value::Null, &planned, &cfg).await;
        let d = &a.diagnostics[0];
        assert!(d.summary.contains("Timed out after 2s"), "{}", d.summary);
        assert_eq!(d.attribute.as_ref().unwrap().steps.len(), 2);
        assert_eq!(val(&a.new_state), Value::Null, "nothing recorded");
    }

    #[tokio::test]
    async fn stop_provider_interrupts_a_hanging_read() {
        let s = Arc::new(configured().await);
        let s2 = s.clone();
        let read = tokio::spawn(async move {
            s2.read_resource(Request::new(pb::read_resource::Request {
                type_name: "test_thing".into(),
                current_state: dv(&config("hang")),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner()
        });
        tokio::task::yield_now().await;
        s.stop_provider(Request::new(pb::stop_provider::Request {}))
            .await
            .unwrap();
        let r = read.await.unwrap();
        assert_eq!(r.diagnostics[0].summary, "Interrupted");
        assert_eq!(
            val(&r.new_state),
            val(&dv(&config("hang"))),
            "prior state kept"
        );
    }

    #[tokio::test]
    async fn import_then_upgrade_old_state() {
        let s = configured().await;
        let r = s
            .import_resource_state(Request::new(pb::import_resource_state::Request {
                type_name: "test_thing".into(),
                id: "x".into(),
                client_capabilities: None,
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            val(&r.imported_resources[0].state).get("name").as_str(),
            Some("x")
        );

        let raw = br#"{"name":"x","count":7,"id":"id-x","dropped_attr":true}"#;
        let r = s
            .upgrade_resource_state(Request::new(pb::upgrade_resource_state::Request {
                type_name: "test_thing".into(),
                version: 0,
                raw_state: Some(pb::RawState {
                    json: raw.to_vec(),
                    flatmap: Default::default(),
                }),
            }))
            .await
            .unwrap()
            .into_inner();
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let v = val(&r.upgraded_state);
        assert_eq!(v.get("size"), &Value::int(7));
        assert!(v.get("timeouts").is_null());
    }

    /// Terraform 1.0 and current Terraform use different paths for the same call; both
    /// must answer over real gRPC.
    #[tokio::test]
    async fn both_data_source_validation_paths_are_served() {
        use crate::protocol::proto::tfplugin6::provider_client::ProviderClient;
        use crate::protocol::proto::tfplugin6::provider_server::ProviderServer;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = ProviderService::new(TestProvider, StopToken::new());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ProviderServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let mut client = ProviderClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let req = || pb::validate_data_resource_config::Request {
            type_name: "test_missing".into(),
            config: None,
        };
        for r in [
            client
                .validate_data_source_config(req())
                .await
                .unwrap()
                .into_inner(),
            client
                .validate_data_resource_config(req())
                .await
                .unwrap()
                .into_inner(),
        ] {
            assert_eq!(r.diagnostics[0].summary, "Unknown data source");
        }
    }

    /// What Terraform >= 1.12 and OpenTofu ask first: the capabilities (schema cache allowed)
    /// and the resource identity schemas (none), over real gRPC.
    #[tokio::test]
    async fn newer_clients_get_capabilities_and_no_identities() {
        use crate::protocol::proto::tfplugin6::provider_client::ProviderClient;
        use crate::protocol::proto::tfplugin6::provider_server::ProviderServer;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = ProviderService::new(TestProvider, StopToken::new());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ProviderServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let mut client = ProviderClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let meta = client
            .get_metadata(pb::get_metadata::Request {})
            .await
            .unwrap()
            .into_inner();
        let caps = meta.server_capabilities.unwrap();
        assert!(caps.get_provider_schema_optional);
        assert!(!caps.plan_destroy && !caps.move_resource_state);
        let schema = client
            .get_provider_schema(pb::get_provider_schema::Request {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(schema.server_capabilities, Some(caps));
        let ids = client
            .get_resource_identity_schemas(pb::get_resource_identity_schemas::Request {})
            .await
            .unwrap()
            .into_inner();
        assert!(ids.identity_schemas.is_empty() && ids.diagnostics.is_empty());
    }
}
