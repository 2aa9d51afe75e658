# Converted from v1-general.yaml by terraform-provider-joiner convert 0.1.0.
# Lines starting with `# changed:` and `# not converted:` need a look before the first apply.

resource "joiner_node_class" "default" {
  cluster_name = var.cluster_name
  name         = "default"
  role         = "KarpenterNodeRole-prod"
  ami_selector_term {
    alias = "al2023@latest"
  }
  subnet_selector_term {
    tags = { "karpenter.sh/discovery" = "prod" }
  }
  subnet_selector_term {
    id = "subnet-0a1b2c3d4e5f60718"
  }
  security_group_selector_term {
    tags = { "karpenter.sh/discovery" = "prod" }
  }
  # not converted: tag kubernetes.io/cluster/prod is set by the agent on every instance.
  tags                  = { team = "platform" }
  instance_store_policy = "RAID0"
  block_device_mapping {
    device_name = "/dev/xvda"
    root_volume = true
    volume_size = "100Gi"
    volume_type = "gp3"
    iops        = 3000
    throughput  = 125
  }
  # not converted: kubelet.imageGCHighThresholdPercent = 85 has no joiner equivalent.
  kubelet {
    max_pods        = 110
    system_reserved = { cpu = "100m", memory = "100Mi" }
    eviction_hard   = { "memory.available" = "5%" }
  }
}

resource "joiner_node_pool" "general" {
  cluster_name = var.cluster_name
  name         = "general"
  node_class   = joiner_node_class.default.name
  weight       = 10
  labels       = { team = "platform" }
  annotations  = { "example.com/owner" = "platform" }
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["spot", "on-demand"]
  }
  requirement {
    key        = "karpenter.k8s.aws/instance-category"
    operator   = "In"
    values     = ["c", "m", "r"]
    min_values = 2
  }
  requirement {
    key      = "karpenter.k8s.aws/instance-generation"
    operator = "Gt"
    values   = ["4"]
  }
  requirement {
    key      = "karpenter.k8s.aws/instance-gpu-memory"
    operator = "DoesNotExist"
  }
  # not converted: requirement karpenter.k8s.aws/placement-group-id In ["pg-0123456789abcdef0"]: joiner launches into no placement group (Karpenter v1.11's placementGroup is not built).
  startup_taint {
    key    = "node.cilium.io/agent-not-ready"
    value  = "true"
    effect = "NoExecute"
  }
  limits = { cpu = "1000", memory = "1000Gi" }
  # expire_after 720h is joiner's default, so it is not written.
  termination_grace_period = "48h"
  disruption {
    consolidation_policy = "WhenEmptyOrUnderutilized"
    consolidate_after    = "30s"
    budget {
      nodes = "10%"
    }
    budget {
      nodes    = "0"
      schedule = "0 9 * * mon-fri"
      duration = "8h"
      reasons  = ["Underutilized", "Drifted"]
    }
  }
}

resource "joiner_node_pool" "gpu" {
  cluster_name = var.cluster_name
  name         = "gpu"
  node_class   = joiner_node_class.default.name
  weight       = 50
  requirement {
    key      = "karpenter.k8s.aws/instance-gpu-name"
    operator = "In"
    values   = ["a10g"]
  }
  requirement {
    key      = "karpenter.sh/capacity-type"
    operator = "In"
    values   = ["on-demand"]
  }
  taint {
    key    = "nvidia.com/gpu"
    value  = "true"
    effect = "NoSchedule"
  }
  limits = { "nvidia.com/gpu" = "8" }
  disruption {
    consolidation_policy = "WhenEmpty"
    consolidate_after    = "5m"
  }
}

# Where an object already exists in the cluster, import it instead of creating it
# (CLUSTER=<the cluster's name>):
#   terraform import 'joiner_node_class.default' "$CLUSTER:default"
#   terraform import 'joiner_node_pool.general' "$CLUSTER:general"
#   terraform import 'joiner_node_pool.gpu' "$CLUSTER:gpu"
