# Converted from v1-reserved.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_class" "gpu" {
  cluster_name = var.cluster_name
  name         = "gpu"
  role         = "KarpenterNodeRole-prod"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    tags = { "karpenter.sh/discovery" = "prod" }
  }
  security_group_selector_term {
    tags = { "karpenter.sh/discovery" = "prod" }
  }
  capacity_reservation_selector_term {
    tags = { application = "training" }
  }
  capacity_reservation_selector_term {
    id = "cr-56fac701cc1951b03"
  }
  capacity_reservation_selector_term {
    owner_id                = "012345678901"
    instance_match_criteria = "targeted"
  }
}

resource "joiner_node_pool" "training" {
  cluster_name = var.cluster_name
  name         = "training"
  node_class   = joiner_node_class.gpu.name
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["reserved", "on-demand"]
  }
  requirement {
    key      = "karpenter.k8s.aws/capacity-reservation-type"
    operator = "In"
    values   = ["capacity-block", "default"]
  }
}

resource "joiner_node_overlay" "savings-plan" {
  cluster_name     = var.cluster_name
  name             = "savings-plan"
  weight           = 10
  price_adjustment = "-28%"
  capacity         = { "smarter-devices/fuse" = "1" }
  requirement {
    key      = "karpenter.k8s.aws/instance-family"
    operator = "In"
    values   = ["m5", "m6i"]
  }
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["on-demand"]
  }
  # not converted: requirement karpenter.sh/nodepool In ["general"]: joiner prices one catalogue for every NodePool, so an overlay selects by instance type labels, zone and capacity type only.
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_class.gpu' "$CLUSTER:gpu"
#   terraform import 'joiner_node_pool.training' "$CLUSTER:training"
#   terraform import 'joiner_node_overlay.savings-plan' "$CLUSTER:savings-plan"
