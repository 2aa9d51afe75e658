# Converted from 002-provisioner-v1alpha5.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_class" "default" {
  cluster_name     = var.cluster_name
  name             = "default"
  instance_profile = "KarpenterNodeInstanceProfile-${var.cluster_name}"
  # changed: amiFamily AL2 (the default before v1) has no images any more: EKS stopped publishing AL2 node images on 2025-11-26, so al2023@latest stands in; its nodes boot with nodeadm, so review any AL2 user data (bootstrap.sh flags).
  ami_selector_term {
    alias = "al2023@latest"
  }
  # changed: the manifest has no subnetSelector; joiner needs one. This assumes Karpenter's getting-started tag.
  subnet_selector_term {
    tags = { "karpenter.sh/discovery" = var.cluster_name }
  }
  # changed: the manifest has no securityGroupSelector; joiner needs one. This assumes Karpenter's getting-started tag.
  security_group_selector_term {
    tags = { "karpenter.sh/discovery" = var.cluster_name }
  }
}

resource "joiner_node_pool" "default" {
  cluster_name = var.cluster_name
  name         = "default"
  # changed: the Provisioner's inline `provider` block is joiner_node_class.default.
  node_class = joiner_node_class.default.name
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot", "on-demand"]
  }
  disruption {
    # changed: ttlSecondsAfterEmpty 30 is consolidation_policy WhenEmpty after 30s.
    consolidation_policy = "WhenEmpty"
    consolidate_after    = "30s"
  }
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_class.default' "$CLUSTER:default"
#   terraform import 'joiner_node_pool.default' "$CLUSTER:default"
