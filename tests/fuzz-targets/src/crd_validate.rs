//! The CRD validators behind NodePool and NodeClass (what the provider runs at plan time and
//! the agent on every object it reads): a JSON spec, deserialised as the API types, then
//! validated, and a NodePool's requirements, taints and budgets converted as the agent does.

use crate::split_first;
use joiner_agent::api::{self, node_class::NodeClassSpec, node_pool::NodePoolSpec, validate};
use joiner_agent::disruption::Budgets;

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, json)) = split_first(data) else {
        return;
    };
    if selector % 2 == 0 {
        let Ok(spec) = serde_json::from_slice::<NodePoolSpec>(json) else {
            return;
        };
        let _ = validate::node_pool(&spec, "spec");
        let t = &spec.template.spec;
        if let Ok(reqs) = api::convert_requirements(&t.requirements) {
            let _ = api::requirements_to_api(&reqs);
        }
        let _ = api::convert_taints(&t.taints);
        let _ = api::convert_taints(&t.startup_taints);
        let _ = Budgets::from_api(&spec.disruption.budgets);
    } else {
        let Ok(spec) = serde_json::from_slice::<NodeClassSpec>(json) else {
            return;
        };
        let _ = validate::node_class(&spec, "spec");
        let _ = spec.kubelet_settings();
    }
}
