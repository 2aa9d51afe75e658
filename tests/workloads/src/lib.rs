//! Synthetic catalogues and workloads shared by the agent's benchmarks and tests, the
//! provider's plan tests and the sandbox, so that all of them measure exactly the same shapes.
//! Fixtures, never shipped: the agent's library does not depend on this crate.
//!
//! - [`karpenter_catalog`] / [`karpenter_pods`]: the shape of Karpenter's
//!   `scheduling_benchmark_test.go`: 400 types where type i has i+1 vCPU, 2(i+1) GiB and
//!   10(i+1) pods; pods in 5 equal groups (plain, zonal spread maxSkew 1, hostname spread,
//!   zonal self-affinity, hostname anti-affinity); CPU from {100, 250, 500, 1000, 1500}m and
//!   memory from {100, 256, 512, 1024, 2048, 4096}Mi, seeded.
//!   Synthetic prices (stated model): on-demand = 0.0425 $/vCPU/h + 0.0053 $/GiB/h; Spot by
//!   [`joiner_agent::catalog::prices::spot_model`] with category `m`.
//! - [`seed_pods`]: the seed documents' 100 replicas of 250m / 512Mi.
//! - [`mixed_pods`]: 1,000 pods of web/api/worker/cache/batch shapes, seeded.
//! - [`lower_bound`]: demand priced at the cheapest $/vCPU and $/GiB among allowed types.

use std::collections::BTreeMap;

use joiner_agent::catalog::{
    CapacityType, Catalog, InstanceType, InstanceTypeRecord, KubeletSettings, Offering,
};
use joiner_agent::labels;
use joiner_agent::requirements::Requirements;
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{
    LabelSelector, NewNodeClaim, NodePoolInput, Pod, PodAffinityTerm, TopologySpreadConstraint,
    WhenUnsatisfiable,
};

const MI: i64 = 1 << 20;

/// SplitMix64: a tiny deterministic generator, so workloads do not depend on a crate's
/// algorithm staying the same across versions.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next_u64() % items.len() as u64) as usize]
    }
}

pub const BENCH_ZONES: [&str; 3] = ["test-zone-a", "test-zone-b", "test-zone-c"];

/// Karpenter's 400 synthetic instance types (see the module docs for prices).
pub fn karpenter_catalog(count: usize) -> Catalog {
    catalog_with_spot(count, |_, _| true)
}

/// [`karpenter_catalog`] with holes in its Spot market, as EC2 has them: every seventh type
/// is not sold as Spot anywhere, and every fifth has no Spot price in the first zone. The
/// scheduler then plans with fewer Spot offerings than on-demand ones for those types.
pub fn karpenter_catalog_with_spot_holes(count: usize) -> Catalog {
    catalog_with_spot(count, |i, zone| {
        i % 7 != 3 && !(i % 5 == 1 && zone == BENCH_ZONES[0])
    })
}

/// The benchmark catalogue, with a Spot offering only where `spot(type index, zone)`.
fn catalog_with_spot(count: usize, spot: impl Fn(usize, &str) -> bool) -> Catalog {
    let settings = KubeletSettings::default();
    let types = (0..count)
        .map(|i| {
            let n = (i + 1) as u32;
            let rec = InstanceTypeRecord {
                name: format!("fake-it-{i}"),
                vcpus: n,
                memory_mib: 2048 * n as u64,
                architectures: vec!["x86_64".into()],
                hypervisor: "nitro".into(),
                bare_metal: false,
                current_generation: true,
                burstable: false,
                max_enis: 0,
                ipv4_per_eni: 0,
                gpu_count: 0,
                gpu_manufacturer: String::new(),
                gpu_name: String::new(),
                local_storage_gb: 0,
                max_pods: Some(10 * n),
                ..Default::default()
            };
            let od = 0.0425 * n as f64 + 0.0053 * 2.0 * n as f64;
            let mut offers = Vec::new();
            for z in BENCH_ZONES {
                offers.push(Offering {
                    zone: z.into(),
                    capacity_type: CapacityType::OnDemand,
                    price: od,
                    reservation: None,
                });
                if spot(i, z) {
                    offers.push(Offering {
                        zone: z.into(),
                        capacity_type: CapacityType::Spot,
                        price: joiner_agent::catalog::prices::spot_model(od, "m", z),
                        reservation: None,
                    });
                }
            }
            InstanceType::new(rec, offers, &settings)
        })
        .collect();
    Catalog::from_types(types)
}

const CPUS: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEMS: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];

fn selector(app: &str) -> Option<LabelSelector> {
    Some(LabelSelector::labels([("app", app)]))
}

