// Package unsupported is the backend every stubbed remote-state backend returns: accepted
// by name, so `terraform` starts, and refused with a clear error when a configuration asks
// for it. joiner's tests use the local backend only.
package unsupported

import (
	"fmt"

	"github.com/hashicorp/terraform/internal/backend"
	"github.com/hashicorp/terraform/internal/configs/configschema"
	"github.com/hashicorp/terraform/internal/states/statemgr"
	"github.com/hashicorp/terraform/internal/tfdiags"
	"github.com/zclconf/go-cty/cty"
)

type stub struct{ name string }

// New returns a backend named name that refuses to be used.
func New(name string) backend.Backend { return stub{name} }

func (s stub) err() tfdiags.Diagnostics {
	var diags tfdiags.Diagnostics
	return diags.Append(tfdiags.Sourceless(tfdiags.Error,
		fmt.Sprintf("The %q backend is not in this build", s.name),
		"This terraform was built by joiner's tools/go/terraform from the Go module proxy, which does not serve Terraform's nested remote-state backend modules; use the local backend, or an official release."))
}

func (s stub) ConfigSchema() *configschema.Block { return &configschema.Block{} }

func (s stub) PrepareConfig(v cty.Value) (cty.Value, tfdiags.Diagnostics) { return v, s.err() }

func (s stub) Configure(cty.Value) tfdiags.Diagnostics { return s.err() }

func (s stub) StateMgr(string) (statemgr.Full, tfdiags.Diagnostics) { return nil, s.err() }

func (s stub) DeleteWorkspace(string, bool) tfdiags.Diagnostics { return s.err() }

func (s stub) Workspaces() ([]string, tfdiags.Diagnostics) { return nil, s.err() }
