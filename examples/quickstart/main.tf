# A complete groupless EKS cluster in its shortest form: control plane with CoreDNS on
# Fargate, the agent on Fargate, the interruption queue and rules, a default NodeClass and
# Spot-first NodePools with the seed's 80/20 Spot/on-demand split. No node group: nodes
# appear when pods need them.
#
# Tag two or more private subnets with `joiner.dev/discovery = quickstart` first. Nodes join
# the cluster security group EKS creates with the cluster (the only group its API endpoint
# and CoreDNS admit); tag groups of your own with the same tag to add them.
# `./scripts/sandbox` does that in the local emulator and applies this directory.

terraform {
  required_providers {
    joiner = {
      source = "joiner/joiner"
    }
  }
}

# Region, endpoint and credentials come from the usual AWS environment variables; the
# Kubernetes half reaches the cluster through EKS with the same credentials.
provider "joiner" {}

module "cluster" {
  source = "../../terraform-modules/groupless-eks"
  name   = "quickstart"
}

module "node_pools" {
  source          = "../../terraform-modules/spot-node-pools"
  cluster_name    = module.cluster.cluster_name
  node_class      = module.cluster.node_class_name
  capacity_spread = { spot = 4, on_demand = 1 }
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
