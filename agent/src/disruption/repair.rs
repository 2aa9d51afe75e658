//! Node repair, the pure half (Karpenter v1.1's node health controller): which unhealthy
//! nodes to replace now.
//!
//! A node is unhealthy when one of its conditions matches a policy (type and status); it
//! is replaced once the condition has held for the policy's toleration, counted from the
//! condition's `lastTransitionTime`. A pool with more than 20 % of its nodes unhealthy
//! (rounded up, as PodDisruptionBudgets round: 1 of 3 is allowed) repairs none of them:
//! many nodes failing at once points at something a replacement will not fix (a bad AMI,
//! a network outage), and replacing them all would only add churn.
//!
//! Repair is not voluntary disruption: budgets, do-not-disrupt and PDBs do not hold it, as
//! in Karpenter, which terminates a repaired node forcefully. The loop is
//! `crate::controllers::repair`.

use std::collections::BTreeMap;

use crate::api::node_pool::{Repair, RepairPolicy};

/// Karpenter's threshold, `allowedUnhealthyPercent`.
pub const MAX_UNHEALTHY_PERCENT: usize = 20;

/// A policy, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub condition_type: String,
    pub condition_status: String,
    /// Seconds.
    pub toleration: u64,
}

/// Karpenter's AWS cloud provider `RepairPolicies`: the kubelet's Ready, and the
/// conditions of the EKS node monitoring agent.
pub fn aws_defaults() -> Vec<Policy> {
    let p = |t: &str, s: &str, mins: u64| Policy {
        condition_type: t.into(),
        condition_status: s.into(),
        toleration: mins * 60,
    };
    vec![
        p("Ready", "False", 30),
        p("Ready", "Unknown", 30),
        p("AcceleratedHardwareReady", "False", 10),
        p("StorageReady", "False", 30),
        p("NetworkingReady", "False", 30),
        p("KernelReady", "False", 30),
        p("ContainerRuntimeReady", "False", 30),
    ]
}

/// A pool's policies: its own, or the AWS defaults when it lists none. Errors name the field.
pub fn policies(repair: &Repair) -> Result<Vec<Policy>, String> {
    if repair.policies.is_empty() {
        return Ok(aws_defaults());
    }
    repair
        .policies
        .iter()
        .enumerate()
        .map(|(i, p): (usize, &RepairPolicy)| {
            Ok(Policy {
                condition_type: p.condition_type.clone(),
                condition_status: p.condition_status.clone(),
                toleration: crate::api::duration::parse_seconds(&p.toleration_duration)
                    .map_err(|e| format!("spec.repair.policies[{i}].tolerationDuration: {e}"))?,
            })
        })
        .collect()
}

/// A node condition: type, status, and when it took that status (seconds since the epoch;
/// None when the node does not say).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCondition {
    pub type_: String,
    pub status: String,
    pub since: Option<i64>,
}

/// One of the agent's nodes, as repair sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeHealth {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: String,
    pub conditions: Vec<NodeCondition>,
    /// Already being disrupted or deleted: counted, never chosen again.
    pub disrupting: bool,
    /// Not yet Initialized: the lifecycle's registration and initialization timeouts own it.
    pub initialized: bool,
}

/// A node to replace.
#[derive(Debug, Clone, PartialEq)]
pub struct Repairing {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: String,
    /// `Ready=Unknown for 31m12s (toleration 30m)`.
    pub why: String,
}

/// A pool whose repairs are held back.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub nodepool: String,
    pub unhealthy: usize,
    pub nodes: usize,
    /// The unhealthy nodes past their toleration, which would otherwise be replaced.
    pub due: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub repair: Vec<Repairing>,
    pub held: Vec<Held>,
}

/// The first policy a node's conditions match, and since when.
fn matching<'a>(policies: &'a [Policy], n: &NodeHealth) -> Option<(&'a Policy, Option<i64>)> {
    policies.iter().find_map(|p| {
        n.conditions
            .iter()
            .find(|c| c.type_ == p.condition_type && c.status == p.condition_status)
            .map(|c| (p, c.since))
    })
}

/// The nodes to repair now, per pool. `pools` maps a pool name to its policies; pools
/// without repair are absent.
pub fn decide(pools: &BTreeMap<String, Vec<Policy>>, nodes: &[NodeHealth], now: i64) -> Outcome {
    let mut out = Outcome::default();
    let mut by_pool: BTreeMap<&str, Vec<&NodeHealth>> = BTreeMap::new();
    for n in nodes {
        by_pool.entry(n.nodepool.as_str()).or_default().push(n);
    }
    for (pool, members) in by_pool {
        let Some(policies) = pools.get(pool) else {
            continue;
        };
        let unhealthy: Vec<(&NodeHealth, &Policy, Option<i64>)> = members
            .iter()
            .filter_map(|n| matching(policies, n).map(|(p, since)| (*n, p, since)))
            .collect();
        let mut due = Vec::new();
        for (n, p, since) in &unhealthy {
            if n.disrupting || !n.initialized {
                continue;
            }
            // A condition without a transition time is taken as just seen: it waits a whole
            // toleration from the first pass that sees it (the loop supplies that time).
            let Some(since) = since else { continue };
            let held_for = now.saturating_sub(*since).max(0) as u64;
            if held_for < p.toleration {
                continue;
            }
            due.push(Repairing {
                node: n.node.clone(),
                nodeclaim: n.nodeclaim.clone(),
                nodepool: pool.to_string(),
                why: format!(
                    "{}={} for {} (toleration {})",
                    p.condition_type,
                    p.condition_status,
                    span(held_for),
                    span(p.toleration)
                ),
            });
        }
        if due.is_empty() {
            continue;
        }
        let threshold = (members.len() * MAX_UNHEALTHY_PERCENT).div_ceil(100);
        if unhealthy.len() > threshold {
            out.held.push(Held {
                nodepool: pool.to_string(),
                unhealthy: unhealthy.len(),
                nodes: members.len(),
                due: due.into_iter().map(|r| r.node).collect(),
            });
        } else {
            out.repair.extend(due);
        }
    }
    out
}

