//! Capacity that no pending pod asks for: a pool's headroom (warm room for pods to come)
//! and static pools' replicas. Pure, like the rest of the scheduler; the provisioning round
//! creates what [`extra_claims`] returns through its one NodeClaim path.
//!
//! Headroom is modelled as placeholder pods, the pause-pod overprovisioning pattern
//! without the pods: `pods` pods of `cpu`/`memory`, selecting their pool and tolerating its
//! taints. They are placed *after* the round's real pods (on the plan folded in), so real
//! pods always get the room first and the placeholders say what must be added to restore
//! it. Placeholders never exist in the cluster: kube-scheduler, seeing the room free, puts
//! a burst there at once; the next round finds the headroom short and adds capacity.
//!
//! Spare nodes (`nodes: N`) and static replicas are empty NodeClaims: placeholders with no
//! requests and hostname anti-affinity among themselves, planned against an input holding
//! only their pool, so each gets a claim of its own from the pool's cheapest types.

use std::collections::BTreeMap;

use super::{
    schedule, InFlightClaim, Input, LabelSelector, NewNodeClaim, NodePoolInput, Plan, Pod,
    PodAffinityTerm, Target,
};
use crate::api::cron::Schedule;
use crate::catalog::Catalog;
use crate::labels;
use crate::resources::Resources;
use crate::taints::{Taint, Toleration};

/// Label on placeholder pods (never on a real object).
pub const PLACEHOLDER_LABEL: &str = "joiner.dev/placeholder";
/// Namespace placeholder pods are said to live in (never created).
pub const PLACEHOLDER_NAMESPACE: &str = "joiner.dev-headroom";

/// One headroom entry, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headroom {
    /// Room for `pods` pods of these requests (zero when the entry is spare nodes).
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub pods: u32,
    /// Spare nodes.
    pub nodes: u32,
    /// When the entry is in force: a cron schedule and its duration in seconds.
    pub window: Option<(Schedule, u64)>,
}

impl Headroom {
    pub fn in_force(&self, now: i64) -> bool {
        self.window.as_ref().is_none_or(|(s, d)| s.active(now, *d))
    }
}

/// Parses a pool's `headroom`; errors name `spec.headroom[i].<field>`.
pub fn parse(entries: &[crate::api::node_pool::Headroom]) -> Result<Vec<Headroom>, String> {
    entries
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let p = format!("spec.headroom[{i}]");
            let cpu_milli = h
                .cpu
                .as_deref()
                .map(crate::resources::parse_cpu_milli)
                .transpose()
                .map_err(|e| format!("{p}.cpu: {e}"))?
                .unwrap_or(0);
            let memory_bytes = h
                .memory
                .as_deref()
                .map(crate::resources::parse_bytes)
                .transpose()
                .map_err(|e| format!("{p}.memory: {e}"))?
                .unwrap_or(0);
            let window = match (&h.schedule, &h.duration) {
                (None, None) => None,
                (Some(s), Some(d)) => Some((
                    Schedule::parse(s).map_err(|e| format!("{p}.schedule: {e}"))?,
                    crate::api::duration::parse_seconds(d)
                        .map_err(|e| format!("{p}.duration: {e}"))?,
                )),
                _ => return Err(format!("{p}: schedule and duration must be set together")),
            };
            let sized = cpu_milli > 0 || memory_bytes > 0;
            Ok(Headroom {
                cpu_milli,
                memory_bytes,
                pods: if sized { h.pods.unwrap_or(1) } else { 0 },
                nodes: h.nodes.unwrap_or(0),
                window,
            })
        })
        .collect()
}

/// The placeholder pods of a pool's headroom in force at `now`.
pub fn placeholders(pool: &str, taints: &[Taint], headroom: &[Headroom], now: i64) -> Vec<Pod> {
    let tolerations: Vec<Toleration> = taints
        .iter()
        .map(|t| Toleration::equal(&t.key, &t.value, Some(t.effect)))
        .collect();
    let mut out = Vec::new();
    for (i, h) in headroom.iter().enumerate() {
        if !h.in_force(now) {
            continue;
        }
        for k in 0..h.pods {
            let mut p = Pod::new(
                PLACEHOLDER_NAMESPACE,
                &format!("{pool}-{i}-{k}"),
                h.cpu_milli,
                h.memory_bytes,
            );
            p.labels.insert(PLACEHOLDER_LABEL.into(), pool.into());
            p.node_selector
                .insert(labels::KARPENTER_NODEPOOL.into(), pool.into());
            p.tolerations = tolerations.clone();
            out.push(p);
        }
    }
    out
}

