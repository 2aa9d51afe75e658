// Package bench only anchors Karpenter's scheduling package in this module's graph, so
// that `go test` can build its benchmark (build tag test_performance) from the module proxy.
package bench

import _ "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
