//! `joiner_subnets`: subnets found by tag, e.g. `joiner.dev/discovery = <cluster>`.
//!
//! The same tags tell the agent where to launch nodes, so one tagging convention feeds both
//! the cluster's configuration and the agent's NodeClass.

use std::time::Duration;

use tokio::time::Instant;

use crate::aws::ec2;
use crate::context::ProviderContext;
use crate::protocol::prelude::*;
use crate::validators;

const READ_TIMEOUT: Duration = Duration::from_secs(2 * 60);

pub struct Subnets;

#[async_trait]
impl DataSource<ProviderContext> for Subnets {
    fn type_name(&self) -> &'static str {
        "joiner_subnets"
    }

    fn schema(&self) -> Schema {
        let subnet = Type::object([
            ("id", Type::String),
            ("vpc_id", Type::String),
            ("availability_zone", Type::String),
            ("availability_zone_id", Type::String),
            ("cidr_block", Type::String),
            ("available_ip_address_count", Type::Number),
            ("map_public_ip_on_launch", Type::Bool),
            ("tags", Type::map(Type::String)),
        ]);
        Schema::new(0)
            .description("Subnets carrying all the given tags, sorted by ID.")
            .attribute(
                Attribute::string_map("tags")
                    .required()
                    .validate(validators::discovery_tags)
                    .description(
                        "Tags every subnet must carry; the value \"*\" matches any value.",
                    ),
            )
            .attribute(
                Attribute::string("vpc_id")
                    .optional()
                    .validate(validators::vpc_id)
                    .description("Only subnets of this VPC."),
            )
            .attribute(
                Attribute::string_list("ids")
                    .computed()
                    .description("Matching subnet IDs, sorted."),
            )
            .attribute(
                Attribute::string_list("availability_zones")
                    .computed()
                    .description("The distinct Availability Zones of the matches, sorted."),
            )
            .attribute(
                Attribute::new("subnets", Type::list(subnet))
                    .computed()
                    .description(
                    "Each match with its AZ, CIDR block, free IPs and tags, in the order of `ids`.",
                ),
            )
    }

    async fn read(&self, ctx: &ProviderContext, config: Value) -> Result<Value, Diagnostics> {
        let tags = config.get("tags").as_string_map();
        let vpc = config.get("vpc_id").as_str();
        let found =
            ec2::subnets_by_tags(&ctx.aws.ec2(), &tags, vpc, Instant::now() + READ_TIMEOUT).await?;
        let mut zones: Vec<String> = found.iter().map(|s| s.availability_zone.clone()).collect();
        zones.sort();
        zones.dedup();
        let mut state = config;
        state.set_attr(
            "ids",
            Value::string_list(found.iter().map(|s| s.id.clone())),
        );
        state.set_attr("availability_zones", Value::string_list(zones));
        state.set_attr(
            "subnets",
            Value::List(
                found
                    .iter()
                    .map(|s| {
                        Value::object([
                            ("id", Value::string(&s.id)),
                            ("vpc_id", Value::string(&s.vpc_id)),
                            ("availability_zone", Value::string(&s.availability_zone)),
                            (
                                "availability_zone_id",
                                Value::string(&s.availability_zone_id),
                            ),
                            ("cidr_block", Value::string(&s.cidr_block)),
                            (
                                "available_ip_address_count",
                                Value::int(s.available_ip_address_count),
                            ),
                            (
                                "map_public_ip_on_launch",
                                Value::Bool(s.map_public_ip_on_launch),
                            ),
                            ("tags", Value::string_map(s.tags.clone())),
                        ])
                    })
                    .collect(),
            ),
        );
        Ok(state)
    }
}
