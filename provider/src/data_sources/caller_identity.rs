//! `joiner_caller_identity`: the account, ARN and user id of the provider's credentials.

use crate::protocol::prelude::*;
use crate::provider::ProviderContext;

pub struct CallerIdentity;

#[async_trait]
impl DataSource<ProviderContext> for CallerIdentity {
    fn type_name(&self) -> &'static str {
        "joiner_caller_identity"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description("Who the provider is acting as (`sts:GetCallerIdentity`).")
            .attribute(
                Attribute::string("account_id")
                    .computed()
                    .description("AWS account id."),
            )
            .attribute(
                Attribute::string("arn")
                    .computed()
                    .description("ARN of the calling identity."),
            )
            .attribute(
                Attribute::string("user_id")
                    .computed()
                    .description("Unique id of the calling identity."),
            )
    }

    async fn read(&self, ctx: &ProviderContext, _config: Value) -> Result<Value, Diagnostics> {
        let me = ctx.caller().await?;
        Ok(Value::object([
            ("account_id", Value::string(&me.account_id)),
            ("arn", Value::string(&me.arn)),
            ("user_id", Value::string(&me.user_id)),
        ]))
    }
}