/// Spare nodes a pool's headroom asks for at `now`.
pub fn spare_nodes(headroom: &[Headroom], now: i64) -> u32 {
    headroom
        .iter()
        .filter(|h| h.in_force(now))
        .map(|h| h.nodes)
        .sum()
}

/// What one pool needs beyond the round's real pods.
#[derive(Debug, Clone, Default)]
pub struct PoolCapacity {
    pub pool: String,
    pub headroom: Vec<Headroom>,
    /// Static pools: the node count to keep.
    pub replicas: Option<u32>,
    /// Static pools: claims that count toward `replicas` (launched or launching, not
    /// disrupted or deleting).
    pub live: usize,
    /// Nodes and claims of the pool with no pod that needs a place (for spare nodes).
    pub empty: usize,
}

/// `input` with `plan` carried out: placed pods bound where they went, new claims coming.
pub fn fold(catalog: &Catalog, input: &Input, plan: &Plan) -> Input {
    let mut out = input.clone();
    for p in &plan.placements {
        let bound = super::BoundPod::from_pod(&input.pods[p.pod]);
        match &p.target {
            Target::Node(n) => {
                if let Some(node) = out.nodes.iter_mut().find(|x| &x.name == n) {
                    node.pods.push(bound);
                }
            }
            Target::InFlight(c) => {
                if let Some(claim) = out.in_flight.iter_mut().find(|x| &x.name == c) {
                    claim.pods.push(bound);
                }
            }
        }
    }
    for (i, c) in plan.new_claims.iter().enumerate() {
        let taints = input
            .node_pools
            .iter()
            .find(|p| p.name == c.nodepool)
            .map(|p| p.taints.clone())
            .unwrap_or_default();
        let mut claim = InFlightClaim::planned(catalog, c, &format!("planned-{i}"), taints);
        claim.pods = c
            .pods
            .iter()
            .map(|&k| super::BoundPod::from_pod(&input.pods[k]))
            .collect();
        out.in_flight.push(claim);
    }
    out.pods.clear();
    out
}

/// `count` empty claims of `pool`: one per placeholder, each on a node of its own.
pub fn empty_claims(
    catalog: &Catalog,
    base: &Input,
    pool: &NodePoolInput,
    count: usize,
) -> Vec<NewNodeClaim> {
    if count == 0 {
        return vec![];
    }
    let group = format!("{}-spare", pool.name);
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector::labels([(PLACEHOLDER_LABEL, group.as_str())])),
        topology_key: labels::HOSTNAME.into(),
        ..Default::default()
    };
    let tolerations: Vec<Toleration> = pool
        .taints
        .iter()
        .map(|t| Toleration::equal(&t.key, &t.value, Some(t.effect)))
        .collect();
    let pods = (0..count)
        .map(|k| {
            let mut p = Pod::new(PLACEHOLDER_NAMESPACE, &format!("{group}-{k}"), 0, 0);
            p.requests = Resources::pod(0, 0);
            p.labels.insert(PLACEHOLDER_LABEL.into(), group.clone());
            p.node_selector
                .insert(labels::KARPENTER_NODEPOOL.into(), pool.name.clone());
            p.tolerations = tolerations.clone();
            p.pod_anti_affinity = vec![term.clone()];
            p
        })
        .collect();
    let input = Input {
        pods,
        node_pools: vec![pool.clone()],
        node_classes: base.node_classes.clone(),
        daemonsets: base.daemonsets.clone(),
        unavailable: base.unavailable.clone(),
        ..Default::default()
    };
    let mut claims = schedule(catalog, &input).new_claims;
    for c in &mut claims {
        c.pods.clear();
    }
    claims
}

