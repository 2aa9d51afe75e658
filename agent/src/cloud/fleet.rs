//! Launching one NodeClaim with CreateFleet type `instant`.
//!
//! The loop, per capacity type in the request's order (Spot first when allowed):
//! build up to 60 overrides (instance type × one subnet per allowed zone, cheapest type
//! first, offerings in the insufficient-capacity cache left out), call CreateFleet, and on
//! errors that say capacity is unavailable put what they refuse in the cache and go again
//! with what is left: the named offering, its subnet too when it has no free address, a
//! vCPU quota's whole family group, or Spot as a whole ([`super::fleet_error_scope`]).
//! When Spot has nothing left, on-demand is tried if allowed; when nothing is left at all
//! the error is `NoCandidatesLeft`, listing what was tried. Any other error code
//! (authorization, a bad parameter) fails the launch with it.
//!
//! Idempotency: the instance is found by its `joiner.dev/nodeclaim` tag before anything is
//! launched and before every retry, and the ClientToken is derived from the NodeClaim name
//! and the overrides (EC2 rejects a token reused with different parameters, and the
//! overrides change after an insufficient-capacity answer). The SDK's own retries are off
//! for CreateFleet: a retry inside the SDK could not look for the instance first, and an
//! emulator (or an API) that ignores the token would launch twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetReservationType, FleetType, InstanceLifecycle,
    InstanceType, OnDemandOptionsRequest, ReservedCapacityOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use sha2::{Digest, Sha256};

use super::aws::CloudResultExt;
use super::discovery::Subnet;
use super::ec2::Ec2Cloud;
use super::launch_template::{TemplateKey, TemplateRef};
use super::records::{RawCatalog, ResolvedAmis};
use super::{
    fleet_error_scope, CloudError, FleetErrorScope, Instance, LaunchRequest, Launched,
    TAG_NODECLAIM, TAG_NODEPOOL,
};
use crate::catalog::reservations::ReservationKind;
use crate::catalog::{CapacityType, InstanceTypeRecord};

/// EC2 takes at most this many overrides per instant fleet in our use (Karpenter's limit).
pub const MAX_OVERRIDES: usize = 60;

/// One offering put to CreateFleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    /// Index into the templates (one per image and max pods: the one the type launches
    /// with).
    pub template: usize,
    /// Its rank among the request's candidates (0 first): the override's `Priority` when
    /// the launch is prioritized (NodeOverlays changed the prices EC2 would go by).
    pub priority: usize,
}

/// The capacity part of a CreateFleet request.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetOptions {
    pub default_type: DefaultTargetCapacityType,
    pub spot: Option<SpotOptionsRequest>,
    pub on_demand: Option<OnDemandOptionsRequest>,
    pub reserved: Option<ReservedCapacityOptionsRequest>,
}

/// How CreateFleet is asked for one capacity type. Spot: price-capacity-optimized;
/// on-demand: lowest-price; with NodeOverlays repricing the candidates, the `prioritized`
/// variants, so EC2 follows the overlaid order instead of its own prices (as Karpenter
/// does). A reservation: on-demand capacity from templates that target it; a capacity
/// block asks for `capacity-block` capacity, an interruptible reservation for
/// `reserved-capacity` of type `interruptible-capacity-reservation` (Karpenter's mapping).
pub fn fleet_options(
    capacity: CapacityType,
    reservation: Option<&super::ReservedLaunch>,
    prioritized: bool,
) -> FleetOptions {
    let on_demand = || {
        OnDemandOptionsRequest::builder()
            .allocation_strategy(if prioritized {
                FleetOnDemandAllocationStrategy::Prioritized
            } else {
                FleetOnDemandAllocationStrategy::LowestPrice
            })
            .build()
    };
    match capacity {
        CapacityType::Spot => FleetOptions {
            default_type: DefaultTargetCapacityType::Spot,
            spot: Some(
                SpotOptionsRequest::builder()
                    .allocation_strategy(if prioritized {
                        SpotAllocationStrategy::CapacityOptimizedPrioritized
                    } else {
                        SpotAllocationStrategy::PriceCapacityOptimized
                    })
                    .build(),
            ),
            on_demand: None,
            reserved: None,
        },
        CapacityType::OnDemand => FleetOptions {
            default_type: DefaultTargetCapacityType::OnDemand,
            spot: None,
            on_demand: Some(on_demand()),
            reserved: None,
        },
        CapacityType::Reserved => match reservation.map(|r| (r.kind, r.interruptible)) {
            Some((ReservationKind::CapacityBlock, _)) => FleetOptions {
                default_type: DefaultTargetCapacityType::CapacityBlock,
                spot: None,
                on_demand: None,
                reserved: None,
            },
            Some((_, true)) => FleetOptions {
                default_type: DefaultTargetCapacityType::ReservedCapacity,
                spot: None,
                on_demand: None,
                reserved: Some(
                    ReservedCapacityOptionsRequest::builder()
                        .reservation_types(FleetReservationType::InterruptibleCapacityReservation)
                        .build(),
                ),
            },
            _ => FleetOptions {
                default_type: DefaultTargetCapacityType::OnDemand,
                spot: None,
                on_demand: Some(on_demand()),
                reserved: None,
            },
        },
    }
}

