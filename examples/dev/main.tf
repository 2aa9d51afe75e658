# A development cluster: small, all Spot, consolidated aggressively. Idle nodes go within
# seconds and a reclaimed Spot node is simply replaced; pods may wait when Spot is short.

terraform {
  required_providers {
    joiner = {
      source = "joiner/joiner"
    }
  }
}

provider "joiner" {
  region = var.region
}

variable "region" {
  description = "AWS region. Null takes AWS_REGION / the AWS profile's, as the AWS CLI does."
  type        = string
  default     = null
}

variable "name" {
  description = "Cluster name and discovery tag value."
  type        = string
  default     = "dev"
}

module "cluster" {
  source = "../../terraform-modules/groupless-eks"

  name = var.name
  # No kubernetes_version: a dev cluster takes EKS's current default version when it is
  # created, and keeps it until the version is changed here.
  agent_replicas    = 1
  agent_log_level   = "debug"
  enabled_log_types = ["api"]
  tags              = { environment = "dev" }
}

module "node_pools" {
  source       = "../../terraform-modules/spot-node-pools"
  cluster_name = module.cluster.cluster_name
  node_class   = module.cluster.node_class_name

  # All Spot: no on-demand fallback, no critical pool.
  on_demand_fallback = false
  critical_pool      = false

  # Small, cheap sizes of current families; two families are enough diversity for dev.
  instance_categories   = ["c", "m"]
  instance_sizes        = ["large", "xlarge", "2xlarge"]
  min_instance_families = 2
  limits                = { cpu = "64", memory = "256Gi" }

  # Aggressive consolidation: act at once, up to half the nodes at a time; weekly renewal.
  consolidation_policy = "WhenEmptyOrUnderutilized"
  consolidate_after    = "0s"
  budgets              = [{ nodes = "50%" }]
  expire_after         = "168h"
}

output "cluster_name" {
  value = module.cluster.cluster_name
}

output "cluster_endpoint" {
  value = module.cluster.cluster_endpoint
}

output "queue_url" {
  value = module.cluster.queue_url
}

output "node_pools" {
  value = module.node_pools.node_pool_names
}
