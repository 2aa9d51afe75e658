# The smallest joiner configuration: the interruption queue the agent reads Spot
# interruption and rebalance events from, plus who we are in the target account.
# `./scripts/sandbox` applies it against the local AWS emulator.

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
  description = "Name of the cluster; the queue is named after it."
  type        = string
  default     = "quickstart"
}

data "joiner_caller_identity" "current" {}

resource "joiner_interruption_queue" "this" {
  name = "${var.cluster_name}-interruptions"

  # Karpenter's value: interruption notices are useless after a few minutes.
  message_retention_seconds = 300

  tags = {
    "joiner.dev/cluster" = var.cluster_name
  }
}

output "account_id" {
  value = data.joiner_caller_identity.current.account_id
}

output "queue_name" {
  value = joiner_interruption_queue.this.name
}

output "queue_url" {
  value = joiner_interruption_queue.this.url
}

output "queue_arn" {
  value = joiner_interruption_queue.this.arn
}
