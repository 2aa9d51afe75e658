# The AWS half of a groupless EKS cluster in one `terraform apply`:
# - the EKS control plane, with IRSA's OIDC provider and CoreDNS on Fargate;
# - Fargate profiles for kube-system and the agent's namespace, so that the system pods
#   never ride on the Spot nodes the agent launches;
# - the four IAM roles (cluster, Fargate pod execution, EC2 nodes, agent);
# - the access entries that let the nodes join and let you (the identity that applies)
#   administer the cluster;
# - the interruption queue and the EventBridge rules that feed it.
#
# Subnets are discovered by tag: tag your private subnets with
# `joiner.dev/discovery = <cluster_name>` (the agent discovers them the same way).

terraform {
  required_providers {
    joiner = {
      source = "joiner/joiner"
    }
  }
}

# Region, endpoint and credentials come from the usual AWS environment variables.
provider "joiner" {}

variable "cluster_name" {
  description = "EKS cluster name; also the value of the subnets' discovery tag."
  type        = string
  default     = "groupless"
}

variable "kubernetes_version" {
  description = "Kubernetes minor version, e.g. \"1.35\"; null takes EKS's current default at creation. Changing it upgrades the control plane in place."
  type        = string
  default     = null
}

variable "agent_namespace" {
  description = "Namespace the agent runs in (on Fargate)."
  type        = string
  default     = "joiner"
}

data "joiner_subnets" "private" {
  tags = {
    "joiner.dev/discovery" = var.cluster_name
  }
}

# --- IAM ---------------------------------------------------------------------------------

resource "joiner_cluster_role" "cluster" {
  name = "${var.cluster_name}-cluster"
}

resource "joiner_fargate_role" "fargate" {
  name         = "${var.cluster_name}-fargate"
  cluster_name = var.cluster_name
}

resource "joiner_node_role" "node" {
  name = "${var.cluster_name}-node"
}

resource "joiner_agent_role" "agent" {
  name              = "${var.cluster_name}-agent"
  cluster_name      = joiner_cluster.this.name
  oidc_provider_arn = joiner_cluster.this.oidc_provider_arn
  oidc_issuer_url   = joiner_cluster.this.oidc_issuer
  namespace         = var.agent_namespace
  node_role_arn     = joiner_node_role.node.arn
  queue_arn         = joiner_interruption_queue.this.arn
}

# --- Control plane -------------------------------------------------------------------------

resource "joiner_cluster" "this" {
  name       = var.cluster_name
  version    = var.kubernetes_version
  role_arn   = joiner_cluster_role.cluster.arn
  subnet_ids = data.joiner_subnets.private.ids

  enabled_log_types = ["api", "audit", "authenticator"]

  # The default, spelled out: IRSA for the agent (Fargate has no Pod Identity).
  enable_irsa = true

  timeouts {
    create = "30m"
    update = "60m"
  }
}

# Who may reach the Kubernetes API. The cluster allows access entries
# (authentication_mode = API_AND_CONFIG_MAP, the default) and gives its creator nothing
# implicitly: the node role gets EC2_LINUX (or no node ever registers), and the identity
# that applies gets cluster admin.
data "joiner_caller_identity" "current" {}

resource "joiner_access_entry" "nodes" {
  cluster_name  = joiner_cluster.this.name
  principal_arn = joiner_node_role.node.arn
  type          = "EC2_LINUX"
}

resource "joiner_access_entry" "admin" {
  cluster_name  = joiner_cluster.this.name
  principal_arn = data.joiner_caller_identity.current.principal_arn

  access_policy {
    policy_arn = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    scope      = "cluster"
  }
}

resource "joiner_fargate_profile" "kube_system" {
  cluster_name           = joiner_cluster.this.name
  name                   = "kube-system"
  pod_execution_role_arn = joiner_fargate_role.fargate.arn
  subnet_ids             = data.joiner_subnets.private.ids

  # Once this profile is ACTIVE, the coredns add-on is switched to computeType = Fargate,
  # which recreates its pods here (instead of a patching Lambda or a manual restart).
  coredns_on_fargate = true

  selector {
    namespace = "kube-system"
  }
}

resource "joiner_fargate_profile" "joiner" {
  cluster_name           = joiner_cluster.this.name
  name                   = "joiner"
  pod_execution_role_arn = joiner_fargate_role.fargate.arn
  subnet_ids             = data.joiner_subnets.private.ids

  selector {
    namespace = var.agent_namespace
  }
}

# --- Interruption handling -------------------------------------------------------------------

resource "joiner_interruption_queue" "this" {
  name = "${var.cluster_name}-interruptions"
  tags = {
    "joiner.dev/cluster" = var.cluster_name
  }
}

resource "joiner_interruption_rules" "this" {
  cluster_name = var.cluster_name
  queue_arn    = joiner_interruption_queue.this.arn
}

# --- Outputs ---------------------------------------------------------------------------------

output "cluster_endpoint" {
  value = joiner_cluster.this.endpoint
}

output "cluster_certificate_authority" {
  value = joiner_cluster.this.certificate_authority
}

output "oidc_provider_arn" {
  value = joiner_cluster.this.oidc_provider_arn
}

output "subnet_ids" {
  value = data.joiner_subnets.private.ids
}

output "queue_url" {
  value = joiner_interruption_queue.this.url
}

output "agent_role_arn" {
  value = joiner_agent_role.agent.arn
}

output "node_instance_profile" {
  value = joiner_node_role.node.instance_profile_name
}
