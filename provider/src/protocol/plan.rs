//! The default plan every resource gets before its own `modify_plan` hook.
//!
//! Terraform proposes a new state (configuration merged with prior computed values); the
//! provider's job is to say what will really happen. For declarative resources that is
//! almost always: defaults fill omitted optional attributes, outputs are unknown until the
//! object exists, and changing an immutable attribute replaces the object.

use super::resource::Plan;
use super::schema::Schema;
use super::value::{AttributePath, Value};

/// Fills `plan.planned` and `plan.requires_replace` from the schema's declarations.
pub fn default_plan(schema: &Schema, plan: &mut Plan) {
    plan.planned = plan.proposed.clone();
    let attrs = &schema.block.attributes;

    for a in attrs {
        if let Some(d) = &a.default {
            if plan.config.get(&a.name).is_null() {
                plan.planned.set_attr(&a.name, d.clone());
            }
        }
    }

    if !plan.is_create() {
        for a in attrs.iter().filter(|a| a.force_new) {
            let before = plan.prior.get(&a.name);
            let after = plan.planned.get(&a.name);
            if before != after {
                plan.require_replace(AttributePath::new(&a.name));
            }
        }
    }

    // A new object (create or replacement) has none of the old outputs.
    if plan.is_create() || plan.is_replace() {
        for a in attrs {
            if a.computed && a.default.is_none() && plan.config.get(&a.name).is_null() {
                plan.planned.set_attr(&a.name, Value::Unknown);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::schema::Attribute;

    fn schema() -> Schema {
        Schema::new(0)
            .attribute(Attribute::string("name").required().force_new())
            .attribute(Attribute::number("retention").default(300))
            .attribute(Attribute::string("kms").optional())
            .attribute(Attribute::string("arn").computed())
    }

    fn state(name: &str, retention: i64) -> Value {
        Value::object([
            ("name", Value::string(name)),
            ("retention", Value::int(retention)),
            ("kms", Value::Null),
            ("arn", Value::string(format!("arn:{name}"))),
        ])
    }

    #[test]
    fn create_fills_defaults_and_marks_outputs_unknown() {
        let config = Value::object([("name", Value::string("q"))]);
        let mut p = Plan {
            proposed: config.clone(),
            config,
            ..Plan::default()
        };
        default_plan(&schema(), &mut p);
        assert_eq!(p.planned.get("retention"), &Value::int(300));
        assert!(p.planned.get("arn").is_unknown());
        assert!(p.requires_replace.is_empty());
    }

    #[test]
    fn in_place_update_keeps_outputs() {
        let prior = state("q", 300);
        let config = Value::object([("name", Value::string("q")), ("retention", Value::int(600))]);
        let mut proposed = prior.clone();
        proposed.set_attr("retention", Value::int(600));
        let mut p = Plan {
            prior,
            proposed,
            config,
            ..Plan::default()
        };
        default_plan(&schema(), &mut p);
        assert_eq!(p.planned.get("arn").as_str(), Some("arn:q"));
        assert!(p.requires_replace.is_empty());
    }

    #[test]
    fn force_new_change_replaces_and_unknowns_outputs() {
        let prior = state("q", 300);
        let config = Value::object([("name", Value::string("r"))]);
        let mut proposed = prior.clone();
        proposed.set_attr("name", Value::string("r"));
        let mut p = Plan {
            prior,
            proposed,
            config,
            ..Plan::default()
        };
        default_plan(&schema(), &mut p);
        assert_eq!(p.requires_replace, vec![AttributePath::new("name")]);
        assert!(p.planned.get("arn").is_unknown());
        // Removing retention from the config brings the default back.
        assert_eq!(p.planned.get("retention"), &Value::int(300));
    }
}
