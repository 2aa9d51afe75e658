// Package kubernetes stands in for the "kubernetes" remote-state backend; see ../legacy/unsupported.
package kubernetes

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("kubernetes") }
