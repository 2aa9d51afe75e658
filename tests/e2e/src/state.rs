//! Terraform's JSON views of state (`terraform show -json`) and of a saved plan.

use serde_json::Value;

/// The state as `terraform show -json` prints it.
#[derive(Debug, Clone)]
pub struct State(pub Value);

impl State {
    /// Every managed and data resource, child modules included.
    pub fn resources(&self) -> Vec<&Value> {
        fn walk<'a>(module: &'a Value, out: &mut Vec<&'a Value>) {
            if let Some(rs) = module["resources"].as_array() {
                out.extend(rs);
            }
            if let Some(children) = module["child_modules"].as_array() {
                for c in children {
                    walk(c, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.0["values"]["root_module"], &mut out);
        out
    }

    /// The addresses in state, e.g. `joiner_interruption_queue.q`, `data.joiner_caller_identity.me`.
    pub fn addresses(&self) -> Vec<String> {
        self.resources()
            .iter()
            .filter_map(|r| r["address"].as_str().map(str::to_string))
            .collect()
    }

    /// The attribute values of the resource at `address`, if it is in state.
    pub fn values(&self, address: &str) -> Option<&Value> {
        self.resources()
            .into_iter()
            .find(|r| r["address"] == address)
            .map(|r| &r["values"])
    }

    /// A root module output's value.
    pub fn output(&self, name: &str) -> Option<&Value> {
        self.0["values"]["outputs"].get(name).map(|o| &o["value"])
    }

    pub fn is_empty(&self) -> bool {
        self.resources().is_empty()
    }
}

/// A saved plan as `terraform show -json <planfile>` prints it.
#[derive(Debug, Clone)]
pub struct Plan(pub Value);

impl Plan {
    /// The planned actions for `address`: `["create"]`, `["update"]`, `["delete", "create"]`
    /// (a replacement), `["no-op"]`..., or empty when the address is not in the plan.
    pub fn actions(&self, address: &str) -> Vec<String> {
        self.changes()
            .find(|c| c["address"] == address)
            .and_then(|c| c["change"]["actions"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// True when `address` is replaced (destroy and create, in either order).
    pub fn replaces(&self, address: &str) -> bool {
        let a = self.actions(address);
        a.len() == 2 && a.contains(&"delete".to_string()) && a.contains(&"create".to_string())
    }

    /// The attribute paths Terraform says force the replacement of `address`.
    pub fn replace_paths(&self, address: &str) -> Vec<Value> {
        self.changes()
            .find(|c| c["address"] == address)
            .and_then(|c| c["change"]["replace_paths"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The planned value of `address` after the change (unknowns are absent or null).
    pub fn after(&self, address: &str) -> Option<&Value> {
        self.changes()
            .find(|c| c["address"] == address)
            .map(|c| &c["change"]["after"])
    }

    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        self.changes().all(|c| {
            c["change"]["actions"]
                .as_array()
                .is_some_and(|a| a.iter().all(|s| s == "no-op" || s == "read"))
        })
    }

    fn changes(&self) -> impl Iterator<Item = &Value> {
        self.0["resource_changes"].as_array().into_iter().flatten()
    }
}

/// Compares two attribute maps the way ImportStateVerify does: every key on either side
/// must have equal values, except the ignored ones. Returns the differences, readable.
pub(crate) fn diff_values(applied: &Value, imported: &Value, ignore: &[&str]) -> Vec<String> {
    let empty = serde_json::Map::new();
    let a = applied.as_object().unwrap_or(&empty);
    let b = imported.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !ignore.contains(&k.as_str()))
        .filter_map(|k| {
            let (x, y) = (
                a.get(k).unwrap_or(&Value::Null),
                b.get(k).unwrap_or(&Value::Null),
            );
            (x != y).then(|| format!("  {k}: applied {x}, imported {y}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plan_actions_and_replacement() {
        let p = Plan(json!({"resource_changes": [
            {"address": "a.x", "change": {"actions": ["delete", "create"], "replace_paths": [["name"]]}},
            {"address": "a.y", "change": {"actions": ["no-op"]}}
        ]}));
        assert!(p.replaces("a.x"));
        assert!(!p.replaces("a.y"));
        assert!(!p.is_empty());
        assert_eq!(p.replace_paths("a.x"), vec![json!(["name"])]);
        assert!(p.actions("a.z").is_empty());
    }

    #[test]
    fn state_walks_child_modules() {
        let s = State(
            json!({"values": {"outputs": {"o": {"value": 1}}, "root_module": {
                "resources": [{"address": "a.x", "values": {"id": "1"}}],
                "child_modules": [{"resources": [{"address": "module.m.a.y", "values": {"id": "2"}}]}]
            }}}),
        );
        assert_eq!(s.addresses(), vec!["a.x", "module.m.a.y"]);
        assert_eq!(s.values("module.m.a.y").unwrap()["id"], "2");
        assert_eq!(s.output("o"), Some(&json!(1)));
    }

    #[test]
    fn diff_ignores_listed_attributes() {
        let a = json!({"id": "1", "tags": {"a": "b"}, "timeouts": null});
        let b = json!({"id": "1", "tags": {}, "extra": 1});
        let d = diff_values(&a, &b, &["tags"]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("extra"));
    }
}
