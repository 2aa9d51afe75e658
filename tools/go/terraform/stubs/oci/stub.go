// Package oci stands in for the "oci" remote-state backend; see ../legacy/unsupported.
package oci

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("oci") }
