output "node_pool_names" {
  description = "NodePool name per role (general or spot/on-demand, critical)."
  value       = { for k, p in joiner_node_pool.this : k => p.name }
}

output "capacity_spread_key" {
  description = "The label workloads spread over for the Spot/on-demand split (null without a split)."
  value       = local.split ? var.capacity_spread_key : null
}

output "capacity_spread_values" {
  description = "Label values of the split: spot and on_demand lists (null without a split)."
  value = local.split ? {
    spot      = local.spot_spread_values
    on_demand = local.on_demand_spread_values
  } : null
}

output "critical_selector" {
  description = "nodeSelector and toleration a critical workload adds (null without a critical pool)."
  value = var.critical_pool ? {
    node_selector = { "joiner.dev/critical" = "true" }
    toleration    = { key = "joiner.dev/critical", operator = "Equal", value = "true", effect = "NoSchedule" }
  } : null
}

output "admitted_instance_types" {
  description = "Per pool, what its requirements admit (count, sample, cheapest and dearest Spot and on-demand $/h), computed at plan time: what a reviewer compares before and after a change."
  value       = { for k, p in joiner_node_pool.this : k => p.admitted_instance_types }
}
