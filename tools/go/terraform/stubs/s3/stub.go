// Package s3 stands in for the "s3" remote-state backend; see ../legacy/unsupported.
package s3

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("s3") }
