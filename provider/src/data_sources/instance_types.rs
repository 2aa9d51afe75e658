//! `joiner_instance_types`: the instance types matching a few requirements, with their
//! on-demand price, to review a NodePool's candidate set at plan time.
//!
//! The matching is the agent's own: the requirements become node-selector requirements on
//! Karpenter's well-known labels and go through the agent's instance catalogue (built from
//! DescribeInstanceTypes + DescribeInstanceTypeOfferings, priced from the embedded
//! on-demand table). So what this data source lists is exactly what a NodePool with the same
//! requirements could launch.

use std::time::Duration;

use joiner_agent::catalog::{CapacityType, Catalog, InstanceType};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use tokio::time::Instant;

use crate::aws::ec2;
use crate::context::ProviderContext;
use crate::protocol::prelude::*;

const READ_TIMEOUT: Duration = Duration::from_secs(3 * 60);
const ARCHITECTURES: &[&str] = &["amd64", "arm64"];
const CAPACITY_TYPES: &[&str] = &["spot", "on-demand"];

pub struct InstanceTypes;

fn each_one_of(
    allowed: &'static [&'static str],
) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
    move |v| match v
        .as_string_list()
        .into_iter()
        .find(|s| !allowed.contains(&s.as_str()))
    {
        Some(bad) => Err(format!(
            "{bad:?} is not allowed; use one of {}",
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

fn non_empty_strings(v: &Value) -> Result<(), String> {
    if !v.is_fully_known() {
        return Ok(());
    }
    if v.as_string_list().iter().any(|s| s.trim().is_empty()) {
        return Err("values cannot be empty strings".into());
    }
    Ok(())
}

fn whole(name: &'static str) -> Attribute {
    Attribute::number(name)
        .optional()
        .validate(|v| match v.as_i64() {
            Some(n) if n >= 1 => Ok(()),
            _ => Err(format!(
                "must be a whole number of at least 1, got {}",
                v.as_number().map(|n| n.to_string()).unwrap_or_default()
            )),
        })
}

/// The configuration as node-selector requirements on the well-known labels.
pub fn requirements(config: &Value) -> Result<Requirements, Diagnostics> {
    let mut reqs = Requirements::new();
    let listed = |attr: &str, key: &str, reqs: &mut Requirements| {
        let values = config.get(attr).as_string_list();
        if !values.is_empty() {
            reqs.add(
                key,
                Requirement::new(Operator::In, &values).expect("In with values"),
            );
        }
    };
    listed("families", labels::INSTANCE_FAMILY, &mut reqs);
    listed("sizes", labels::INSTANCE_SIZE, &mut reqs);
    listed("architectures", labels::ARCH, &mut reqs);
    listed("capacity_types", labels::CAPACITY_TYPE, &mut reqs);
    listed("zones", labels::ZONE, &mut reqs);
    // Inclusive bounds from the user, exclusive Gt/Lt for the requirement algebra.
    let bound = |attr: &str, key: &str, op: Operator, reqs: &mut Requirements| {
        if let Some(n) = config.get(attr).as_i64() {
            let edge = if op == Operator::Gt { n - 1 } else { n + 1 };
            reqs.add(
                key,
                Requirement::new(op, &[edge.to_string()]).expect("one integer"),
            );
        }
    };
    bound("min_vcpus", labels::INSTANCE_CPU, Operator::Gt, &mut reqs);
    bound("max_vcpus", labels::INSTANCE_CPU, Operator::Lt, &mut reqs);
    bound(
        "min_memory_mib",
        labels::INSTANCE_MEMORY,
        Operator::Gt,
        &mut reqs,
    );
    bound(
        "max_memory_mib",
        labels::INSTANCE_MEMORY,
        Operator::Lt,
        &mut reqs,
    );
    Ok(reqs)
}

/// The matching types, cheapest on-demand price first (then by name, so the order is
/// stable). Types without an on-demand price were already dropped by the catalogue.
pub fn select<'a>(catalog: &'a Catalog, reqs: &Requirements) -> Vec<&'a InstanceType> {
    let mut found = catalog.filter(reqs);
    found.sort_by(|a, b| {
        let pa = a.on_demand_price().unwrap_or(f64::MAX);
        let pb = b.on_demand_price().unwrap_or(f64::MAX);
        pa.total_cmp(&pb).then_with(|| a.name.cmp(&b.name))
    });
    found
}

fn row(t: &InstanceType, reqs: &Requirements) -> Value {
    let label = |k: &str| Value::string(t.labels.get(k).cloned().unwrap_or_default());
    let mut zones: Vec<String> = t
        .offerings
        .iter()
        .filter(|o| joiner_agent::catalog::offering_allowed(o, reqs))
        .map(|o| o.zone.clone())
        .collect();
    zones.sort();
    zones.dedup();
    let mut capacity: Vec<String> = t
        .offerings
        .iter()
        .filter(|o| joiner_agent::catalog::offering_allowed(o, reqs))
        .map(|o| o.capacity_type.as_str().to_string())
        .collect();
    capacity.sort();
    capacity.dedup();
    let price = t
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| Value::float(o.price))
        .unwrap_or(Value::Null);
    Value::object([
        ("name", Value::string(&t.name)),
        ("family", label(labels::INSTANCE_FAMILY)),
        ("size", label(labels::INSTANCE_SIZE)),
        ("architecture", label(labels::ARCH)),
        ("vcpus", Value::int(t.record.vcpus as i64)),
        ("memory_mib", Value::int(t.record.memory_mib as i64)),
        ("on_demand_price", price),
        ("zones", Value::string_list(zones)),
        ("capacity_types", Value::string_list(capacity)),
    ])
}

