# Converted from v1alpha5-provider-ref.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_class" "legacy" {
  cluster_name     = var.cluster_name
  name             = "legacy"
  instance_profile = "KarpenterNodeInstanceProfile-${var.cluster_name}"
  # changed: amiFamily AL2 (the default before v1) has no images any more: EKS stopped publishing AL2 node images on 2025-11-26, so al2023@latest stands in; its nodes boot with nodeadm, so review any AL2 user data (bootstrap.sh flags).
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    id = "subnet-0123456789abcdef0"
  }
  subnet_selector_term {
    id = "subnet-0fedcba9876543210"
  }
  security_group_selector_term {
    tags = { "karpenter.sh/discovery" = var.cluster_name }
  }
  tags = { cost-center = "42" }
  # not converted: launchTemplate has no joiner equivalent (joiner builds the launch template).
}

resource "joiner_node_pool" "legacy" {
  cluster_name = var.cluster_name
  name         = "legacy"
  node_class   = joiner_node_class.legacy.name
  weight       = 5
  labels       = { tier = "legacy" }
  taint {
    key    = "legacy"
    effect = "NoSchedule"
  }
  limits = { cpu = "200" }
  # not converted: kubeletConfiguration moved to the node class in Karpenter v1; set it in the class's kubelet block: {"maxPods":20}
  disruption {
    # changed: consolidation.enabled is consolidation_policy WhenEmptyOrUnderutilized.
    consolidation_policy = "WhenEmptyOrUnderutilized"
  }
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_class.legacy' "$CLUSTER:legacy"
#   terraform import 'joiner_node_pool.legacy' "$CLUSTER:legacy"
