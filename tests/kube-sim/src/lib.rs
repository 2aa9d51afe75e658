//! kube-sim: a test and sandbox stand-in for a Kubernetes API server.
