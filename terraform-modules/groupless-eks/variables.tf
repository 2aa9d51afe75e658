variable "name" {
  description = "Cluster name. Also names the roles, the queue and the rules, and is the default value of the `joiner.dev/discovery` tag the subnets and security groups are found by."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", var.name))
    error_message = "The name must be 1 to 100 letters, digits, '-' or '_', starting with a letter or digit (EKS's rule)."
  }

  # The roles are named "<name>-cluster" and "<name>-fargate", and IAM role names have at
  # most 64 characters; the queue's "<name>-interruptions" (SQS: 80) fits under the same
  # bound.
  validation {
    condition     = length(var.name) <= 56
    error_message = "The name must be at most 56 characters: the module names IAM roles \"<name>-cluster\" and \"<name>-fargate\", and IAM allows 64 characters in a role name."
  }
}

variable "create_cluster" {
  description = "False adds joiner to the existing EKS cluster `name` (read with the joiner_cluster data source, never changed): no cluster, cluster role or kube-system Fargate profile is made, and its CoreDNS stays where it runs. The cluster needs an IAM OIDC provider (for the agent's IRSA role) and, for the node access entry, authentication mode API or API_AND_CONFIG_MAP."
  type        = bool
  default     = true
}

variable "kubernetes_version" {
  description = "Kubernetes minor version of the control plane, e.g. \"1.35\". Null (the default) takes EKS's current default version when the cluster is created, and keeps the cluster's version after that. Changing it upgrades in place, one minor version at a time. The plan warns when the version is in EKS extended support (extra cost) and refuses one EKS no longer offers."
  type        = string
  default     = null
}

variable "authentication_mode" {
  description = "How EKS authenticates IAM principals: API_AND_CONFIG_MAP (access entries, and an existing aws-auth ConfigMap keeps working), API (access entries only) or CONFIG_MAP (aws-auth only: no entries are created, and you must map the node role in aws-auth yourself). Changes in place, forward only."
  type        = string
  default     = "API_AND_CONFIG_MAP"

  validation {
    condition     = contains(["CONFIG_MAP", "API_AND_CONFIG_MAP", "API"], var.authentication_mode)
    error_message = "The authentication mode must be CONFIG_MAP, API_AND_CONFIG_MAP or API."
  }
}

variable "node_access_entry" {
  description = "Create the EC2_LINUX access entry that lets the nodes (the node role) join. Turn it off only if the node role is mapped in the aws-auth ConfigMap instead."
  type        = bool
  default     = true
}

variable "caller_is_admin" {
  description = "Give the identity that applies this module a cluster-admin access entry (AmazonEKSClusterAdminPolicy). It needs cluster access to install the agent, the NodeClass and the NodePools; turn this off only if another entry (e.g. in admin_principal_arns, or one made outside this module) already grants it. Null (the default): true when the module creates the cluster, false for an existing one, whose operators already reach it (EKS refuses a second entry for the same principal)."
  type        = bool
  default     = null
}

variable "admin_principal_arns" {
  description = "Further IAM roles or users (ARNs, not assumed-role sessions) that get a cluster-admin access entry."
  type        = list(string)
  default     = []
}

variable "subnet_ids" {
  description = "Private subnets for the control plane, Fargate and the nodes. Null (the default) discovers them by the discovery tag (`discovery_tag_key`) instead."
  type        = list(string)
  default     = null
}

variable "discovery_tag_key" {
  description = "Key of the tag subnets and node security groups are discovered by, e.g. `karpenter.sh/discovery` to keep a Karpenter cluster's tagging."
  type        = string
  default     = "joiner.dev/discovery"
}

variable "discovery_tag" {
  description = "Value of the discovery tag (`discovery_tag_key`) on the subnets and node security groups. Null means the cluster name."
  type        = string
  default     = null
}

variable "node_security_group_ids" {
  description = "Security groups for the nodes the agent launches, replacing the default. Empty (the default) selects the cluster security group EKS creates (by its `aws:eks:cluster-name` tag) and any group tagged with the discovery tag. Groups given here must include the cluster security group or be admitted by it on TCP 443 (API server) and 53 (CoreDNS on Fargate)."
  type        = list(string)
  default     = []
}

variable "endpoint_public_access" {
  description = "Whether the Kubernetes API has a public endpoint (the private one is always on)."
  type        = bool
  default     = true
}

variable "public_access_cidrs" {
  description = "IPv4 CIDRs that may reach the public endpoint."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "enabled_log_types" {
  description = "Control-plane log types sent to CloudWatch Logs."
  type        = list(string)
  default     = ["api", "audit", "authenticator"]
}

variable "fargate_namespaces" {
  description = "Namespaces besides kube-system and the agent's that run on Fargate (one profile each)."
  type        = list(string)
  default     = []
}

variable "agent_namespace" {
  description = "Namespace of the agent (runs on Fargate)."
  type        = string
  default     = "joiner"
}

variable "agent_replicas" {
  description = "Agent replicas; one leads, the others wait on the Lease."
  type        = number
  default     = 2
}

variable "agent_image" {
  description = "Agent image. Null means the image published with the provider's version."
  type        = string
  default     = null
}

variable "agent_image_digest" {
  description = "Pins the agent image by digest (sha256:...): the Deployment runs REPOSITORY@DIGEST. Null runs the tag."
  type        = string
  default     = null
}

variable "agent_log_level" {
  description = "Agent log level: error, warn, info, debug or trace."
  type        = string
  default     = "info"
}

variable "agent_env" {
  description = "Extra environment variables for the agent container (e.g. JOINER_BATCH_IDLE)."
  type        = map(string)
  default     = {}
}

variable "node_volume_size" {
  description = "Size of the volume holding the nodes' kubelet and container data, which is their ephemeral-storage (gp3, encrypted): AL2023's root volume, Bottlerocket's data volume /dev/xvdb (its OS volume /dev/xvda stays 4Gi)."
  type        = string
  default     = "20Gi"
}

variable "node_ami_alias" {
  description = "AMI alias of the default NodeClass, e.g. al2023@latest or bottlerocket@latest."
  type        = string
  default     = "al2023@latest"
}

variable "queue_message_retention_seconds" {
  description = "How long interruption notices stay in the queue; they are useless after a few minutes."
  type        = number
  default     = 300
}

variable "tags" {
  description = "Tags on every AWS object the module creates, and on the instances the agent launches."
  type        = map(string)
  default     = {}
}
