//! The contract between the protocol server and the things it serves: [`Provider`],
//! [`Resource`] and [`DataSource`].
//!
//! # Writing a resource
//!
//! 1. Create `provider/src/resources/<name>.rs` with a unit struct, and add one line for it
//!    in `resources::all()` (`provider/src/resources/mod.rs`). A resource over one
//!    `joiner.dev` object in a cluster implements `resources::custom_object::CustomObject`
//!    instead, which writes step 2 for it.
//! 2. `impl Resource<ProviderContext> for YourType` (use `#[async_trait]`; import
//!    `crate::protocol::prelude::*` and `crate::context::ProviderContext`):
//!    - `type_name()`: `"joiner_<name>"`.
//!    - `schema()`: build it with [`Schema::new`] and [`Attribute`]. Mark outputs
//!      `.computed()`, inputs `.required()`/`.optional()`, immutable inputs `.force_new()`,
//!      secrets `.sensitive()`; give defaults with `.default(v)` and checks with
//!      `.validate(validators::...)`. The server runs those checks at validate time and
//!      reports failures at the attribute's path, skipping values not known yet.
//!    - `validate(config)`: cross-attribute checks only. Return diagnostics made with
//!      [`Diagnostic::error_at`] so every error names its attribute. `config` may contain
//!      [`Value::Unknown`]: skip what is not known.
//!    - `create`/`read`/`update`/`delete`: talk to AWS through `ctx` (see `ProviderContext`).
//!      `create` and `update` return the full new state: start from `change.planned` (which
//!      has the user's values and `Unknown` for outputs) and fill in every unknown. Any
//!      attribute you leave out of an object encodes as null. `read` returns `Ok(None)` when
//!      the remote object is gone: Terraform then plans to create it again (drift).
//!    - `import(id)`: return enough state for `read` to fill in the rest (Terraform calls
//!      `read` right after import).
//!    - Errors: `Result<_, Diagnostics>`. Anything convertible into a [`Diagnostic`]
//!      (including the AWS error type) works with `?`. If a create fails after the object
//!      exists, attach it with `Diagnostics::with_partial_state` so Terraform taints it
//!      rather than forgetting it.
//! 3. Optional hooks have defaults that do the usual thing:
//!    - planning: the server plans for you (see [`Plan`]): it applies defaults, marks
//!      computed attributes unknown on create and replace, and lists changed `force_new`
//!      attributes in `requires_replace`. Override `modify_plan` only for extra logic (for
//!      example marking an output unknown when some input changes in place). To tell the
//!      user something about a successful plan (Terraform prints it under the plan), push
//!      a [`Diagnostic::warning`] with [`Plan::warn`]; errors belong in `Err`.
//!    - `timeouts()`: return defaults to get a `timeouts { create = "..." }` block; the
//!      server enforces it around create/update/delete and reads. Long waits should also
//!      watch `ctx.stop` so Ctrl-C is honoured.
//!    - `upgrade_state`: when you bump `Schema::version`, convert older JSON state here.
//!    - private state: `change.private` in, `Applied::private` out; opaque bytes that
//!      Terraform stores next to the state but never shows.
//!
//! The protocol layer is generic over the context type `C`, so it knows nothing of AWS.

use super::diagnostics::{Diagnostic, Diagnostics};
use super::schema::Schema;
use super::stop::StopToken;
use super::timeouts::Timeouts;
use super::value::{AttributePath, Value};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// A requested change to one resource instance, as given to create/update/delete.
#[derive(Clone, Debug, Default)]
pub struct Change {
    /// The state before the change; null for create.
    pub prior: Value,
    /// The planned state; null for delete. Unknowns mark values the provider must fill in.
    pub planned: Value,
    /// The user's configuration; null for delete.
    pub config: Value,
    /// Private state recorded with the plan (or with the prior state for delete).
    pub private: Vec<u8>,
    /// The effective timeout for this operation, if the resource declares timeouts.
    pub timeout: Option<Duration>,
}

/// The result of create, update, read or import.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    pub state: Value,
    pub private: Vec<u8>,
    /// Warnings to show with a successful create or update (e.g. an optional step the
    /// endpoint does not support). Errors belong in `Err`, not here.
    pub warnings: Diagnostics,
}

impl Applied {
    pub fn new(state: Value) -> Self {
        Applied {
            state,
            private: Vec::new(),
            warnings: Diagnostics::new(),
        }
    }
    pub fn with_private(mut self, private: Vec<u8>) -> Self {
        self.private = private;
        self
    }
    pub fn with_warning(mut self, warning: Diagnostic) -> Self {
        self.warnings.push(warning);
        self
    }
}

/// The state handed to `read`.
#[derive(Clone, Debug, Default)]
pub struct ReadRequest {
    pub state: Value,
    pub private: Vec<u8>,
}

