// Package anchor only puts the regression suite's packages and its test libraries in this
// module's graph, so that `go test -c` can build the suite from the module proxy.
package anchor

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/karpenter/test/pkg/environment/common"
)
