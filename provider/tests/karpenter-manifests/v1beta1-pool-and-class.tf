# Converted from v1beta1-pool-and-class.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_class" "bottlerocket" {
  cluster_name = var.cluster_name
  name         = "bottlerocket"
  role         = "KarpenterNodeRole-${var.cluster_name}"
  ami_selector_term {
    alias = "bottlerocket@latest"
  }
  subnet_selector_term {
    tags = { "karpenter.sh/discovery" = var.cluster_name }
  }
  security_group_selector_term {
    name = "eks-cluster-sg-${var.cluster_name}"
  }
}

resource "joiner_node_pool" "batch" {
  cluster_name = var.cluster_name
  name         = "batch"
  node_class   = joiner_node_class.bottlerocket.name
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot"]
  }
  # changed: disruption.expireAfter (v1beta1) is the pool's expire_after since Karpenter v1.
  expire_after = "Never"
  # not converted: kubelet moved to the node class in Karpenter v1; set it in the class's kubelet block: {"maxPods":58}
  disruption {
    consolidation_policy = "WhenEmpty"
    consolidate_after    = "60s"
  }
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_class.bottlerocket' "$CLUSTER:bottlerocket"
#   terraform import 'joiner_node_pool.batch' "$CLUSTER:batch"