/// `1h2m3s`-style, for messages.
fn span(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn node(name: &str, conds: &[(&str, &str, i64)]) -> NodeHealth {
        NodeHealth {
            node: name.into(),
            nodeclaim: format!("claim-{name}"),
            nodepool: "p".into(),
            conditions: conds
                .iter()
                .map(|(t, s, ago)| NodeCondition {
                    type_: t.to_string(),
                    status: s.to_string(),
                    since: Some(NOW - ago),
                })
                .collect(),
            disrupting: false,
            initialized: true,
        }
    }

    fn healthy(name: &str) -> NodeHealth {
        node(name, &[("Ready", "True", 86_400)])
    }

    fn pools() -> BTreeMap<String, Vec<Policy>> {
        BTreeMap::from([("p".to_string(), aws_defaults())])
    }

    #[test]
    fn a_node_unhealthy_past_its_toleration_is_repaired() {
        let nodes = vec![
            node("gone", &[("Ready", "Unknown", 31 * 60)]),
            node("recent", &[("Ready", "False", 5 * 60)]),
            node(
                "gpu",
                &[
                    ("Ready", "True", 86_400),
                    ("AcceleratedHardwareReady", "False", 11 * 60),
                ],
            ),
            node(
                "kernel",
                &[("Ready", "True", 86_400), ("KernelReady", "True", 3600)],
            ),
            healthy("a"),
            healthy("b"),
            healthy("c"),
            healthy("d"),
            healthy("e"),
            healthy("f"),
            healthy("g"),
            healthy("h"),
            healthy("i"),
            healthy("j"),
        ];
        // 3 unhealthy (gone, recent, gpu) of 14: threshold ceil(2.8) = 3, so repairs go.
        let out = decide(&pools(), &nodes, NOW);
        let names: Vec<&str> = out.repair.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(names, vec!["gone", "gpu"], "{out:#?}");
        assert_eq!(out.repair[0].why, "Ready=Unknown for 31m (toleration 30m)");
        assert_eq!(
            out.repair[1].why,
            "AcceleratedHardwareReady=False for 11m (toleration 10m)"
        );
        assert!(out.held.is_empty());
    }

    #[test]
    fn more_than_twenty_percent_unhealthy_holds_the_pool() {
        // 1 of 5 (ceil(1.0) = 1): repaired.
        let mut nodes = vec![node("x", &[("Ready", "Unknown", 3600)])];
        nodes.extend(["a", "b", "c", "d"].map(healthy));
        assert_eq!(decide(&pools(), &nodes, NOW).repair.len(), 1);
        // 2 of 5: held, and both are named.
        nodes[1] = node("y", &[("Ready", "False", 60)]);
        let out = decide(&pools(), &nodes, NOW);
        assert!(out.repair.is_empty());
        assert_eq!(
            out.held,
            vec![Held {
                nodepool: "p".into(),
                unhealthy: 2,
                nodes: 5,
                due: vec!["x".into()],
            }]
        );
        // 1 of 3 is within 20 % rounded up, as a PDB rounds.
        let small = vec![
            node("x", &[("Ready", "Unknown", 3600)]),
            healthy("a"),
            healthy("b"),
        ];
        assert_eq!(decide(&pools(), &small, NOW).repair.len(), 1);
    }

    #[test]
    fn pools_without_repair_disrupting_and_new_nodes_are_left_alone() {
        let mut disrupting = node("d", &[("Ready", "Unknown", 3600)]);
        disrupting.disrupting = true;
        let mut booting = node("b", &[("Ready", "False", 3600)]);
        booting.initialized = false;
        let mut other = node("o", &[("Ready", "Unknown", 3600)]);
        other.nodepool = "no-repair".into();
        let nodes = vec![disrupting, booting, other, healthy("h1"), healthy("h2")];
        let many: Vec<NodeHealth> = nodes
            .into_iter()
            .chain((0..10).map(|i| healthy(&format!("x{i}"))))
            .collect();
        assert_eq!(decide(&pools(), &many, NOW), Outcome::default());
    }

    #[test]
    fn a_pool_lists_its_own_policies() {
        let r = Repair {
            policies: vec![RepairPolicy {
                condition_type: "KernelDeadlock".into(),
                condition_status: "True".into(),
                toleration_duration: "2m".into(),
            }],
        };
        let ps = policies(&r).unwrap();
        assert_eq!(ps.len(), 1);
        let pools = BTreeMap::from([("p".to_string(), ps)]);
        let mut nodes = vec![node(
            "k",
            &[("Ready", "True", 86_400), ("KernelDeadlock", "True", 180)],
        )];
        nodes.extend(["a", "b", "c", "d"].map(healthy));
        // Ready=Unknown is no longer a policy of this pool.
        nodes.push(node("r", &[("Ready", "Unknown", 86_400)]));
        let out = decide(&pools, &nodes, NOW);
        assert_eq!(
            out.repair
                .iter()
                .map(|r| r.node.as_str())
                .collect::<Vec<_>>(),
            vec!["k"]
        );
        assert!(policies(&Repair::default()).unwrap().len() == 7);
    }
}
