//! `joiner_security_groups`: security groups found by tag, e.g.
//! `joiner.dev/discovery = <cluster>`, for the cluster and the agent's NodeClass.

use std::time::Duration;

use tokio::time::Instant;

use crate::aws::ec2;
use crate::context::ProviderContext;
use crate::protocol::prelude::*;
use crate::validators;

const READ_TIMEOUT: Duration = Duration::from_secs(2 * 60);

pub struct SecurityGroups;

#[async_trait]
impl DataSource<ProviderContext> for SecurityGroups {
    fn type_name(&self) -> &'static str {
        "joiner_security_groups"
    }

    fn schema(&self) -> Schema {
        let group = Type::object([
            ("id", Type::String),
            ("name", Type::String),
            ("vpc_id", Type::String),
            ("description", Type::String),
            ("tags", Type::map(Type::String)),
        ]);
        Schema::new(0)
            .description("Security groups carrying all the given tags, sorted by ID.")
            .attribute(
                Attribute::string_map("tags")
                    .required()
                    .validate(validators::discovery_tags)
                    .description("Tags every group must carry; the value \"*\" matches any value."),
            )
            .attribute(
                Attribute::string("vpc_id")
                    .optional()
                    .validate(validators::vpc_id)
                    .description("Only groups of this VPC."),
            )
            .attribute(Attribute::string_list("ids").computed().description("Matching group IDs, sorted."))
            .attribute(
                Attribute::new("security_groups", Type::list(group))
                    .computed()
                    .description("Each match with its name, VPC, description and tags, in the order of `ids`."),
            )
    }

    async fn read(&self, ctx: &ProviderContext, config: Value) -> Result<Value, Diagnostics> {
        let tags = config.get("tags").as_string_map();
        let vpc = config.get("vpc_id").as_str();
        let found =
            ec2::security_groups_by_tags(&ctx.aws.ec2(), &tags, vpc, Instant::now() + READ_TIMEOUT)
                .await?;
        let mut state = config;
        state.set_attr(
            "ids",
            Value::string_list(found.iter().map(|g| g.id.clone())),
        );
        state.set_attr(
            "security_groups",
            Value::List(
                found
                    .iter()
                    .map(|g| {
                        Value::object([
                            ("id", Value::string(&g.id)),
                            ("name", Value::string(&g.name)),
                            ("vpc_id", Value::string(&g.vpc_id)),
                            ("description", Value::string(&g.description)),
                            ("tags", Value::string_map(g.tags.clone())),
                        ])
                    })
                    .collect(),
            ),
        );
        Ok(state)
    }
}
