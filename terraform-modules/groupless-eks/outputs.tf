output "cluster_name" {
  description = "EKS cluster name: what `joiner_node_pool.cluster_name` takes."
  value       = local.cluster.name
}

output "cluster_arn" {
  description = "EKS cluster ARN."
  value       = local.cluster.arn
}

output "cluster_endpoint" {
  description = "Kubernetes API URL."
  value       = local.cluster.endpoint
}

output "cluster_certificate_authority" {
  description = "Base64 PEM of the cluster CA (kubeconfig's certificate-authority-data)."
  value       = local.cluster.certificate_authority
}

output "kubernetes_version" {
  description = "Control-plane Kubernetes version."
  value       = local.cluster.version
}

output "oidc_provider_arn" {
  description = "IAM OIDC provider, for the IRSA roles of your own workloads."
  value       = local.cluster.oidc_provider_arn
}

output "oidc_issuer" {
  description = "OIDC issuer URL, for IRSA trust policies."
  value       = local.cluster.oidc_issuer
}

output "subnet_ids" {
  description = "Subnets the cluster, Fargate and the nodes use."
  value       = local.subnet_ids
}

output "availability_zones" {
  description = "Zones of the discovered subnets (null when subnet_ids were given): the zones NodePools can use."
  value       = var.subnet_ids == null ? data.joiner_subnets.discovered[0].availability_zones : null
}

output "discovery_tag" {
  description = "Value of the discovery tag (`discovery_tag_key`) subnets and security groups are selected by."
  value       = local.discovery
}

output "queue_url" {
  description = "Interruption queue URL (the agent polls it)."
  value       = joiner_interruption_queue.this.url
}

output "queue_arn" {
  description = "Interruption queue ARN."
  value       = joiner_interruption_queue.this.arn
}

output "interruption_rule_names" {
  description = "EventBridge rule per event kind."
  value       = joiner_interruption_rules.this.rule_names
}

output "agent_role_arn" {
  description = "The agent's IRSA role."
  value       = joiner_agent_role.agent.arn
}

output "agent_namespace" {
  description = "Namespace the agent runs in."
  value       = var.agent_namespace
}

output "node_role_name" {
  description = "IAM role of the nodes; extra NodeClasses take it as `role`."
  value       = joiner_node_role.node.name
}

output "node_role_arn" {
  description = "IAM role ARN of the nodes (e.g. for aws-auth or access entries)."
  value       = joiner_node_role.node.arn
}

output "node_instance_profile" {
  description = "Instance profile the nodes are launched with."
  value       = joiner_node_role.node.instance_profile_name
}

output "fargate_role_arn" {
  description = "Fargate pod execution role, for more Fargate profiles."
  value       = joiner_fargate_role.fargate.arn
}

output "node_class_name" {
  description = "The default NodeClass: what `spot-node-pools` and your own NodePools take as node_class. Referencing it orders NodePools after the agent."
  value       = joiner_node_class.default.name
}

output "authentication_mode" {
  description = "The cluster's authentication mode."
  value       = local.cluster.authentication_mode
}

output "node_access_entry_arn" {
  description = "ARN of the node role's EC2_LINUX access entry (null when node_access_entry = false)."
  value       = one(joiner_access_entry.node[*].arn)
}

output "admin_principal_arns" {
  description = "The principals with a cluster-admin access entry made by this module."
  value       = sort(keys(joiner_access_entry.admin))
}
