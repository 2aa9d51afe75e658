variable "cluster_name" {
  description = "The cluster (groupless-eks's `cluster_name` output)."
  type        = string
}

variable "node_class" {
  description = "NodeClass the pools launch with (groupless-eks's `node_class_name` output: referencing it orders the pools after the agent)."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of the NodePool names, e.g. \"team-a-\"."
  type        = string
  default     = ""
}

# --- Where: multi-AZ ----------------------------------------------------------------------

variable "zones" {
  description = "Availability Zones nodes may use. Empty: every zone of the NodeClass's subnets."
  type        = list(string)
  default     = []
}

# --- What: instance diversification ---------------------------------------------------------

variable "architectures" {
  description = "CPU architectures (kubernetes.io/arch): amd64, arm64."
  type        = list(string)
  default     = ["amd64"]
}

variable "instance_categories" {
  description = "Instance categories (c compute, m general, r memory, ...). Empty: any."
  type        = list(string)
  default     = ["c", "m", "r"]
}

variable "instance_families" {
  description = "Instance families (e.g. m6i, c7a). Empty: any family of the allowed categories and generations."
  type        = list(string)
  default     = []
}

variable "min_instance_generation" {
  description = "Oldest instance generation allowed (5 admits m5, c6i, r7g ...; excludes m4)."
  type        = number
  default     = 5
}

variable "instance_sizes" {
  description = "Instance sizes (large, xlarge, 2xlarge, ...). Empty: any size not excluded."
  type        = list(string)
  default     = []
}

variable "excluded_instance_sizes" {
  description = "Sizes never launched: too small to carry the DaemonSets, or bare metal that boots slowly."
  type        = list(string)
  default     = ["nano", "micro", "small", "medium", "metal"]
}

variable "excluded_instance_types" {
  description = "Instance types never launched, e.g. a type your AMI or workload does not support."
  type        = list(string)
  default     = []
}

variable "min_instance_families" {
  description = "Spot diversification (Karpenter's minValues): every launch keeps at least this many instance families among its candidates, so one reclaimed Spot pool cannot empty it."
  type        = number
  default     = 3
}

# --- How: Spot first, on-demand fallback, the split ----------------------------------------------

variable "on_demand_fallback" {
  description = "Whether the general pool may fall back to on-demand when no Spot offering is available. False: all Spot (pods wait instead)."
  type        = bool
  default     = true
}

variable "capacity_spread" {
  description = <<-EOT
    A fixed Spot/on-demand split for workloads that spread over the `capacity_spread_key`
    label: { spot = 4, on_demand = 1 } is the seed's 80/20. Null (the default): one
    Spot-first pool instead. With a split, a Spot pool takes the label values 1..spot and an
    on-demand pool the values spot+1..spot+on_demand; workloads add a topology spread on the
    label (see the README) and the scheduler balances pods over all the values.
  EOT
  type = object({
    spot      = number
    on_demand = number
  })
  default = null
}

variable "capacity_spread_key" {
  description = "Node label that carries the split."
  type        = string
  default     = "capacity-spread"
}

variable "critical_pool" {
  description = "Add an on-demand-only pool for critical workloads: tainted `joiner.dev/critical=true:NoSchedule`, labelled `joiner.dev/critical=true`; only pods that tolerate the taint land there."
  type        = bool
  default     = true
}

variable "critical_limits" {
  description = "Resource limits of the critical pool."
  type        = map(string)
  default     = { cpu = "64", memory = "256Gi" }
}

# --- Size and lifetime ----------------------------------------------------------------------------

variable "limits" {
  description = "Resource limits of the general (or Spot) pool: no launch goes beyond them."
  type        = map(string)
  default     = { cpu = "1000", memory = "4000Gi" }
}

variable "on_demand_limits" {
  description = "Resource limits of the on-demand pool of the split."
  type        = map(string)
  default     = { cpu = "250", memory = "1000Gi" }
}

variable "labels" {
  description = "Extra labels on every node of these pools."
  type        = map(string)
  default     = {}
}

variable "expire_after" {
  description = "Nodes older than this are replaced (\"720h\" = 30 days, or \"Never\")."
  type        = string
  default     = "720h"
}

variable "termination_grace_period" {
  description = "How long a node may take to drain, from its NodeClaim's deletion: then the pods PDBs or do-not-disrupt still hold are deleted and the node is terminated anyway. Null: no cap."
  type        = string
  default     = null
}

variable "consolidation_policy" {
  description = "WhenEmptyOrUnderutilized (remove or replace underused nodes) or WhenEmpty."
  type        = string
  default     = "WhenEmptyOrUnderutilized"

  validation {
    condition     = contains(["WhenEmpty", "WhenEmptyOrUnderutilized"], var.consolidation_policy)
    error_message = "The consolidation_policy must be WhenEmpty or WhenEmptyOrUnderutilized."
  }
}

variable "consolidate_after" {
  description = "How long a node must be empty or underused before it is consolidated."
  type        = string
  default     = "30s"
}

variable "budgets" {
  description = <<-EOT
    Disruption budgets, strictest in force wins: a list of objects with `nodes` (a count or
    a percentage) and optionally `schedule` (cron), `duration` and `reasons` (Empty,
    Underutilized, Drifted; all when absent). Interruptions ignore budgets: the node goes anyway.
  EOT
  type        = any
  default     = [{ nodes = "10%" }]
}
