# Converted from 003-provisioner-v1alpha5.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_class" "spot-fleet" {
  cluster_name = var.cluster_name
  name         = "spot-fleet"
  # changed: the manifest names no role or instance profile (Karpenter took a default from its Helm values).
  role = var.node_role_name
  # changed: amiFamily AL2 (the default before v1) has no images any more: EKS stopped publishing AL2 node images on 2025-11-26, so al2023@latest stands in; its nodes boot with nodeadm, so review any AL2 user data (bootstrap.sh flags).
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    tags = { "karpenter.sh/discovery" = var.cluster_name }
  }
  # changed: the manifest has no securityGroupSelector; joiner needs one. This assumes Karpenter's getting-started tag.
  security_group_selector_term {
    tags = { "karpenter.sh/discovery" = var.cluster_name }
  }
}

resource "joiner_node_pool" "spot-fleet" {
  cluster_name = var.cluster_name
  name         = "spot-fleet"
  # changed: the Provisioner's inline `provider` block is joiner_node_class.spot-fleet.
  node_class = joiner_node_class.spot-fleet.name
  requirement {
    key      = "node.kubernetes.io/instance-type"
    operator = "In"
    values   = ["m5.large", "m5.2xlarge"]
  }
  requirement {
    key      = "topology.kubernetes.io/zone"
    operator = "In"
    values   = ["ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"]
  }
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot"]
  }
  # changed: ttlSecondsUntilExpired 2592000 is expire_after.
  # expire_after 720h is joiner's default, so it is not written.
  disruption {
    # changed: without ttlSecondsAfterEmpty or consolidation a Provisioner never removed nodes.
    consolidation_policy = "WhenEmpty"
    consolidate_after    = "Never"
  }
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_class.spot-fleet' "$CLUSTER:spot-fleet"
#   terraform import 'joiner_node_pool.spot-fleet' "$CLUSTER:spot-fleet"