/// What one CreateFleet call gave.
enum FleetOutcome {
    Launched(Launched),
    /// Offerings that had no capacity: (type, zone, EC2 error code).
    NoCapacity(Vec<(String, String, String)>),
}

/// The ClientToken for a NodeClaim's attempt: same claim and overrides, same token.
pub fn client_token(
    nodeclaim: &str,
    capacity: CapacityType,
    overrides: &[PlannedOverride],
) -> String {
    let mut h = Sha256::new();
    h.update(nodeclaim.as_bytes());
    h.update([0]);
    h.update(capacity.as_str().as_bytes());
    for o in overrides {
        h.update([0]);
        h.update(o.instance_type.as_bytes());
        h.update([1]);
        h.update(o.subnet_id.as_bytes());
    }
    // 64 ASCII characters at most.
    format!("joiner-{}", &hex::encode(h.finalize())[..48])
}

/// The overrides for one capacity type: cheapest candidate first, each in every allowed zone
/// where `offered` says the type is sold that way (one subnet per zone, the one with most
/// free addresses), unavailable offerings left out. A candidate's own zones are those of its
/// cheapest capacity type, which is Spot when it has any: Spot's zones can be fewer than
/// on-demand's (no Spot market there), so the on-demand fallback looks at every allowed
/// zone, and Spot never at a zone or type without a market. `template_of` gives the
/// template of a type's image; a type without one is left out.
pub fn plan_overrides(
    request: &LaunchRequest,
    capacity: CapacityType,
    subnets: &[Subnet],
    template_of: impl Fn(&str) -> Option<usize>,
    offered: impl Fn(CapacityType, &str, &str) -> bool,
    unavailable: impl Fn(CapacityType, &str, &str) -> bool,
) -> Vec<PlannedOverride> {
    // Subnets come sorted by zone, most free addresses first.
    let mut subnet_by_zone: BTreeMap<&str, &str> = BTreeMap::new();
    for s in subnets {
        subnet_by_zone.entry(&s.zone).or_insert(&s.id);
    }
    let allowed_zones: BTreeSet<&str> = request.zones.iter().map(String::as_str).collect();
    let mut candidates: Vec<_> = request.candidates.iter().collect();
    // On-demand fallback orders by on-demand price, which may differ from the Spot order.
    if capacity == CapacityType::OnDemand {
        let od = |c: &crate::scheduler::Candidate| {
            request
                .on_demand_prices
                .get(&c.instance_type)
                .copied()
                .unwrap_or(c.price)
        };
        candidates.sort_by(|a, b| od(a).total_cmp(&od(b)));
    }
    let mut out = Vec::new();
    for (rank, c) in candidates.into_iter().enumerate() {
        if (capacity == CapacityType::Reserved) != (c.capacity_type == CapacityType::Reserved) {
            continue;
        }
        let Some(template) = template_of(&c.instance_type) else {
            continue;
        };
        // A reservation is in its own zone; the market is wherever the claim allows.
        let zones = if capacity == CapacityType::Reserved || request.zones.is_empty() {
            &c.zones
        } else {
            &request.zones
        };
        for zone in zones {
            if !allowed_zones.is_empty() && !allowed_zones.contains(zone.as_str()) {
                continue;
            }
            let Some(subnet) = subnet_by_zone.get(zone.as_str()) else {
                continue;
            };
            if !offered(capacity, &c.instance_type, zone)
                || unavailable(capacity, &c.instance_type, zone)
            {
                continue;
            }
            out.push(PlannedOverride {
                instance_type: c.instance_type.clone(),
                zone: zone.clone(),
                subnet_id: subnet.to_string(),
                template,
                priority: rank,
            });
            if out.len() == MAX_OVERRIDES {
                return out;
            }
        }
    }
    out
}

pub(crate) fn launched_from(i: &Instance) -> Launched {
    Launched {
        instance_id: i.instance_id.clone(),
        provider_id: i.provider_id.clone(),
        instance_type: i.instance_type.clone(),
        zone: i.zone.clone(),
        capacity_type: i.capacity_type,
        image_id: i.image_id.clone(),
    }
}

/// What a launch knows before it tries any capacity type: the catalogue's records and
/// offerings, and the launch template each candidate needs.
struct LaunchPlan<'a> {
    raw: &'a RawCatalog,
    amis: &'a ResolvedAmis,
    records: BTreeMap<&'a str, &'a InstanceTypeRecord>,
    sold_in: BTreeSet<(&'a str, &'a str)>,
    /// Per candidate type, what its template must say: the image it launches from (its
    /// architecture's, and for an alias the variant a GPU or Neuron type needs) and its
    /// kubelet's max pods, the figure the scheduler packed against (Karpenter's
    /// `amifamily/resolver.go` groups its templates the same way).
    key_of: BTreeMap<&'a str, TemplateKey<'a>>,
    /// The distinct template keys: one template each.
    needed: Vec<TemplateKey<'a>>,
}