/// The claims the round creates beyond `plan`'s: the missing replicas of static pools
/// (`static_pools`: their scheduler inputs, kept out of `input`, whose pools are the
/// dynamic ones), the missing spare nodes, and capacity for the headroom that does not fit
/// on what exists or is coming once `plan` is carried out. Each claim's `pods` is empty:
/// nothing waits for it.
pub fn extra_claims(
    catalog: &Catalog,
    input: &Input,
    plan: &Plan,
    static_pools: &[NodePoolInput],
    pools: &[PoolCapacity],
    now: i64,
) -> Vec<NewNodeClaim> {
    let mut out = Vec::new();
    let by_name: BTreeMap<&str, &PoolCapacity> =
        pools.iter().map(|p| (p.pool.as_str(), p)).collect();
    for sp in static_pools {
        let Some(cap) = by_name.get(sp.name.as_str()) else {
            continue;
        };
        let want = cap.replicas.unwrap_or(0) as usize;
        out.extend(empty_claims(
            catalog,
            input,
            sp,
            want.saturating_sub(cap.live),
        ));
    }
    let mut placeholders = Vec::new();
    for np in &input.node_pools {
        let Some(cap) = by_name.get(np.name.as_str()) else {
            continue;
        };
        let spare = spare_nodes(&cap.headroom, now) as usize;
        out.extend(empty_claims(
            catalog,
            input,
            np,
            spare.saturating_sub(cap.empty),
        ));
        placeholders.extend(placeholders_for(np, cap, now));
    }
    if !placeholders.is_empty() {
        let mut after = fold(catalog, input, plan);
        after.pods = placeholders;
        let mut claims = schedule(catalog, &after).new_claims;
        for c in &mut claims {
            c.pods.clear();
        }
        out.extend(claims);
    }
    out
}

