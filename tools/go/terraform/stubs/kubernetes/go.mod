// Stands in for Terraform's nested module internal/backend/remote-state/kubernetes (not served by
// the module proxy at the release's commit): the "kubernetes" backend, refused when used.
module github.com/hashicorp/terraform/internal/backend/remote-state/kubernetes

go 1.26

require (
	github.com/hashicorp/terraform v1.16.2
	github.com/hashicorp/terraform/internal/legacy v0.0.0-00010101000000-000000000000
)
