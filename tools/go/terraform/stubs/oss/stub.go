// Package oss stands in for the "oss" remote-state backend; see ../legacy/unsupported.
package oss

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("oss") }
