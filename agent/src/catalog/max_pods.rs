//! Maximum pods per node from the instance type's ENI limits.
//!
//! With the VPC CNI in its default mode every pod takes a secondary IPv4 address, and each
//! ENI's primary address is not usable by pods; host-network pods (aws-node, kube-proxy)
//! add two. Hence `ENIs × (IPv4 per ENI − 1) + 2`, the formula of EKS's max-pods table,
//! where the ENIs are the default network card's only: the CNI attaches none on the others,
//! and nodeadm gives the kubelet exactly this figure, uncapped. On a type with several cards
//! (p5, trn1, the `n` network-optimised sizes) counting them all would promise the scheduler
//! pods the kubelet refuses. A NodeClass's `kubelet.maxPods` overrides it (prefix
//! delegation, custom networking).

/// The ENI formula, given the default network card's ENIs. Returns at least 1 so a type with bogus limits is not treated as
/// unable to run anything... unless its limits are zero, in which case it gets 2 (the
/// host-network pods) like the EKS table does.
pub fn from_eni_limits(max_enis: u32, ipv4_per_eni: u32) -> u32 {
    max_enis
        .saturating_mul(ipv4_per_eni.saturating_sub(1))
        .saturating_add(2)
}

/// The effective max pods: the override when given, the ENI formula otherwise.
pub fn max_pods(max_enis: u32, ipv4_per_eni: u32, override_max_pods: Option<u32>) -> u32 {
    override_max_pods.unwrap_or_else(|| from_eni_limits(max_enis, ipv4_per_eni))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eks_table_values() {
        // Values from EKS's eni-max-pods table.
        assert_eq!(from_eni_limits(3, 10), 29); // m5.large
        assert_eq!(from_eni_limits(4, 15), 58); // m5.xlarge
        assert_eq!(from_eni_limits(8, 30), 234); // m5.4xlarge
        assert_eq!(from_eni_limits(15, 50), 737); // m5.24xlarge
        assert_eq!(from_eni_limits(2, 2), 4); // t3.nano
        assert_eq!(max_pods(3, 10, Some(110)), 110);
    }
}