#[async_trait]
impl DataSource<ProviderContext> for InstanceTypes {
    fn type_name(&self) -> &'static str {
        "joiner_instance_types"
    }

    fn schema(&self) -> Schema {
        let item = Type::object([
            ("name", Type::String),
            ("family", Type::String),
            ("size", Type::String),
            ("architecture", Type::String),
            ("vcpus", Type::Number),
            ("memory_mib", Type::Number),
            ("on_demand_price", Type::Number),
            ("zones", Type::list(Type::String)),
            ("capacity_types", Type::list(Type::String)),
        ]);
        Schema::new(0)
            .description("Instance types matching requirements, cheapest on-demand first, with their on-demand price (USD/h).")
            .attribute(
                Attribute::string_set("families")
                    .optional()
                    .validate(non_empty_strings)
                    .description("Instance families, e.g. [\"m6i\", \"m7g\"]."),
            )
            .attribute(
                Attribute::string_set("sizes")
                    .optional()
                    .validate(non_empty_strings)
                    .description("Sizes, e.g. [\"large\", \"xlarge\"]."),
            )
            .attribute(
                Attribute::string_set("architectures")
                    .optional()
                    .validate(each_one_of(ARCHITECTURES))
                    .description("Kubernetes architectures: amd64, arm64."),
            )
            .attribute(
                Attribute::string_set("capacity_types")
                    .optional()
                    .validate(each_one_of(CAPACITY_TYPES))
                    .description("spot and/or on-demand; a type matches if it is offered that way."),
            )
            .attribute(
                Attribute::string_set("zones")
                    .optional()
                    .validate(non_empty_strings)
                    .description("Availability Zones the type must be offered in (any of them)."),
            )
            .attribute(whole("min_vcpus").description("At least this many vCPUs."))
            .attribute(whole("max_vcpus").description("At most this many vCPUs."))
            .attribute(whole("min_memory_mib").description("At least this much memory, in MiB."))
            .attribute(whole("max_memory_mib").description("At most this much memory, in MiB."))
            .attribute(
                Attribute::string_list("names")
                    .computed()
                    .description("Matching type names, cheapest on-demand price first."),
            )
            .attribute(
                Attribute::new("instance_types", Type::list(item))
                    .computed()
                    .description("Each match with its family, size, architecture, vCPUs, memory, on-demand price and allowed zones and capacity types, in the order of `names`."),
            )
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        for (min, max) in [
            ("min_vcpus", "max_vcpus"),
            ("min_memory_mib", "max_memory_mib"),
        ] {
            if let (Some(lo), Some(hi)) = (config.get(min).as_i64(), config.get(max).as_i64()) {
                if lo > hi {
                    d.error_at(
                        max,
                        "Empty range",
                        format!("{max} ({hi}) is less than {min} ({lo})"),
                    );
                }
            }
        }
        d
    }

    async fn read(&self, ctx: &ProviderContext, config: Value) -> Result<Value, Diagnostics> {
        let deadline = Instant::now() + READ_TIMEOUT;
        let client = ctx.aws.ec2();
        let (types, offerings) = tokio::try_join!(
            ec2::instance_types(&client, deadline),
            ec2::instance_type_offerings(&client, deadline)
        )?;
        let catalog = Catalog::from_ec2(&types, &offerings);
        let reqs = requirements(&config)?;
        let found = select(&catalog, &reqs);
        let mut state = config;
        state.set_attr(
            "names",
            Value::string_list(found.iter().map(|t| t.name.clone())),
        );
        state.set_attr(
            "instance_types",
            Value::List(found.iter().map(|t| row(t, &reqs)).collect()),
        );
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Catalog {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../agent/fixtures/ec2-instance-types.json"
        );
        let json = std::fs::read_to_string(path).expect("the agent's emulator fixture");
        Catalog::from_dump_json(&json, &Default::default()).unwrap()
    }

    fn names(config: Value) -> Vec<String> {
        let catalog = fixture();
        let reqs = requirements(&config).unwrap();
        select(&catalog, &reqs)
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    fn set(xs: &[&str]) -> Value {
        Value::Set(xs.iter().map(|x| Value::string(*x)).collect())
    }

    #[test]
    fn families_and_sizes_cheapest_first() {
        let got = names(Value::object([
            ("families", set(&["m5", "c5"])),
            ("sizes", set(&["large", "xlarge"])),
        ]));
        assert_eq!(got.len(), 4, "{got:?}");
        // c5 is cheaper than m5 at the same size; large is cheaper than xlarge.
        assert_eq!(got[0], "c5.large");
        assert!(
            got.iter().position(|n| n == "m5.large") < got.iter().position(|n| n == "m5.xlarge")
        );
    }

    #[test]
    fn vcpu_and_memory_bounds_are_inclusive() {
        let catalog = fixture();
        let cfg = Value::object([
            ("architectures", set(&["arm64"])),
            ("min_vcpus", Value::int(2)),
            ("max_vcpus", Value::int(4)),
            ("min_memory_mib", Value::int(8192)),
            ("max_memory_mib", Value::int(8192)),
        ]);
        let reqs = requirements(&cfg).unwrap();
        let found = select(&catalog, &reqs);
        assert!(!found.is_empty());
        for t in &found {
            assert!((2..=4).contains(&t.record.vcpus), "{}", t.name);
            assert_eq!(t.record.memory_mib, 8192, "{}", t.name);
            assert_eq!(t.labels[labels::ARCH], "arm64", "{}", t.name);
        }
        assert!(found.iter().any(|t| t.name == "m6g.large"));
        let prices: Vec<f64> = found.iter().map(|t| t.on_demand_price().unwrap()).collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
        let row = row(found[0], &reqs);
        assert!(row.get("on_demand_price").as_f64().unwrap() > 0.0);
    }
}
