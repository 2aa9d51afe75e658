# The seed's Spot strategies as NodePools, chosen by inputs rather than copied YAML:
# multi-AZ, wide instance diversification with minValues, Spot first with on-demand
# fallback, an optional fixed Spot/on-demand split over a label, a critical on-demand pool,
# expiry and disruption budgets.

locals {
  # Requirements every pool shares: where and what may be launched.
  shape = concat(
    [{ key = "kubernetes.io/arch", operator = "In", values = var.architectures, min_values = null }],
    length(var.zones) > 0 ? [
      { key = "topology.kubernetes.io/zone", operator = "In", values = var.zones, min_values = null }
    ] : [],
    length(var.instance_categories) > 0 ? [
      { key = "karpenter.k8s.aws/instance-category", operator = "In", values = var.instance_categories, min_values = null }
    ] : [],
    [{
      key        = "karpenter.k8s.aws/instance-generation"
      operator   = "Gt"
      values     = [tostring(var.min_instance_generation - 1)]
      min_values = null
    }],
    # Diversification: an explicit family list, or any family, kept at minValues families.
    length(var.instance_families) > 0 ? [{
      key        = "karpenter.k8s.aws/instance-family"
      operator   = "In"
      values     = var.instance_families
      min_values = var.min_instance_families > 0 ? min(var.min_instance_families, length(var.instance_families)) : null
      }] : [{
      key        = "karpenter.k8s.aws/instance-family"
      operator   = "Exists"
      values     = []
      min_values = var.min_instance_families > 0 ? var.min_instance_families : null
    }],
    length(var.instance_sizes) > 0 ? [
      { key = "karpenter.k8s.aws/instance-size", operator = "In", values = var.instance_sizes, min_values = null }
    ] : [],
    length(var.excluded_instance_sizes) > 0 ? [
      { key = "karpenter.k8s.aws/instance-size", operator = "NotIn", values = var.excluded_instance_sizes, min_values = null }
    ] : [],
    length(var.excluded_instance_types) > 0 ? [
      { key = "node.kubernetes.io/instance-type", operator = "NotIn", values = var.excluded_instance_types, min_values = null }
    ] : [],
  )

  split = var.capacity_spread != null

  spot_spread_values = local.split ? [for i in range(1, var.capacity_spread.spot + 1) : tostring(i)] : []
  on_demand_spread_values = local.split ? [
    for i in range(var.capacity_spread.spot + 1, var.capacity_spread.spot + var.capacity_spread.on_demand + 1) : tostring(i)
  ] : []

  capacity_type = {
    general   = var.on_demand_fallback ? ["spot", "on-demand"] : ["spot"]
    spot      = ["spot"]
    on_demand = ["on-demand"]
    critical  = ["on-demand"]
  }

  # Budgets come as free-form objects (Terraform 1.0 has no optional attributes).
  budgets = [for b in var.budgets : {
    nodes    = tostring(b.nodes)
    schedule = lookup(b, "schedule", null)
    duration = lookup(b, "duration", null)
    reasons  = lookup(b, "reasons", null)
  }]

  # Every pool this module can make, with what sets it apart; `enabled` picks. Weights: the
  # split's Spot pool (or the general pool) first; critical pods select their pool by label,
  # so its weight only matters for pods that tolerate its taint without selecting it.
  all_pools = {
    general = {
      weight   = 50
      extra    = [{ key = "karpenter.sh/capacity-type", operator = "In", values = local.capacity_type.general, min_values = null }]
      labels   = {}
      taints   = []
      limits   = var.limits
      critical = false
    }
    spot = {
      weight = 50
      extra = [
        { key = "karpenter.sh/capacity-type", operator = "In", values = local.capacity_type.spot, min_values = null },
        { key = var.capacity_spread_key, operator = "In", values = local.spot_spread_values, min_values = null },
      ]
      labels   = {}
      taints   = []
      limits   = var.limits
      critical = false
    }
    on-demand = {
      weight = 40
      extra = [
        { key = "karpenter.sh/capacity-type", operator = "In", values = local.capacity_type.on_demand, min_values = null },
        { key = var.capacity_spread_key, operator = "In", values = local.on_demand_spread_values, min_values = null },
      ]
      labels   = {}
      taints   = []
      limits   = var.on_demand_limits
      critical = false
    }
    critical = {
      weight   = 10
      extra    = [{ key = "karpenter.sh/capacity-type", operator = "In", values = local.capacity_type.critical, min_values = null }]
      labels   = { "joiner.dev/critical" = "true" }
      taints   = [{ key = "joiner.dev/critical", value = "true", effect = "NoSchedule" }]
      limits   = var.critical_limits
      critical = true
    }
  }

  enabled = concat(
    local.split ? ["spot", "on-demand"] : ["general"],
    var.critical_pool ? ["critical"] : [],
  )

  pools = { for k, v in local.all_pools : k => v if contains(local.enabled, k) }
}

resource "joiner_node_pool" "this" {
  for_each = local.pools

  cluster_name = var.cluster_name
  name         = "${var.name_prefix}${each.key}"
  node_class   = var.node_class
  weight       = each.value.weight
  labels       = merge(var.labels, each.value.labels)
  limits       = each.value.limits

  dynamic "requirement" {
    for_each = concat(local.shape, each.value.extra)
    content {
      key        = requirement.value.key
      operator   = requirement.value.operator
      values     = requirement.value.values
      min_values = requirement.value.min_values
    }
  }

  dynamic "taint" {
    for_each = each.value.taints
    content {
      key    = taint.value.key
      value  = taint.value.value
      effect = taint.value.effect
    }
  }

  expire_after             = var.expire_after
  termination_grace_period = var.termination_grace_period

  disruption {
    # Critical nodes are only removed when empty: their pods are the ones that must not move.
    consolidation_policy = each.value.critical ? "WhenEmpty" : var.consolidation_policy
    consolidate_after    = var.consolidate_after

    dynamic "budget" {
      for_each = local.budgets
      content {
        nodes    = budget.value.nodes
        schedule = budget.value.schedule
        duration = budget.value.duration
        reasons  = budget.value.reasons
      }
    }
  }
}
