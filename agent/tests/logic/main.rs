//! The agent's pure logic, with no cluster and no emulator: the scheduler on generated and
//! scripted worlds (checked by `joiner_agent_world::checker`), disruption decisions, prices,
//! the CRDs generated from the Rust types, and the one creation path of capacity.

mod ami_variants;
mod crds;
mod disruption_decisions;
mod disruption_pricing;
mod max_pods_parity;
mod one_creation_path;
mod regional_prices;
mod scheduler_attach_limits;
mod scheduler_checked;
mod scheduler_domains;
mod scheduler_pricing;
mod scheduler_properties;
mod scheduler_scenarios;
