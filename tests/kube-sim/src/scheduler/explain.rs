//! [`super::Explain`]'s search: whether a refused pod and the unbound pods its spreads count
//! could all be bound to the nodes as they stand, in some order.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::node_filters;
use super::node_resources_fit::{allocatable, Amounts};
use super::pod_topology_spread::{constraints, selects};
use super::Cluster;

/// Most placements one explanation may try before it answers "no".
const SEARCH_BUDGET: usize = 4_096;
/// Larger problems (pods × nodes) are not searched: their verdicts are logged as unknown.
const SEARCH_LIMIT: usize = 100_000;

/// Unbound pods that schedule alike (one ReplicaSet's, say), searched as one.
struct Shape<'p> {
    key: String,
    pod: &'p Value,
    req: Amounts,
    left: usize,
}

/// What the filters read of a pod: pods with equal keys are interchangeable.
pub(super) fn shape_key(pod: &Value) -> String {
    let spec = &pod["spec"];
    json!([
        pod["metadata"]["labels"],
        spec["containers"]
            .as_array()
            .map(|cs| cs.iter().map(|c| &c["resources"]).collect::<Vec<_>>()),
        spec["initContainers"]
            .as_array()
            .map(|cs| cs.iter().map(|c| &c["resources"]).collect::<Vec<_>>()),
        spec["overhead"],
        spec["nodeSelector"],
        spec["affinity"],
        spec["tolerations"],
        spec["topologySpreadConstraints"],
        spec["volumes"],
    ])
    .to_string()
}

impl Cluster<'_> {
    /// Whether `pod` and the unbound pods in `waiting` that its required spreads count could
    /// all be bound to the nodes as they stand, in some order. None: too large to search.
    pub(super) fn fits_in_some_order(&self, pod: &Value, waiting: &[&Value]) -> Option<bool> {
        let cs = constraints(pod);
        let ns = &pod["metadata"]["namespace"];
        let members = waiting.iter().copied().filter(|p| {
            std::ptr::eq(*p, pod)
                || (p["metadata"]["namespace"] == *ns
                    && cs
                        .iter()
                        .any(|c| selects(&c["labelSelector"], &p["metadata"]["labels"])))
        });
        let mut shapes: Vec<Shape> = Vec::new();
        let mut total = 0;
        for p in members {
            total += 1;
            let key = shape_key(p);
            match shapes.iter_mut().find(|s| s.key == key) {
                Some(s) => s.left += 1,
                None => shapes.push(Shape {
                    key,
                    pod: p,
                    req: super::node_resources_fit::requests(p),
                    left: 1,
                }),
            }
        }
        if total * self.nodes.len().max(1) > SEARCH_LIMIT {
            return None;
        }
        if !shapes.iter().all(|s| self.room_for(s)) {
            return Some(false);
        }
        let mut trial = self.clone();
        // Enough for the greedy descent and some backtracking; pods of one shape are
        // interchangeable, so a deeper search mostly repeats itself.
        let mut budget = (4 * total + 64).min(SEARCH_BUDGET);
        Some(trial.place_all(&mut shapes, &mut budget))
    }

    /// Whether the nodes that could ever take the shape's pods (all but the request and
    /// pod-placement filters) have room for all of them together: a cheap necessary
    /// condition, so that a workload plainly short of room is not searched.
    fn room_for(&self, shape: &Shape) -> bool {
        let mut free: BTreeMap<&str, i64> = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node_filters::refusal(shape.pod, node).is_some() {
                continue;
            }
            for k in shape.req.keys() {
                let used = self.used[i].get(k).copied().unwrap_or(0);
                *free.entry(k).or_default() += (allocatable(node, k) - used).max(0);
            }
        }
        shape
            .req
            .iter()
            .all(|(k, v)| *v * shape.left as i64 <= free.get(k.as_str()).copied().unwrap_or(0))
    }

    /// Depth-first: binds next a pod of the shape with the fewest open nodes (a shape with
    /// none may open up once others are bound), trying its nodes best scored first.
    fn place_all(&mut self, shapes: &mut [Shape], budget: &mut usize) -> bool {
        if shapes.iter().all(|s| s.left == 0) {
            return true;
        }
        let mut next: Option<(usize, Vec<usize>)> = None;
        for (k, s) in shapes.iter().enumerate() {
            if s.left == 0 {
                continue;
            }
            let open = self.open_nodes(s.pod);
            if !open.is_empty() && next.as_ref().is_none_or(|(_, o)| open.len() < o.len()) {
                next = Some((k, open));
            }
        }
        let Some((k, open)) = next else {
            return false;
        };
        for i in open {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            let pod = shapes[k].pod;
            self.bind(i, pod);
            shapes[k].left -= 1;
            if self.place_all(shapes, budget) {
                return true;
            }
            shapes[k].left += 1;
            self.unbind_last(i, pod);
        }
        false
    }
}
