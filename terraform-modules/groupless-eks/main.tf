# A groupless EKS cluster: everything but the NodePools (see ../spot-node-pools).
#
# One apply creates, in this order: the IAM roles, the control plane (IRSA's OIDC provider,
# CoreDNS on Fargate), the access entries that let the nodes join and the identity that
# applies (plus any extra admins) reach the Kubernetes API, Fargate profiles for kube-system and the agent's namespace, the
# interruption queue and its EventBridge rules, the agent (CRDs, RBAC, Deployment on
# Fargate) and the default NodeClass. Destroy runs it backwards: the NodeClass goes after
# every NodePool that uses it, and the agent after the NodeClass, so the agent is still
# there to drain and terminate the nodes when the NodePools are deleted.

locals {
  discovery = coalesce(var.discovery_tag, var.name)

  # Bottlerocket boots from a small OS volume (/dev/xvda) and keeps the kubelet's and
  # containerd's data on a second one (/dev/xvdb); AL2023 has one root volume for both.
  # node_volume_size sizes the volume the kubelet's data is on, which becomes the nodes'
  # ephemeral-storage. regexall rather than startswith, which Terraform 1.0 lacks.
  bottlerocket = length(regexall("^bottlerocket", var.node_ami_alias)) > 0

  # The cluster this module made, or the existing one it adds joiner to (create_cluster =
  # false), attribute by attribute: concat()[0] rather than a conditional, because
  # Terraform 1.0 checks both branches' indexes and one of the two lists is always empty.
  cluster = { for a in [
    "name", "arn", "endpoint", "certificate_authority", "version", "oidc_provider_arn",
    "oidc_issuer", "authentication_mode",
  ] : a => concat(joiner_cluster.this[*][a], data.joiner_cluster.existing[*][a])[0] }
  authentication_mode = var.create_cluster ? var.authentication_mode : local.cluster.authentication_mode
  caller_is_admin     = var.caller_is_admin == null ? var.create_cluster : var.caller_is_admin

  subnet_ids = var.subnet_ids != null ? var.subnet_ids : data.joiner_subnets.discovered[0].ids

  tags = merge(var.tags, { "joiner.dev/cluster" = var.name })

  partition = split(":", data.joiner_caller_identity.current.arn)[1]
}

data "joiner_subnets" "discovered" {
  count = var.subnet_ids == null ? 1 : 0

  tags = {
    (var.discovery_tag_key) = local.discovery
  }
}

# An existing cluster (create_cluster = false): read, never changed.
data "joiner_cluster" "existing" {
  count = var.create_cluster ? 0 : 1

  name = var.name
}

# --- IAM ---------------------------------------------------------------------------------

resource "joiner_cluster_role" "cluster" {
  count = var.create_cluster ? 1 : 0

  name = "${var.name}-cluster"
  tags = local.tags
}

resource "joiner_fargate_role" "fargate" {
  name         = "${var.name}-fargate"
  cluster_name = var.name
  tags         = local.tags
}

resource "joiner_node_role" "node" {
  name = "${var.name}-node"
  tags = local.tags
}

# IRSA, not Pod Identity: the agent runs on Fargate, where Pod Identity does not work.
resource "joiner_agent_role" "agent" {
  name              = "${var.name}-agent"
  cluster_name      = local.cluster.name
  oidc_provider_arn = local.cluster.oidc_provider_arn
  oidc_issuer_url   = local.cluster.oidc_issuer
  namespace         = var.agent_namespace
  node_role_arn     = joiner_node_role.node.arn
  queue_arn         = joiner_interruption_queue.this.arn
  tags              = local.tags
}

# --- Control plane -------------------------------------------------------------------------

data "joiner_caller_identity" "current" {}

resource "joiner_cluster" "this" {
  count = var.create_cluster ? 1 : 0

  name       = var.name
  version    = var.kubernetes_version
  role_arn   = joiner_cluster_role.cluster[0].arn
  subnet_ids = local.subnet_ids

  endpoint_public_access  = var.endpoint_public_access
  endpoint_private_access = true
  public_access_cidrs     = var.endpoint_public_access ? var.public_access_cidrs : null
  enabled_log_types       = var.enabled_log_types
  discovery_tag_value     = local.discovery

  enable_irsa = true

  # Access entries (and, in API_AND_CONFIG_MAP, an existing aws-auth ConfigMap) decide
  # who reaches the Kubernetes API. Nobody gets in implicitly: the entries below say who.
  authentication_mode                         = var.authentication_mode
  bootstrap_cluster_creator_admin_permissions = var.authentication_mode == "CONFIG_MAP"

  tags = local.tags
}

# --- Cluster access ------------------------------------------------------------------------

# The nodes' kubelets authenticate as the node role: without this entry (or an aws-auth
# mapping) no instance the agent launches ever registers.
resource "joiner_access_entry" "node" {
  count = var.node_access_entry && local.authentication_mode != "CONFIG_MAP" ? 1 : 0

  cluster_name  = local.cluster.name
  principal_arn = joiner_node_role.node.arn
  type          = "EC2_LINUX"
  tags          = local.tags
}

# Cluster admins: the identity that applies this module (it installs the agent, the
# NodeClass and the NodePools through the Kubernetes API) and `admin_principal_arns`.
# The agent itself needs no entry: it runs on Fargate and talks to the API with its
# ServiceAccount token.
resource "joiner_access_entry" "admin" {
  for_each = local.authentication_mode == "CONFIG_MAP" ? toset([]) : toset(concat(
    local.caller_is_admin ? [data.joiner_caller_identity.current.principal_arn] : [],
    var.admin_principal_arns,
  ))

  cluster_name  = local.cluster.name
  principal_arn = each.value
  tags          = local.tags

  access_policy {
    policy_arn = "arn:${local.partition}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    scope      = "cluster"
  }
}

