//go:build tools

// Package tools only names the command hack/scheduler-plugins-build.sh
// builds, so that go.mod and go.sum cover everything it needs.
package tools

import (
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
