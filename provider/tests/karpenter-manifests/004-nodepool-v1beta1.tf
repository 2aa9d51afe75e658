# Converted from 004-nodepool-v1beta1.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_pool" "default" {
  cluster_name = var.cluster_name
  name         = "default"
  # changed: the EC2NodeClass was not among the converted manifests; convert it too.
  node_class = "default"
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot", "on-demand"]
  }
  requirement {
    key      = "kubernetes.io/arch"
    operator = "In"
    values   = ["amd64"]
  }
  requirement {
    key      = "karpenter.k8s.aws/instance-family"
    operator = "NotIn"
    values   = ["t3", "t3a", "t4", "t2", "i3", "i4i", "i3en", "c6id", "m6id", "r6id", "d3", "d3en"]
  }
  requirement {
    key      = "karpenter.k8s.aws/instance-hypervisor"
    operator = "In"
    values   = ["nitro"]
  }
  requirement {
    key      = "karpenter.k8s.aws/instance-size"
    operator = "In"
    values   = ["large", "xlarge", "2xlarge", "4xlarge"]
  }
  requirement {
    key      = "kubernetes.io/os"
    operator = "In"
    values   = ["linux"]
  }
  # changed: disruption.expireAfter (v1beta1) is the pool's expire_after since Karpenter v1.
  # expire_after 720h is joiner's default, so it is not written.
  disruption {
    # changed: WhenUnderutilized (v1beta1) was renamed WhenEmptyOrUnderutilized in Karpenter v1.
    consolidation_policy = "WhenEmptyOrUnderutilized"
  }
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_pool.default' "$CLUSTER:default"