fn placeholders_for(np: &NodePoolInput, cap: &PoolCapacity, now: i64) -> Vec<Pod> {
    placeholders(&np.name, &np.taints, &cap.headroom, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node_pool::Headroom as Api;
    use crate::catalog::{
        CapacityType, InstanceType, InstanceTypeRecord, KubeletSettings, Offering,
    };
    use crate::requirements::{Operator, Requirement, Requirements};
    use crate::scheduler::Node;

    const GI: i64 = 1 << 30;
    const NOW: i64 = 1_795_392_000 + 12 * 3600; // Monday 2026-11-23 12:00 UTC

    /// The benchmarks' catalogue shape, on demand only (what [`pool`] buys): `fake-it-i` has
    /// i+1 vCPU, 2(i+1) GiB and 10(i+1) pods, priced by size, so the cheapest is `fake-it-0`.
    /// Local, because a unit test cannot use the fixtures crate, which links this library.
    fn catalog(count: usize) -> Catalog {
        let settings = KubeletSettings::default();
        let types = (0..count)
            .map(|i| {
                let n = (i + 1) as u32;
                let record = InstanceTypeRecord {
                    name: format!("fake-it-{i}"),
                    vcpus: n,
                    memory_mib: 2048 * n as u64,
                    architectures: vec!["x86_64".into()],
                    hypervisor: "nitro".into(),
                    current_generation: true,
                    max_pods: Some(10 * n),
                    ..Default::default()
                };
                let offerings = ["test-zone-a", "test-zone-b", "test-zone-c"]
                    .into_iter()
                    .map(|zone| Offering {
                        zone: zone.into(),
                        capacity_type: CapacityType::OnDemand,
                        price: 0.0531 * n as f64,
                        reservation: None,
                    })
                    .collect();
                InstanceType::new(record, offerings, &settings)
            })
            .collect();
        Catalog::from_types(types)
    }

    fn pool() -> NodePoolInput {
        let mut r = Requirements::new();
        r.add(
            labels::CAPACITY_TYPE,
            Requirement::new(Operator::In, &["on-demand"]).unwrap(),
        );
        NodePoolInput {
            name: "general".into(),
            node_class: "default".into(),
            requirements: r,
            ..Default::default()
        }
    }

    fn room(cpu: &str, mem: &str, pods: u32) -> Api {
        Api {
            cpu: Some(cpu.into()),
            memory: Some(mem.into()),
            pods: Some(pods),
            ..Default::default()
        }
    }

    fn node(cat: &Catalog, name: &str, i: usize, used_cpu: i64) -> Node {
        let it = cat.get(&format!("fake-it-{i}")).unwrap();
        let mut l = it.labels.clone();
        l.insert(labels::HOSTNAME.into(), name.into());
        l.insert(labels::ZONE.into(), "test-zone-a".into());
        l.insert(labels::CAPACITY_TYPE.into(), "on-demand".into());
        l.insert(labels::KARPENTER_NODEPOOL.into(), "general".into());
        let mut pods = vec![];
        if used_cpu > 0 {
            pods.push(super::super::BoundPod::from_pod(&super::super::Pod {
                namespace: "default".into(),
                requests: Resources::pod(used_cpu, GI),
                ..Default::default()
            }));
        }
        Node {
            name: name.into(),
            labels: l,
            allocatable: it.allocatable.clone(),
            pods,
            ..Default::default()
        }
    }

    #[test]
    fn entries_parse_and_follow_their_window() {
        let h = parse(&[
            room("1", "2Gi", 4),
            Api {
                nodes: Some(2),
                schedule: Some("0 8 * * mon-fri".into()),
                duration: Some("10h".into()),
                ..Default::default()
            },
        ])
        .unwrap();
        assert_eq!(h[0].cpu_milli, 1000);
        assert_eq!(h[0].memory_bytes, 2 * GI);
        assert_eq!(h[0].pods, 4);
        assert_eq!(spare_nodes(&h, NOW), 2, "Monday noon is inside 08:00 + 10h");
        assert_eq!(spare_nodes(&h, NOW + 12 * 3600), 0, "midnight is not");
        let ph = placeholders("general", &[], &h, NOW);
        assert_eq!(ph.len(), 4);
        assert!(ph
            .iter()
            .all(|p| p.node_selector[labels::KARPENTER_NODEPOOL] == "general"));
        assert!(parse(&[Api {
            cpu: Some("x".into()),
            ..Default::default()
        }])
        .unwrap_err()
        .starts_with("spec.headroom[0].cpu"));
    }

    #[test]
    fn headroom_that_fits_on_free_room_adds_nothing() {
        let cat = catalog(40);
        // An 8-vCPU node with 3 vCPU used: 4 pods of 1 vCPU / 2 GiB fit in what is free.
        let input = Input {
            nodes: vec![node(&cat, "n", 7, 3000)],
            node_pools: vec![pool()],
            ..Default::default()
        };
        let caps = [PoolCapacity {
            pool: "general".into(),
            headroom: parse(&[room("1", "2Gi", 4)]).unwrap(),
            ..Default::default()
        }];
        let plan = schedule(&cat, &input);
        assert!(extra_claims(&cat, &input, &plan, &[], &caps, NOW).is_empty());
    }

    #[test]
    fn real_pods_take_the_room_first_and_headroom_gets_a_new_claim() {
        let cat = catalog(40);
        let mut input = Input {
            nodes: vec![node(&cat, "n", 7, 3000)],
            node_pools: vec![pool()],
            ..Default::default()
        };
        // A burst of 4 pods of 1 vCPU lands in the free room...
        input.pods = (0..4)
            .map(|i| Pod::new("default", &format!("burst-{i}"), 1000, GI))
            .collect();
        let plan = schedule(&cat, &input);
        assert!(plan.new_claims.is_empty(), "the burst fits: {plan:?}");
        assert_eq!(plan.placements.len(), 4);
        // ...so the headroom needs a claim of its own, sized for it.
        let caps = [PoolCapacity {
            pool: "general".into(),
            headroom: parse(&[room("1", "2Gi", 4)]).unwrap(),
            ..Default::default()
        }];
        let extra = extra_claims(&cat, &input, &plan, &[], &caps, NOW);
        assert_eq!(extra.len(), 1, "{extra:?}");
        assert!(extra[0].pods.is_empty());
        assert!(
            extra[0].requests.cpu_milli >= 4000,
            "{:?}",
            extra[0].requests
        );
        let cheapest = cat.get(&extra[0].instance_types[0].instance_type).unwrap();
        assert!(cheapest.allocatable.cpu_milli >= 4000);
    }

    #[test]
    fn static_replicas_and_spare_nodes_are_empty_claims_one_node_each() {
        let cat = catalog(40);
        let input = Input {
            node_pools: vec![pool()],
            ..Default::default()
        };
        let mut stat = pool();
        stat.name = "static".into();
        let caps = [
            PoolCapacity {
                pool: "static".into(),
                replicas: Some(3),
                live: 1,
                ..Default::default()
            },
            PoolCapacity {
                pool: "general".into(),
                headroom: parse(&[Api {
                    nodes: Some(2),
                    ..Default::default()
                }])
                .unwrap(),
                empty: 1,
                ..Default::default()
            },
        ];
        let plan = Plan::default();
        let extra = extra_claims(&cat, &input, &plan, &[stat], &caps, NOW);
        let per_pool = |p: &str| extra.iter().filter(|c| c.nodepool == p).count();
        assert_eq!(per_pool("static"), 2, "3 replicas, 1 live: {extra:#?}");
        assert_eq!(per_pool("general"), 1, "2 spare nodes, 1 empty");
        // Empty claims launch the pool's cheapest type.
        assert!(extra
            .iter()
            .all(|c| c.instance_types[0].instance_type == "fake-it-0"));
    }
}
