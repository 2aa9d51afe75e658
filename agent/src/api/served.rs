//! Which API the agent serves: its own (`joiner.dev/v1`) or Karpenter's (`karpenter.sh/v1`
//! NodePools and NodeClaims, `karpenter.sh/v1alpha1` NodeOverlays, and
//! `karpenter.k8s.aws/v1` EC2NodeClasses, or `karpenter.kwok.sh/v1alpha1` KWOKNodeClasses
//! with the KWOK cloud).
//!
//! The objects have one shape and one meaning whichever group serves them: joiner's types
//! follow Karpenter v1's field for field, so the group is a parameter of where they are
//! read and written, never a second set of types. What differs besides the group are the
//! names Karpenter's users and tools see on the objects: the termination finalizer, the
//! drift hash annotations and the startup taint of a node that has not registered. Those
//! are Karpenter's under Karpenter's API, so that a cluster moved from Karpenter's
//! controller to joiner's agent (or back) reads the same.

use kube::core::ApiResource;

use super::{NodeClassReference, GROUP, VERSION};

/// The API the agent reconciles (`--api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ApiFlavor {
    /// `joiner.dev/v1` NodePools, NodeClaims, NodeClasses and NodeOverlays.
    #[default]
    Joiner,
    /// Karpenter's groups: existing Karpenter manifests served unchanged.
    Karpenter,
}

/// Where the NodeClasses come from: joiner's `NodeClass`, or under Karpenter's API the
/// cloud's own class kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassCloud {
    Ec2,
    Kwok,
}

/// The served API's resources and names, handed to every place that reads or writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub flavor: ApiFlavor,
    pub cloud: ClassCloud,
}

impl Default for Served {
    fn default() -> Self {
        Served::joiner()
    }
}

const KARPENTER: &str = "karpenter.sh";

/// The NodeClass kinds a NodePool may name, as (group, kind): joiner's, and Karpenter's for
/// AWS and for KWOK. Which one an agent serves is [`Served::node_classes`]; a pool naming
/// another is valid but not served (its status says so).
pub const CLASS_KINDS: [(&str, &str); 3] = [
    (GROUP, "NodeClass"),
    ("karpenter.k8s.aws", "EC2NodeClass"),
    ("karpenter.kwok.sh", "KWOKNodeClass"),
];

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

impl Served {
    pub fn joiner() -> Served {
        Served {
            flavor: ApiFlavor::Joiner,
            cloud: ClassCloud::Ec2,
        }
    }

    pub fn new(flavor: ApiFlavor, cloud: ClassCloud) -> Served {
        Served { flavor, cloud }
    }

    pub fn is_karpenter(&self) -> bool {
        self.flavor == ApiFlavor::Karpenter
    }

