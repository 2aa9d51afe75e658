// Package pg stands in for the "pg" remote-state backend; see ../legacy/unsupported.
package pg

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("pg") }
