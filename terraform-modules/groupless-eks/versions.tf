terraform {
  # Terraform 1.0 is the oldest version the project tests with; nothing here needs newer.
  required_version = ">= 1.0"

  required_providers {
    joiner = {
      source = "joiner/joiner"
    }
  }
}