/// Karpenter's benchmark pods: `count` pods in 5 equal groups, seeded.
pub fn karpenter_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let per = count / 5;
    let mut pods = Vec::with_capacity(count);
    let groups = [
        "plain",
        "zonal-spread",
        "host-spread",
        "zonal-affinity",
        "host-anti",
    ];
    for (gi, g) in groups.iter().enumerate() {
        let n = if gi == 4 { count - 4 * per } else { per };
        for k in 0..n {
            let mut p = Pod::new(
                "default",
                &format!("{g}-{k}"),
                rng.pick(&CPUS),
                rng.pick(&MEMS) * MI,
            );
            p.labels.insert("app".into(), g.to_string());
            match gi {
                1 | 2 => p.topology_spread.push(TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: if gi == 1 {
                        labels::ZONE
                    } else {
                        labels::HOSTNAME
                    }
                    .into(),
                    when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                    label_selector: selector(g),
                    min_domains: None,
                    ..Default::default()
                }),
                3 => p.pod_affinity.push(PodAffinityTerm {
                    label_selector: selector(g),
                    namespaces: vec![],
                    topology_key: labels::ZONE.into(),
                    ..Default::default()
                }),
                4 => p.pod_anti_affinity.push(PodAffinityTerm {
                    label_selector: selector(g),
                    namespaces: vec![],
                    topology_key: labels::HOSTNAME.into(),
                    ..Default::default()
                }),
                _ => {}
            }
            pods.push(p);
        }
    }
    pods
}

/// The seed workload: `count` replicas of 250m / 512Mi.
pub fn seed_pods(count: usize) -> Vec<Pod> {
    (0..count)
        .map(|k| {
            let mut p = Pod::new("default", &format!("inflate-{k}"), 250, 512 * MI);
            p.labels.insert("app".into(), "inflate".into());
            p
        })
        .collect()
}

/// A mixed workload: shapes of a typical service mix, seeded.
pub fn mixed_pods(count: usize, seed: u64) -> Vec<Pod> {
    // (cpu m, memory Mi, weight)
    const SHAPES: [(i64, i64, u64); 8] = [
        (100, 128, 20),
        (250, 512, 25),
        (500, 1024, 20),
        (1000, 2048, 12),
        (1000, 4096, 8),
        (2000, 4096, 8),
        (250, 2048, 5),
        (4000, 8192, 2),
    ];
    let total: u64 = SHAPES.iter().map(|s| s.2).sum();
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|k| {
            let mut x = rng.next_u64() % total;
            let mut shape = SHAPES[0];
            for s in SHAPES {
                if x < s.2 {
                    shape = s;
                    break;
                }
                x -= s.2;
            }
            let mut p = Pod::new("default", &format!("mixed-{k}"), shape.0, shape.1 * MI);
            p.labels.insert("app".into(), format!("svc-{}", k % 20));
            p
        })
        .collect()
}

/// A NodePool with these requirements and no limits.
pub fn node_pool(name: &str, requirements: Requirements) -> NodePoolInput {
    NodePoolInput {
        name: name.into(),
        weight: 0,
        node_class: "default".into(),
        labels: BTreeMap::new(),
        requirements,
        ..Default::default()
    }
}

/// The fractional lower bound in $/h: total requests priced at the cheapest $/vCPU and the
/// cheapest $/GiB among the types `pool` allows (prices as the pool would pay: Spot when
/// allowed), whichever binds.
pub fn lower_bound(catalog: &Catalog, pool: &NodePoolInput, pods: &[Pod]) -> f64 {
    let mut per_cpu = f64::INFINITY;
    let mut per_gib = f64::INFINITY;
    for t in catalog.filter(&pool.requirements) {
        let Some(price) = t.cheapest_price(&pool.requirements) else {
            continue;
        };
        per_cpu = per_cpu.min(price / t.record.vcpus as f64);
        per_gib = per_gib.min(price / (t.record.memory_mib as f64 / 1024.0));
    }
    let cpu: f64 = pods
        .iter()
        .map(|p| p.requests.cpu_milli as f64 / 1000.0)
        .sum();
    let gib: f64 = pods
        .iter()
        .map(|p| p.requests.memory_bytes as f64 / (1u64 << 30) as f64)
        .sum();
    (cpu * per_cpu).max(gib * per_gib)
}

/// Cost and utilisation of a plan's new claims, launching each on its cheapest candidate.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanQuality {
    pub nodes: usize,
    pub dollars_per_hour: f64,
    /// Pod requests / node capacity (vCPU and nominal memory as EC2 sells them).
    pub cpu_util_capacity: f64,
    pub mem_util_capacity: f64,
    /// Pod requests / allocatable (what the kubelet offers to pods).
    pub cpu_util_allocatable: f64,
    pub mem_util_allocatable: f64,
}

pub fn plan_quality(catalog: &Catalog, claims: &[NewNodeClaim], pods: &[Pod]) -> PlanQuality {
    let mut q = PlanQuality::default();
    let (mut cap, mut alloc, mut used) = (
        Resources::default(),
        Resources::default(),
        Resources::default(),
    );
    let mut nominal_mem = 0i64;
    for c in claims {
        let Some(first) = c.instance_types.first() else {
            continue;
        };
        let Some(it) = catalog.get(&first.instance_type) else {
            continue;
        };
        q.nodes += 1;
        q.dollars_per_hour += first.price;
        cap.add(&it.capacity);
        nominal_mem += it.record.memory_mib as i64 * MI;
        alloc.add(&it.allocatable);
        for &p in &c.pods {
            used.add(&pods[p].requests);
        }
    }
    let ratio = |a: i64, b: i64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    q.cpu_util_capacity = ratio(used.cpu_milli, cap.cpu_milli);
    q.mem_util_capacity = ratio(used.memory_bytes, nominal_mem);
    q.cpu_util_allocatable = ratio(used.cpu_milli, alloc.cpu_milli);
    q.mem_util_allocatable = ratio(used.memory_bytes, alloc.memory_bytes);
    q
}
