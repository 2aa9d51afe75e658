# A production cluster with the seed's production profile: 80 % Spot through a fixed
# Spot/on-demand split, wide instance diversification, an on-demand pool for critical
# workloads, disruption budgets that keep consolidation out of business hours, and
# nodes renewed every 30 days.

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
  default     = "prod"
}

module "cluster" {
  source = "../../terraform-modules/groupless-eks"

  name = var.name
  # Pinned on purpose: production moves to a new Kubernetes version when someone has tested
  # it, not when EKS changes its default. 1.35 is in EKS standard support until 2027-03-27
  # (the EKS release calendar); after that the plan warns that it is in extended support,
  # which costs more per cluster hour, and it must be raised one minor version at a time.
  # Leave it out to take EKS's default at creation instead.
  kubernetes_version = "1.35"
  agent_replicas     = 2
  enabled_log_types  = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
  tags               = { environment = "prod" }
}

module "node_pools" {
  source       = "../../terraform-modules/spot-node-pools"
  cluster_name = module.cluster.cluster_name
  node_class   = module.cluster.node_class_name

  # 80/20: Spot nodes carry capacity-spread 1..4, on-demand nodes 5.
  capacity_spread = { spot = 4, on_demand = 1 }
  critical_pool   = true

  # Wide diversification: three categories, generation 5 and newer, at least five
  # families behind every launch, no tiny or bare-metal sizes.
  instance_categories     = ["c", "m", "r"]
  min_instance_generation = 5
  min_instance_families   = 5
  excluded_instance_sizes = ["nano", "micro", "small", "medium", "metal", "24xlarge", "32xlarge", "48xlarge"]

  limits           = { cpu = "2000", memory = "8000Gi" }
  on_demand_limits = { cpu = "500", memory = "2000Gi" }
  critical_limits  = { cpu = "128", memory = "512Gi" }

  expire_after             = "720h"
  termination_grace_period = "24h"
  consolidation_policy     = "WhenEmptyOrUnderutilized"
  consolidate_after        = "5m"
  budgets = [
    { nodes = "10%" },
    # No consolidation of underused nodes during business hours (UTC).
    { nodes = "0", schedule = "0 9 * * mon-fri", duration = "8h", reasons = ["Underutilized"] },
  ]
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

output "capacity_spread" {
  value = module.node_pools.capacity_spread_values
}
