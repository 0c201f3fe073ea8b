//go:build tools

// Package tools only names the command hack/kube-build.sh builds, so that
// go.mod and go.sum cover everything it needs.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
