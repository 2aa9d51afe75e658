// Stands in for Terraform's nested module internal/legacy, which the module proxy does not
// serve at the release's commit. Nothing in the terraform binary imports the real one; this
// module also carries the one package the backend stubs share.
module github.com/hashicorp/terraform/internal/legacy

go 1.26

require (
	github.com/hashicorp/terraform v1.16.2
	github.com/zclconf/go-cty v1.18.1
)
