// Package consul stands in for the "consul" remote-state backend; see ../legacy/unsupported.
package consul

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("consul") }
