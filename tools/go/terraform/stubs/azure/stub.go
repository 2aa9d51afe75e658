// Package azure stands in for the "azurerm" remote-state backend; see ../legacy/unsupported.
package azure

import (
	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/legacy/unsupported"
)

func New() backend.Backend { return unsupported.New("azurerm") }
