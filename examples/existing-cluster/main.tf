# joiner added to an EKS cluster made elsewhere (eksctl, another module, the console), as a
# team running Karpenter would: the cluster is only read, the subnets and node security
# groups keep their `karpenter.sh/discovery` tags, and joiner brings its own roles, queue,
# rules, access entries, agent (on a Fargate profile of its own), NodeClass and NodePools.
# See docs/guides/migrating-from-karpenter.md for switching over from Karpenter itself.

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

variable "cluster_name" {
  description = "The existing cluster. It needs an IAM OIDC provider and authentication mode API or API_AND_CONFIG_MAP."
  type        = string
  default     = "legacy"
}

module "cluster" {
  source = "../../terraform-modules/groupless-eks"

  name              = var.cluster_name
  create_cluster    = false
  discovery_tag_key = "karpenter.sh/discovery"
  agent_replicas    = 1
  tags              = { managed-by = "joiner" }
}

module "node_pools" {
  source       = "../../terraform-modules/spot-node-pools"
  cluster_name = module.cluster.cluster_name
  node_class   = module.cluster.node_class_name

  critical_pool = false
}

output "cluster_arn" {
  value = module.cluster.cluster_arn
}

output "node_pools" {
  value = module.node_pools.node_pool_names
}