impl<'a> LaunchPlan<'a> {
    fn new(request: &'a LaunchRequest, raw: &'a RawCatalog, amis: &'a ResolvedAmis) -> Self {
        // Only the claim's candidates are ever asked about. Indexed over the whole
        // catalogue, these maps were 5.9 MB of the agent's peak heap in a scale-out of
        // 1,100 pods, where up to 64 launches run at once.
        let wanted: BTreeSet<&str> = request
            .candidates
            .iter()
            .map(|c| c.instance_type.as_str())
            .collect();
        let records: BTreeMap<&str, &InstanceTypeRecord> = raw
            .records
            .iter()
            .filter(|r| wanted.contains(r.name.as_str()))
            .map(|r| (r.name.as_str(), r))
            .collect();
        let sold_in = raw
            .offerings
            .iter()
            .filter(|o| wanted.contains(o.instance_type.as_str()))
            .map(|o| (o.instance_type.as_str(), o.zone.as_str()))
            .collect();
        let settings = request.node_class.spec.kubelet_settings();
        let key_of: BTreeMap<&str, TemplateKey<'_>> = request
            .candidates
            .iter()
            .filter_map(|c| {
                let r = records.get(c.instance_type.as_str())?;
                let key = TemplateKey {
                    image: amis.image_for(r)?,
                    max_pods: r.kubelet_max_pods(&settings),
                };
                Some((c.instance_type.as_str(), key))
            })
            .collect();
        let needed = key_of
            .values()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        LaunchPlan {
            raw,
            amis,
            records,
            sold_in,
            key_of,
            needed,
        }
    }

    /// What the catalogue offers (`Catalog::from_records`), asked again here because a
    /// candidate carries only the zones of its cheapest capacity type.
    fn offered(&self, ct: CapacityType, t: &str, z: &str) -> bool {
        match ct {
            CapacityType::Reserved => true,
            CapacityType::OnDemand => self.sold_in.contains(&(t, z)),
            CapacityType::Spot => {
                self.sold_in.contains(&(t, z))
                    && self
                        .records
                        .get(t)
                        .is_some_and(|r| self.raw.spot.price(r, z, 0.0).is_some())
            }
        }
    }

    /// The index in [`Self::needed`] of the template a type launches with.
    fn template_of(&self, t: &str) -> Option<usize> {
        let key = self.key_of.get(t)?;
        self.needed.iter().position(|k| k == key)
    }

    /// Templates only for what these overrides launch with (the candidates past the
    /// fleet's override limit need none): their keys, with each override's template
    /// renumbered to index them.
    fn templates_used(&self, overrides: &mut [PlannedOverride]) -> Vec<TemplateKey<'a>> {
        let used: Vec<usize> = overrides
            .iter()
            .map(|o| o.template)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for o in overrides.iter_mut() {
            o.template = used.iter().position(|i| *i == o.template).unwrap_or(0);
        }
        used.iter().map(|i| self.needed[*i]).collect()
    }
}

/// What the capacity types tried so far left behind.
struct Attempts {
    /// Each refused offering, as `capacity:type:zone (code)`.
    tried: Vec<String>,
    /// Whether a template pruned under the launch may still be made again (once).
    template_retry: bool,
}

impl Ec2Cloud {
    pub(crate) async fn launch_nodeclaim(
        &self,
        request: &LaunchRequest,
    ) -> Result<Launched, CloudError> {
        if let Some(i) = self.nodeclaim_instance(&request.nodeclaim).await? {
            return Ok(launched_from(&i));
        }
        let subnets = self.subnets_for(&request.node_class).await?;
        if subnets.is_empty() {
            return Err(CloudError::new(
                "ec2:DescribeSubnets",
                "NoSubnetFound",
                format!(
                    "NodeClass {}: no subnet with free addresses matches its subnetSelectorTerms",
                    request.node_class.metadata.name.as_deref().unwrap_or("")
                ),
            ));
        }
        let amis = self.amis_for(&request.node_class).await?;
        let raw = self.raw_catalog().await?;
        let plan = LaunchPlan::new(request, &raw.value, &amis);
        let mut attempts = Attempts {
            tried: Vec::new(),
            template_retry: true,
        };
        for &capacity in &request.capacity_types {
            let launched = self
                .launch_as(request, capacity, &subnets, &plan, &mut attempts)
                .await?;
            if let Some(l) = launched {
                return Ok(l);
            }
        }
        Err(self.no_candidates_left(request, &attempts.tried))
    }

