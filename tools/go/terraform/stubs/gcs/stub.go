// Package gcs stands in for the "gcs" remote-state backend; see ../legacy/unsupported.
package gcs

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("gcs") }