    fn pool_group(&self) -> &'static str {
        match self.flavor {
            ApiFlavor::Joiner => GROUP,
            ApiFlavor::Karpenter => KARPENTER,
        }
    }

    pub fn node_pools(&self) -> ApiResource {
        resource(self.pool_group(), VERSION, "NodePool", "nodepools")
    }

    pub fn node_claims(&self) -> ApiResource {
        resource(self.pool_group(), VERSION, "NodeClaim", "nodeclaims")
    }

    /// Karpenter's NodeOverlay is still `v1alpha1` (Karpenter v1.7 on).
    pub fn node_overlays(&self) -> ApiResource {
        match self.flavor {
            ApiFlavor::Joiner => resource(GROUP, VERSION, "NodeOverlay", "nodeoverlays"),
            ApiFlavor::Karpenter => resource(KARPENTER, "v1alpha1", "NodeOverlay", "nodeoverlays"),
        }
    }

    pub fn node_classes(&self) -> ApiResource {
        match (self.flavor, self.cloud) {
            (ApiFlavor::Joiner, _) => resource(GROUP, VERSION, "NodeClass", "nodeclasses"),
            (ApiFlavor::Karpenter, ClassCloud::Ec2) => {
                resource("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses")
            }
            (ApiFlavor::Karpenter, ClassCloud::Kwok) => resource(
                "karpenter.kwok.sh",
                "v1alpha1",
                "KWOKNodeClass",
                "kwoknodeclasses",
            ),
        }
    }

    /// Whether a NodePool's `nodeClassRef` names the class kind this API serves.
    pub fn refers_to_served_class(&self, r: &NodeClassReference) -> bool {
        let c = self.node_classes();
        r.group == c.group && r.kind == c.kind
    }

    /// On NodeClaims, their Nodes and NodeClasses: the agent drains and terminates (or
    /// deletes the launch templates) before they go.
    pub fn termination_finalizer(&self) -> &'static str {
        match self.flavor {
            ApiFlavor::Joiner => "joiner.dev/termination",
            ApiFlavor::Karpenter => "karpenter.sh/termination",
        }
    }

    /// The NodePool template hash a NodeClaim was launched from (static drift).
    pub fn nodepool_hash(&self) -> &'static str {
        match self.flavor {
            ApiFlavor::Joiner => "joiner.dev/nodepool-template-hash",
            ApiFlavor::Karpenter => "karpenter.sh/nodepool-hash",
        }
    }

    /// The version of the hash algorithm beside it: a NodeClaim hashed by another version
    /// is re-stamped, not drifted.
    pub fn hash_version(&self) -> &'static str {
        match self.flavor {
            ApiFlavor::Joiner => "joiner.dev/hash-version",
            ApiFlavor::Karpenter => "karpenter.sh/nodepool-hash-version",
        }
    }

    /// The NodeClass hash a NodeClaim was launched from.
    pub fn nodeclass_hash(&self) -> &'static str {
        match self.flavor {
            ApiFlavor::Joiner => "joiner.dev/nodeclass-hash",
            ApiFlavor::Karpenter => "karpenter.k8s.aws/ec2nodeclass-hash",
        }
    }

    /// The taint a node registers with and the agent removes once it is known.
    pub fn unregistered_taint(&self) -> &'static str {
        match self.flavor {
            ApiFlavor::Joiner => "joiner.dev/unregistered",
            ApiFlavor::Karpenter => "karpenter.sh/unregistered",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karpenter_api_names_karpenters_resources() {
        let k = Served::new(ApiFlavor::Karpenter, ClassCloud::Ec2);
        assert_eq!(k.node_pools().api_version, "karpenter.sh/v1");
        assert_eq!(k.node_claims().plural, "nodeclaims");
        assert_eq!(k.node_overlays().api_version, "karpenter.sh/v1alpha1");
        assert_eq!(k.node_classes().kind, "EC2NodeClass");
        assert_eq!(k.node_classes().api_version, "karpenter.k8s.aws/v1");
        let kwok = Served::new(ApiFlavor::Karpenter, ClassCloud::Kwok);
        assert_eq!(
            kwok.node_classes().api_version,
            "karpenter.kwok.sh/v1alpha1"
        );
        assert_eq!(k.termination_finalizer(), "karpenter.sh/termination");
    }

    #[test]
    fn joiner_api_matches_the_derived_types() {
        use kube::Resource;
        let j = Served::joiner();
        assert_eq!(
            j.node_pools(),
            ApiResource::erase::<super::super::NodePool>(&())
        );
        assert_eq!(
            j.node_claims(),
            ApiResource::erase::<super::super::NodeClaim>(&())
        );
        assert_eq!(
            j.node_classes(),
            ApiResource::erase::<super::super::NodeClass>(&())
        );
        assert_eq!(
            j.node_overlays(),
            ApiResource::erase::<super::super::NodeOverlay>(&())
        );
        assert_eq!(
            super::super::NodeClaim::api_version(&()),
            j.node_claims().api_version
        );
    }

    #[test]
    fn a_reference_to_another_class_kind_is_told_apart() {
        let k = Served::new(ApiFlavor::Karpenter, ClassCloud::Kwok);
        let r = |group: &str, kind: &str| NodeClassReference {
            group: group.into(),
            kind: kind.into(),
            name: "default".into(),
        };
        assert!(k.refers_to_served_class(&r("karpenter.kwok.sh", "KWOKNodeClass")));
        assert!(!k.refers_to_served_class(&r("karpenter.k8s.aws", "EC2NodeClass")));
        assert!(Served::joiner().refers_to_served_class(&r("joiner.dev", "NodeClass")));
    }
}
