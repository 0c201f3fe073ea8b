//go:build tools

// Package tools only names the commands hack/kube-build.sh builds, so that
// go.mod and go.sum cover everything they need.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
