//! The NodeOverlays in force: those that validate, parsed. They change prices and extended
//! resources in the catalogue every loop reads ([`apply`]): the scheduling input's round
//! (provisioning's, and consolidation's, which simulates with it) and the launch (which
//! orders CreateFleet by the overlaid prices).

use kube::ResourceExt;

use super::state::ClusterState;
use crate::api::node_overlay::validate;
use crate::catalog::overlay::{self, Overlay};
use crate::catalog::Catalog;

/// The overlays that validate, parsed (the others change nothing).
pub fn active(state: &ClusterState) -> Vec<Overlay> {
    state
        .node_overlays
        .list()
        .iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter(|o| validate(&o.spec, "spec").is_empty())
        .map(|o| Overlay::from_spec(&o.name_any(), &o.spec))
        .collect()
}

/// `catalog` as the overlays in the cluster price it.
pub fn apply(state: &ClusterState, catalog: &Catalog) -> Catalog {
    let overlays = active(state);
    overlay::apply(catalog, &overlays)
}