/// A plan being made. The server fills `planned` and `requires_replace` with its default
/// plan before `modify_plan` runs; edit them in place.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Null when creating.
    pub prior: Value,
    /// Terraform's proposal: the configuration merged with prior computed values.
    pub proposed: Value,
    pub config: Value,
    pub planned: Value,
    pub requires_replace: Vec<AttributePath>,
    pub prior_private: Vec<u8>,
    pub planned_private: Vec<u8>,
    /// Warnings shown with the plan: the only channel a provider has to tell the reviewer
    /// something at plan time without putting it in state.
    pub warnings: Diagnostics,
}

impl Plan {
    pub fn is_create(&self) -> bool {
        self.prior.is_null()
    }
    /// True when the plan already replaces the object.
    pub fn is_replace(&self) -> bool {
        !self.requires_replace.is_empty()
    }
    /// Whether top-level attribute `name` differs between prior and planned state.
    pub fn changed(&self, name: &str) -> bool {
        self.prior.get(name) != self.planned.get(name)
    }
    /// Marks an output as known only after apply.
    pub fn set_unknown(&mut self, name: &str) {
        self.planned.set_attr(name, Value::Unknown);
    }
    /// Adds a warning to show with the plan. An error passed here is demoted to a warning:
    /// a failing plan must return `Err` so Terraform stops.
    pub fn warn(&mut self, mut warning: Diagnostic) {
        warning.severity = super::diagnostics::Severity::Warning;
        self.warnings.push(warning);
    }
    pub fn require_replace(&mut self, path: impl Into<AttributePath>) {
        let p = path.into();
        if !self.requires_replace.contains(&p) {
            self.requires_replace.push(p);
        }
    }
}

/// Values the server passes when configuring the provider.
#[derive(Clone, Debug)]
pub struct ConfigureRequest {
    pub config: Value,
    pub terraform_version: String,
    /// Fired by StopProvider; keep it in the context so resources can watch it.
    pub stop: StopToken,
}

/// A whole provider: its own configuration and the resources and data sources it serves.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// What resources get once the provider is configured (AWS clients, region, stop token).
    type Context: Send + Sync + 'static;

    fn schema(&self) -> Schema;
    fn validate(&self, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }
    async fn configure(&self, req: ConfigureRequest) -> Result<Self::Context, Diagnostics>;
    fn resources(&self) -> Vec<Arc<dyn Resource<Self::Context>>>;
    fn data_sources(&self) -> Vec<Arc<dyn DataSource<Self::Context>>>;
}

/// A managed resource type. See the module docs for how to write one.
#[async_trait]
pub trait Resource<C>: Send + Sync + 'static {
    /// `joiner_<name>`.
    fn type_name(&self) -> &'static str;
    /// The schema, without the `timeouts` block (the server adds it from `timeouts()`).
    fn schema(&self) -> Schema;
    /// Default operation timeouts; `Some` adds a `timeouts` block to the schema.
    fn timeouts(&self) -> Option<Timeouts> {
        None
    }
    /// Cross-attribute checks beyond the per-attribute validators. Config may hold unknowns.
    fn validate(&self, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }
    /// Adjusts the server's default plan (see [`Plan`]). Runs only after configuration.
    async fn modify_plan(&self, _ctx: &C, _plan: &mut Plan) -> Result<(), Diagnostics> {
        Ok(())
    }
    async fn create(&self, ctx: &C, change: Change) -> Result<Applied, Diagnostics>;
    /// Refreshes `req.state` from the remote object; `Ok(None)` when it no longer exists.
    async fn read(&self, ctx: &C, req: ReadRequest) -> Result<Option<Applied>, Diagnostics>;
    async fn update(&self, ctx: &C, change: Change) -> Result<Applied, Diagnostics>;
    /// Deletes `change.prior`. Deleting something already gone is success.
    async fn delete(&self, ctx: &C, change: Change) -> Result<(), Diagnostics>;
    /// Builds a state from an import id (`terraform import addr <id>`); `read` runs next.
    async fn import(&self, _ctx: &C, id: &str) -> Result<Applied, Diagnostics> {
        Err(Diagnostic::error(
            "Import not supported",
            format!(
                "{} cannot be imported (id {id:?}); declare it and let Terraform create it",
                self.type_name()
            ),
        )
        .into())
    }
    /// Converts JSON state written with schema version `from_version` to the current
    /// version's JSON layout. The default accepts only the current version.
    fn upgrade_state(
        &self,
        from_version: i64,
        raw: serde_json::Value,
    ) -> Result<serde_json::Value, Diagnostics> {
        let current = self.schema().version;
        if from_version == current {
            Ok(raw)
        } else {
            Err(Diagnostic::error(
                "Unsupported state version",
                format!(
                    "{} state has schema version {from_version}, this provider knows version \
                     {current} and has no upgrade from it; use a matching provider version",
                    self.type_name()
                ),
            )
            .into())
        }
    }
}

/// A data source type: reads something and exposes it as attributes.
#[async_trait]
pub trait DataSource<C>: Send + Sync + 'static {
    fn type_name(&self) -> &'static str;
    fn schema(&self) -> Schema;
    fn validate(&self, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }
    /// Returns the full state: the configuration with every computed attribute filled in.
    async fn read(&self, ctx: &C, config: Value) -> Result<Value, Diagnostics>;
}
