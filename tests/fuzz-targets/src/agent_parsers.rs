//! The agent's small parsers of user-written strings, picked by the first byte: resource
//! quantities, Go durations, budget cron schedules and node counts, requirement operators
//! and values (Gt/Lt parse integers), taint effects. Parsed values are exercised too.

use crate::{split_first, split_nul};
use joiner_agent::api::cron;
use joiner_agent::api::duration;
use joiner_agent::disruption::budgets;
use joiner_agent::requirements::{Operator, Requirement};
use joiner_agent::{resources, taints};

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, rest)) = split_first(data) else {
        return;
    };
    let Ok(s) = std::str::from_utf8(rest) else {
        return;
    };
    match selector % 6 {
        0 => {
            let _ = resources::parse_quantity(s);
            let _ = resources::parse_cpu_milli(s);
            let _ = resources::parse_bytes(s);
            let _ = kube_sim::quantity::parse(s);
            // `name=quantity,...` as a pod's requests.
            let _ = resources::Resources::from_quantities(
                s.split(',').filter_map(|kv| kv.split_once('=')),
            );
        }
        1 => {
            let _ = duration::parse_seconds(s);
            let _ = duration::parse_or_never(s);
        }
        2 => {
            // A schedule, then (after a NUL) a duration; checked at a spread of instants.
            let (sched, dur) = split_nul(rest);
            let Ok(sched) = std::str::from_utf8(sched) else {
                return;
            };
            if let Ok(c) = cron::Schedule::parse(sched) {
                let d = std::str::from_utf8(dur)
                    .ok()
                    .and_then(|d| duration::parse_seconds(d).ok())
                    .unwrap_or(3600);
                for t in [0i64, 1_700_000_000, 1_767_225_599, 4_102_444_800] {
                    let _ = c.matches(t);
                    let _ = c.active(t, d);
                }
            }
        }
        3 => {
            if let Ok(n) = budgets::Nodes::parse(s) {
                // Pool sizes a cluster can have (`of` multiplies by the percentage).
                for total in [0, 1, 7, 1000, 1_000_000] {
                    let _ = n.of(total);
                }
            }
            let _ = budgets::Reason::parse(s);
        }
        4 => {
            // An operator, then comma-separated values.
            let (op, values) = s.split_once(' ').unwrap_or((s, ""));
            let Ok(op) = op.parse::<Operator>() else {
                return;
            };
            let values: Vec<&str> = if values.is_empty() {
                Vec::new()
            } else {
                values.split(',').collect()
            };
            if let Ok(r) = Requirement::new(op, &values) {
                let _ = r.is_satisfiable();
                let _ = r.to_selector_terms();
                for v in &values {
                    let _ = r.matches(Some(*v));
                }
                let other = Requirement::new(Operator::Gt, &["3"]).expect("Gt 3");
                let both = r.intersect(&other);
                let _ = both.is_satisfiable();
                let _ = r.intersect(&r);
            }
        }
        _ => {
            let _ = taints::Effect::parse(s);
        }
    }
}