    /// Tries one capacity type until it launches or has no offering left (None).
    async fn launch_as(
        &self,
        request: &LaunchRequest,
        capacity: CapacityType,
        subnets: &[Subnet],
        plan: &LaunchPlan<'_>,
        attempts: &mut Attempts,
    ) -> Result<Option<Launched>, CloudError> {
        // A reserved launch goes through templates that target its reservation.
        let reservation = match capacity {
            CapacityType::Reserved => match &request.reservation {
                Some(r) => Some(r),
                None => return Ok(None),
            },
            _ => None,
        };
        loop {
            // A subnet that ran out of addresses is passed over for the next of its
            // zone; a zone with none left is not asked.
            let usable: Vec<Subnet> = subnets
                .iter()
                .filter(|s| !self.ice.subnet_unavailable(&s.id))
                .cloned()
                .collect();
            let mut overrides = plan_overrides(
                request,
                capacity,
                &usable,
                |t| plan.template_of(t),
                |ct, t, z| plan.offered(ct, t, z),
                |ct, t, z| self.ice.contains(ct, t, z),
            );
            if overrides.is_empty() {
                return Ok(None);
            }
            let keys = plan.templates_used(&mut overrides);
            let templates = self
                .ensure_templates(request, (plan.amis.family, &keys), capacity, reservation)
                .await?;
            let outcome = self
                .create_fleet(request, capacity, &overrides, &templates)
                .await;
            if capacity == CapacityType::Reserved {
                // The reservation's count moved (or it refused): ask EC2 again.
                self.forget_reservations();
            }
            match outcome {
                Ok(FleetOutcome::Launched(l)) => return Ok(Some(l)),
                Ok(FleetOutcome::NoCapacity(failed)) => {
                    for (t, z, code) in &failed {
                        attempts
                            .tried
                            .push(format!("{}:{t}:{z} ({code})", capacity.as_str()));
                    }
                }
                // A template pruned under us: make it again (on the next turn), once.
                Err(e) if attempts.template_retry && e.code.contains("LaunchTemplate") => {
                    attempts.template_retry = false;
                    for t in &templates {
                        self.forget_template(&t.id);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Why a launch found no capacity: what each capacity type was refused this launch, and
    /// how many offerings the insufficient-capacity cache kept out.
    fn no_candidates_left(&self, request: &LaunchRequest, tried: &[String]) -> CloudError {
        let excluded = request
            .candidates
            .iter()
            .flat_map(|c| c.zones.iter().map(move |z| (c, z)))
            .filter(|(c, z)| {
                request
                    .capacity_types
                    .iter()
                    .any(|ct| self.ice.contains(*ct, &c.instance_type, z))
            })
            .count();
        CloudError::new(
            "ec2:CreateFleet",
            "NoCandidatesLeft",
            format!(
                "NodeClaim {}: no capacity left for capacity types [{}] among {} instance types in zones [{}]; \
                 insufficient capacity this launch: [{}]; {} offerings excluded by the insufficient-capacity cache",
                request.nodeclaim,
                request
                    .capacity_types
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                request.candidates.len(),
                request.zones.join(", "),
                tried.join(", "),
                excluded,
            ),
        )
    }

    /// One CreateFleet with our own retry loop (see the module docs).
    async fn create_fleet(
        &self,
        request: &LaunchRequest,
        capacity: CapacityType,
        overrides: &[PlannedOverride],
        templates: &[TemplateRef],
    ) -> Result<FleetOutcome, CloudError> {
        let token = client_token(&request.nodeclaim, capacity, overrides);
        let configs = template_configs(request, overrides, templates);
        let tag_specs = self.tag_specs(request);
        let options = fleet_options(capacity, request.reservation.as_ref(), request.prioritized);

        let attempts = self.options.launch_attempts.max(1);
        let mut backoff = self.options.launch_backoff;
        let mut last_err = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(jitter(backoff)).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                // The previous attempt may have launched before its answer was lost.
                if let Some(i) = self.nodeclaim_instance(&request.nodeclaim).await? {
                    return Ok(FleetOutcome::Launched(launched_from(&i)));
                }
            }
            let sent = self
                .ec2
                .create_fleet()
                .r#type(FleetType::Instant)
                .client_token(&token)
                .set_launch_template_configs(Some(configs.clone()))
                .target_capacity_specification(
                    TargetCapacitySpecificationRequest::builder()
                        .total_target_capacity(1)
                        .default_target_capacity_type(options.default_type.clone())
                        .build(),
                )
                .set_spot_options(options.spot.clone())
                .set_on_demand_options(options.on_demand.clone())
                .set_reserved_capacity_options(options.reserved.clone())
                .set_tag_specifications(Some(tag_specs.clone()))
                .customize()
                .config_override(
                    aws_sdk_ec2::config::Config::builder().retry_config(RetryConfig::disabled()),
                )
                .send()
                .await
                .cloud("ec2:CreateFleet");
            let out = match sent {
                Ok(out) => out,
                Err(e) if e.is_transient() => {
                    tracing::debug!(nodeclaim = %request.nodeclaim, error = %e, attempt, "CreateFleet will be retried");
                    last_err = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Errors first: a partial answer may carry both an instance and errors for the
            // overrides tried before it.
            let (no_capacity, other) = self.fleet_errors(&out, request, capacity, overrides);
            let launched = launched_instance(&out, capacity, overrides, templates);
            if let Some(mut l) = launched {
                if l.zone.is_empty() {
                    // Not in the answer: ask for the instance itself.
                    if let Some(i) = self.nodeclaim_instance(&request.nodeclaim).await? {
                        l.zone = i.zone.clone();
                        l.provider_id = i.provider_id.clone();
                    }
                }
                return Ok(FleetOutcome::Launched(l));
            }
            if let Some(e) = other {
                return Err(e);
            }
            if no_capacity.is_empty() {
                return Err(CloudError::new(
                    "ec2:CreateFleet",
                    "NoInstanceLaunched",
                    format!(
                        "NodeClaim {}: CreateFleet answered with neither an instance nor an error",
                        request.nodeclaim
                    ),
                ));
            }
            return Ok(FleetOutcome::NoCapacity(no_capacity));
        }
        Err(last_err.unwrap_or_else(|| {
            CloudError::new("ec2:CreateFleet", "Unknown", "no attempt was made")
        }))
    }

    /// The tags of everything one launch creates: the instance, its volumes, the fleet.
    fn tag_specs(&self, request: &LaunchRequest) -> Vec<TagSpecification> {
        let tags = self.launch_tags(request);
        [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .into_iter()
        .map(|r| {
            TagSpecification::builder()
                .resource_type(r)
                .set_tags(Some(tags.clone()))
                .build()
        })
        .collect()
    }

    /// What an answer's errors say: the offerings refused for capacity (each put into the
    /// insufficient-capacity cache) with their codes, and the first other error.
    fn fleet_errors(
        &self,
        out: &CreateFleetOutput,
        request: &LaunchRequest,
        capacity: CapacityType,
        overrides: &[PlannedOverride],
    ) -> (Vec<(String, String, String)>, Option<CloudError>) {
        let mut no_capacity = Vec::new();
        let mut other = None;
        for err in out.errors() {
            let code = err.error_code().unwrap_or("Unknown");
            let ov = err
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            let it = ov
                .and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_string());
            let zone = ov
                .and_then(|o| o.availability_zone())
                .map(str::to_string)
                .or_else(|| {
                    let subnet = ov.and_then(|o| o.subnet_id())?;
                    overrides
                        .iter()
                        .find(|p| p.subnet_id == subnet)
                        .map(|p| p.zone.clone())
                });
            let scope = fleet_error_scope(code);
            if scope == FleetErrorScope::Other {
                if other.is_none() {
                    other = Some(CloudError::new(
                        "ec2:CreateFleet",
                        code,
                        err.error_message().unwrap_or_default(),
                    ));
                }
                continue;
            }
            // The offerings the item names: its override, or every override of the
            // request when it names none.
            let named: Vec<(String, String)> = match (it, zone) {
                (Some(t), Some(z)) => vec![(t, z)],
                _ => overrides
                    .iter()
                    .map(|o| (o.instance_type.clone(), o.zone.clone()))
                    .collect(),
            };
            for (t, z) in named {
                self.mark_unavailable_for(capacity, scope, &t, &z, ov, overrides);
                no_capacity.push((t, z, code.to_string()));
            }
            if scope != FleetErrorScope::Offering {
                tracing::warn!(
                    nodeclaim = %request.nodeclaim,
                    code,
                    message = err.error_message().unwrap_or_default(),
                    capacity_type = capacity.as_str(),
                    "CreateFleet refused more than one offering; the rest is tried"
                );
            }
        }
        (no_capacity, other)
    }

    /// Puts what one CreateFleet error item refused into the insufficient-capacity cache.
    /// A reservation's refusal is its offering's alone (the reservation is full), as in
    /// Karpenter, whatever the code.
    fn mark_unavailable_for(
        &self,
        capacity: CapacityType,
        scope: FleetErrorScope,
        instance_type: &str,
        zone: &str,
        named: Option<&aws_sdk_ec2::types::FleetLaunchTemplateOverrides>,
        overrides: &[PlannedOverride],
    ) {
        if capacity == CapacityType::Reserved {
            self.ice.insert(capacity, instance_type, zone);
            return;
        }
        match scope {
            FleetErrorScope::Offering | FleetErrorScope::Other => {
                self.ice.insert(capacity, instance_type, zone)
            }
            FleetErrorScope::Subnet => {
                self.ice.insert(capacity, instance_type, zone);
                let subnet = named
                    .and_then(|o| o.subnet_id())
                    .map(str::to_string)
                    .or_else(|| {
                        overrides
                            .iter()
                            .find(|p| p.instance_type == instance_type && p.zone == zone)
                            .map(|p| p.subnet_id.clone())
                    });
                if let Some(s) = subnet {
                    self.ice.insert_subnet(&s);
                }
            }
            FleetErrorScope::QuotaGroup => self.ice.insert_quota_group(capacity, instance_type),
            // The service-linked role is Spot's, whichever capacity type was asked.
            FleetErrorScope::CapacityType => self.ice.insert_capacity_type(CapacityType::Spot),
        }
    }

    /// The NodeClass's tags, then ours (which win).
    pub(crate) fn launch_tags(&self, request: &LaunchRequest) -> Vec<Tag> {
        let mut tags: BTreeMap<&str, &str> = request
            .node_class
            .spec
            .tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let owner = crate::api::tags::ownership(&self.options.cluster_name);
        for (k, v) in &owner {
            tags.insert(k, v);
        }
        tags.insert(TAG_NODEPOOL, &request.nodepool);
        tags.insert(TAG_NODECLAIM, &request.nodeclaim);
        let name = format!("{}/{}", self.options.cluster_name, request.nodeclaim);
        tags.entry("Name").or_insert(&name);
        tags.into_iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect()
    }
}

/// Full jitter: uniformly between half the backoff and all of it.
fn jitter(d: Duration) -> Duration {
    let f: f64 = rand::random::<f64>() * 0.5 + 0.5;
    d.mul_f64(f)
}

/// One launch template config per template, with the overrides that launch from it.
fn template_configs(
    request: &LaunchRequest,
    overrides: &[PlannedOverride],
    templates: &[TemplateRef],
) -> Vec<FleetLaunchTemplateConfigRequest> {
    let mut configs = Vec::new();
    for (i, t) in templates.iter().enumerate() {
        let ov: Vec<FleetLaunchTemplateOverridesRequest> = overrides
            .iter()
            .filter(|o| o.template == i)
            .map(|o| {
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(InstanceType::from(o.instance_type.as_str()))
                    .subnet_id(&o.subnet_id)
                    // Redundant with the subnet, but it comes back in errors, so the
                    // zone of an insufficient-capacity error is known without a lookup.
                    .availability_zone(&o.zone)
                    .image_id(&t.image_id)
                    .set_priority(request.prioritized.then_some(o.priority as f64))
                    .build()
            })
            .collect();
        if ov.is_empty() {
            continue;
        }
        configs.push(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_id(&t.id)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(ov))
                .build(),
        );
    }
    configs
}

/// The instance an answer launched, if any, as far as the answer tells it.
fn launched_instance(
    out: &CreateFleetOutput,
    capacity: CapacityType,
    overrides: &[PlannedOverride],
    templates: &[TemplateRef],
) -> Option<Launched> {
    out.instances().iter().find_map(|i| {
        let id = i.instance_ids().first()?;
        let lt = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let instance_type = i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .or_else(|| {
                lt.and_then(|o| o.instance_type())
                    .map(|t| t.as_str().to_string())
            })
            .unwrap_or_default();
        let zone = i
            .availability_zone()
            .or_else(|| lt.and_then(|o| o.availability_zone()))
            .map(str::to_string)
            .or_else(|| {
                let subnet = i.subnet_id().or_else(|| lt.and_then(|o| o.subnet_id()))?;
                overrides
                    .iter()
                    .find(|p| p.subnet_id == subnet)
                    .map(|p| p.zone.clone())
            })
            .unwrap_or_default();
        let image_id = lt
            .and_then(|o| o.image_id())
            .map(str::to_string)
            .unwrap_or_else(|| templates[0].image_id.clone());
        let capacity_type = match i.lifecycle() {
            _ if capacity == CapacityType::Reserved => CapacityType::Reserved,
            Some(InstanceLifecycle::Spot) => CapacityType::Spot,
            Some(_) => CapacityType::OnDemand,
            None => capacity,
        };
        Some(Launched {
            instance_id: id.clone(),
            provider_id: format!("aws:///{zone}/{id}"),
            instance_type,
            zone,
            capacity_type,
            image_id,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeClass;
    use crate::scheduler::Candidate;

    fn request() -> LaunchRequest {
        let cand = |t: &str, p: f64| Candidate {
            instance_type: t.into(),
            price: p,
            capacity_type: CapacityType::Spot,
            zones: vec!["us-east-1a".into(), "us-east-1b".into()],
        };
        LaunchRequest {
            nodeclaim: "general-abcde".into(),
            nodepool: "general".into(),
            node_class: NodeClass::new("default", Default::default()),
            candidates: vec![cand("c5.large", 0.03), cand("m5.large", 0.034)],
            capacity_types: vec![CapacityType::Spot, CapacityType::OnDemand],
            zones: vec!["us-east-1a".into(), "us-east-1b".into()],
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            reservation: None,
            prioritized: false,
            on_demand_prices: Default::default(),
        }
    }

    fn subnets() -> Vec<Subnet> {
        let s = |id: &str, zone: &str, ips: i32| Subnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
            available_ips: ips,
        };
        vec![
            s("subnet-a1", "us-east-1a", 200),
            s("subnet-a2", "us-east-1a", 10),
            s("subnet-b", "us-east-1b", 5),
        ]
    }

    #[test]
    fn overrides_are_type_by_zone_cheapest_first_without_unavailable_ones() {
        let r = request();
        let o = plan_overrides(
            &r,
            CapacityType::Spot,
            &subnets(),
            |_| Some(0),
            |_, _, _| true,
            |ct, t, z| ct == CapacityType::Spot && t == "c5.large" && z == "us-east-1a",
        );
        let got: Vec<(&str, &str, &str)> = o
            .iter()
            .map(|o| {
                (
                    o.instance_type.as_str(),
                    o.zone.as_str(),
                    o.subnet_id.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("c5.large", "us-east-1b", "subnet-b"),
                ("m5.large", "us-east-1a", "subnet-a1"),
                ("m5.large", "us-east-1b", "subnet-b"),
            ]
        );
        // Types without an image are left out.
        let none = plan_overrides(
            &r,
            CapacityType::Spot,
            &subnets(),
            |_| None,
            |_, _, _| true,
            |_, _, _| false,
        );
        assert!(none.is_empty());
    }

    /// An alias admitting ordinary, GPU and Neuron types: each override goes through the
    /// template of its own type's image, never the standard image for an accelerated type.
    #[test]
    fn each_type_launches_from_its_own_variant() {
        use crate::cloud::ami::{AmiVariant, ResolvedAmis, ResolvedImage};
        let image = |id: &str, v: AmiVariant| ResolvedImage {
            id: id.into(),
            arch: "x86_64".into(),
            variants: Some(vec![v]),
        };
        let amis = ResolvedAmis {
            family: crate::cloud::user_data::AmiFamily::Al2023,
            images: vec![
                image("ami-standard", AmiVariant::Standard),
                image("ami-nvidia", AmiVariant::Nvidia),
                image("ami-neuron", AmiVariant::Neuron),
            ],
        };
        let record = |name: &str, gpus: u32, neurons: u64| InstanceTypeRecord {
            name: name.into(),
            architectures: vec!["x86_64".into()],
            gpu_count: gpus,
            accelerator_count: neurons,
            ..Default::default()
        };
        let records = [
            record("c5.large", 0, 0),
            record("g4dn.xlarge", 1, 0),
            record("inf2.xlarge", 0, 1),
        ];
        let mut r = request();
        r.zones = vec!["us-east-1a".into()];
        r.candidates = records
            .iter()
            .enumerate()
            .map(|(i, rec)| Candidate {
                instance_type: rec.name.clone(),
                price: i as f64,
                capacity_type: CapacityType::Spot,
                zones: vec!["us-east-1a".into()],
            })
            .collect();
        // Templates in the order of the images, as `ensure_templates` returns them.
        let template_ids = ["ami-standard", "ami-nvidia", "ami-neuron"];
        let template_of = |t: &str| {
            let rec = records.iter().find(|r| r.name == t)?;
            let id = &amis.image_for(rec)?.id;
            template_ids.iter().position(|i| i == id)
        };
        let o = plan_overrides(
            &r,
            CapacityType::Spot,
            &subnets(),
            template_of,
            |_, _, _| true,
            |_, _, _| false,
        );
        let got: Vec<(&str, &str)> = o
            .iter()
            .map(|o| (o.instance_type.as_str(), template_ids[o.template]))
            .collect();
        assert_eq!(
            got,
            [
                ("c5.large", "ami-standard"),
                ("g4dn.xlarge", "ami-nvidia"),
                ("inf2.xlarge", "ami-neuron")
            ]
        );
    }

    /// A candidate's zones are its Spot zones when it has any; on-demand is sold in more.
    /// Spot is never asked where there is no market, on-demand is asked everywhere allowed.
    #[test]
    fn spot_only_where_offered_and_on_demand_in_every_allowed_zone() {
        let mut r = request();
        // m5.large has a Spot market in us-east-1a only; c5.large none at all (its cheapest
        // capacity type is on-demand).
        r.candidates[1].zones = vec!["us-east-1a".into()];
        r.candidates[0].capacity_type = CapacityType::OnDemand;
        let spot_market = |t: &str, z: &str| t == "m5.large" && z == "us-east-1a";
        let plan = |ct| {
            plan_overrides(
                &r,
                ct,
                &subnets(),
                |_| Some(0),
                |ct, t, z| ct != CapacityType::Spot || spot_market(t, z),
                |_, _, _| false,
            )
            .into_iter()
            .map(|o| format!("{}/{}", o.instance_type, o.zone))
            .collect::<Vec<_>>()
        };
        assert_eq!(plan(CapacityType::Spot), ["m5.large/us-east-1a"]);
        assert_eq!(
            plan(CapacityType::OnDemand),
            [
                "c5.large/us-east-1a",
                "c5.large/us-east-1b",
                "m5.large/us-east-1a",
                "m5.large/us-east-1b"
            ]
        );
    }

    #[test]
    fn at_most_sixty_overrides() {
        let mut r = request();
        r.candidates = (0..100)
            .map(|i| Candidate {
                instance_type: format!("t{i}.large"),
                price: i as f64,
                capacity_type: CapacityType::Spot,
                zones: vec!["us-east-1a".into()],
            })
            .collect();
        let o = plan_overrides(
            &r,
            CapacityType::Spot,
            &subnets(),
            |_| Some(0),
            |_, _, _| true,
            |_, _, _| false,
        );
        assert_eq!(o.len(), MAX_OVERRIDES);
        assert_eq!(o[0].instance_type, "t0.large");
    }

    #[test]
    fn capacity_types_ask_fleet_as_karpenter_does() {
        use crate::cloud::ReservedLaunch;
        let spot = fleet_options(CapacityType::Spot, None, false);
        assert_eq!(spot.default_type, DefaultTargetCapacityType::Spot);
        assert_eq!(
            spot.spot.unwrap().allocation_strategy(),
            Some(&SpotAllocationStrategy::PriceCapacityOptimized)
        );
        // NodeOverlays changed the prices: EC2 must follow the candidates' order.
        let spot = fleet_options(CapacityType::Spot, None, true);
        assert_eq!(
            spot.spot.unwrap().allocation_strategy(),
            Some(&SpotAllocationStrategy::CapacityOptimizedPrioritized)
        );
        let od = fleet_options(CapacityType::OnDemand, None, true);
        assert_eq!(
            od.on_demand.unwrap().allocation_strategy(),
            Some(&FleetOnDemandAllocationStrategy::Prioritized)
        );
        let r = |kind, interruptible| ReservedLaunch {
            id: "cr-1".into(),
            kind,
            interruptible,
        };
        let odcr = fleet_options(
            CapacityType::Reserved,
            Some(&r(ReservationKind::Default, false)),
            false,
        );
        assert_eq!(odcr.default_type, DefaultTargetCapacityType::OnDemand);
        assert!(odcr.on_demand.is_some() && odcr.reserved.is_none());
        let block = fleet_options(
            CapacityType::Reserved,
            Some(&r(ReservationKind::CapacityBlock, false)),
            false,
        );
        assert_eq!(block.default_type, DefaultTargetCapacityType::CapacityBlock);
        assert!(block.on_demand.is_none() && block.spot.is_none());
        let iodcr = fleet_options(
            CapacityType::Reserved,
            Some(&r(ReservationKind::Default, true)),
            false,
        );
        assert_eq!(
            iodcr.default_type,
            DefaultTargetCapacityType::ReservedCapacity
        );
        assert_eq!(
            iodcr.reserved.unwrap().reservation_types(),
            [FleetReservationType::InterruptibleCapacityReservation]
        );
    }

    #[test]
    fn a_reserved_launch_takes_only_reserved_candidates_and_ranks_by_order() {
        let mut r = request();
        r.candidates.insert(
            0,
            Candidate {
                instance_type: "m5.xlarge".into(),
                price: 0.0000001,
                capacity_type: CapacityType::Reserved,
                zones: vec!["us-east-1a".into()],
            },
        );
        let plan = |ct| {
            plan_overrides(
                &r,
                ct,
                &subnets(),
                |_| Some(0),
                |_, _, _| true,
                |_, _, _| false,
            )
        };
        let reserved = plan(CapacityType::Reserved);
        assert_eq!(reserved.len(), 1);
        assert_eq!(reserved[0].instance_type, "m5.xlarge");
        let spot = plan(CapacityType::Spot);
        assert!(spot.iter().all(|o| o.instance_type != "m5.xlarge"));
        assert_eq!(
            spot.iter().map(|o| o.priority).collect::<Vec<_>>(),
            [1, 1, 2, 2],
            "ranks follow the candidates"
        );
    }

    #[test]
    fn client_tokens_are_stable_and_change_with_the_overrides() {
        let o = vec![PlannedOverride {
            instance_type: "c5.large".into(),
            zone: "us-east-1a".into(),
            subnet_id: "subnet-a1".into(),
            template: 0,
            priority: 0,
        }];
        let a = client_token("claim-1", CapacityType::Spot, &o);
        assert_eq!(a, client_token("claim-1", CapacityType::Spot, &o));
        assert!(a.len() <= 64);
        assert_ne!(a, client_token("claim-2", CapacityType::Spot, &o));
        assert_ne!(a, client_token("claim-1", CapacityType::OnDemand, &o));
        assert_ne!(a, client_token("claim-1", CapacityType::Spot, &o[..0]));
    }
}