# A cluster this module creates has no node for CoreDNS but Fargate; an existing cluster
# already runs its CoreDNS somewhere, and the module leaves it there.
resource "joiner_fargate_profile" "kube_system" {
  count = var.create_cluster ? 1 : 0

  cluster_name           = local.cluster.name
  name                   = "kube-system"
  pod_execution_role_arn = joiner_fargate_role.fargate.arn
  subnet_ids             = local.subnet_ids
  tags                   = local.tags

  # Switched after this profile is ACTIVE, so the recreated CoreDNS pods land on Fargate.
  coredns_on_fargate = true

  selector {
    namespace = "kube-system"
  }
}

resource "joiner_fargate_profile" "agent" {
  cluster_name           = local.cluster.name
  name                   = var.agent_namespace
  pod_execution_role_arn = joiner_fargate_role.fargate.arn
  subnet_ids             = local.subnet_ids
  tags                   = local.tags

  selector {
    namespace = var.agent_namespace
  }
}

resource "joiner_fargate_profile" "extra" {
  for_each = toset(var.fargate_namespaces)

  cluster_name           = local.cluster.name
  name                   = each.value
  pod_execution_role_arn = joiner_fargate_role.fargate.arn
  subnet_ids             = local.subnet_ids
  tags                   = local.tags

  selector {
    namespace = each.value
  }
}

# --- Interruption handling -------------------------------------------------------------------

resource "joiner_interruption_queue" "this" {
  name                      = "${var.name}-interruptions"
  message_retention_seconds = var.queue_message_retention_seconds
  tags                      = local.tags
}

resource "joiner_interruption_rules" "this" {
  cluster_name = local.cluster.name
  queue_arn    = joiner_interruption_queue.this.arn
  tags         = local.tags
}

# --- The agent and its default NodeClass -------------------------------------------------------

resource "joiner_agent" "this" {
  cluster_name = local.cluster.name
  namespace    = var.agent_namespace
  queue_url    = joiner_interruption_queue.this.url
  role_arn     = joiner_agent_role.agent.arn
  image        = var.agent_image
  image_digest = var.agent_image_digest
  replicas     = var.agent_replicas
  log_level    = var.agent_log_level
  env          = var.agent_env

  # The agent's pods must land on Fargate (there is no node before the agent makes one),
  # and it must hear about interruptions from its first minute. The admin entries first:
  # this is the apply's first Kubernetes call, made as the identity that applies. And the
  # node entry, so that the first instance the agent launches can join.
  depends_on = [
    joiner_fargate_profile.kube_system,
    joiner_fargate_profile.agent,
    joiner_interruption_rules.this,
    joiner_access_entry.admin,
    joiner_access_entry.node,
  ]
}

resource "joiner_node_class" "default" {
  cluster_name = local.cluster.name
  name         = "default"
  role         = joiner_node_role.node.name

  ami_selector_term {
    alias = var.node_ami_alias
  }

  dynamic "subnet_selector_term" {
    for_each = var.subnet_ids == null ? [local.discovery] : []
    content {
      tags = { (var.discovery_tag_key) = subnet_selector_term.value }
    }
  }
  dynamic "subnet_selector_term" {
    for_each = var.subnet_ids == null ? [] : var.subnet_ids
    content {
      id = subnet_selector_term.value
    }
  }

  # The cluster security group EKS creates: the API server's private endpoint and CoreDNS
  # on Fargate admit only that group, so a node outside it never registers. EKS tags it
  # aws:eks:cluster-name (a reserved prefix only AWS can write), which keeps the selector
  # known at plan time, before the cluster exists.
  dynamic "security_group_selector_term" {
    for_each = length(var.node_security_group_ids) == 0 ? [local.cluster.name] : []
    content {
      tags = { "aws:eks:cluster-name" = security_group_selector_term.value }
    }
  }
  # Groups of the platform team's own, tagged for discovery (none is needed).
  dynamic "security_group_selector_term" {
    for_each = length(var.node_security_group_ids) == 0 ? [local.discovery] : []
    content {
      tags = { (var.discovery_tag_key) = security_group_selector_term.value }
    }
  }
  dynamic "security_group_selector_term" {
    for_each = var.node_security_group_ids
    content {
      id = security_group_selector_term.value
    }
  }

  # IMDSv2 only, and no hop for containers: pods get AWS credentials from IRSA, not the node.
  metadata_options {
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  # Bottlerocket's OS volume, 4 GiB as Karpenter sizes it.
  dynamic "block_device_mapping" {
    for_each = local.bottlerocket ? ["/dev/xvda"] : []
    content {
      device_name = block_device_mapping.value
      volume_size = "4Gi"
      volume_type = "gp3"
      encrypted   = true
    }
  }
  # The kubelet's and containerd's disk: AL2023's root volume, Bottlerocket's data volume.
  block_device_mapping {
    device_name = local.bottlerocket ? "/dev/xvdb" : "/dev/xvda"
    root_volume = true
    volume_size = var.node_volume_size
    volume_type = "gp3"
    encrypted   = true
  }

  # The agent adds joiner.dev/cluster, /nodepool and /nodeclaim itself (and refuses them here).
  tags = var.tags

  # The NodeClass CRD comes with the agent.
  depends_on = [joiner_agent.this]
}
