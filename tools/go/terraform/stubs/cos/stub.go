// Package cos stands in for the "cos" remote-state backend; see ../legacy/unsupported.
package cos

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("cos") }
