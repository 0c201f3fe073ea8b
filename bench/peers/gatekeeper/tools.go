//go:build tools

// Package tools only names the command bench/peers/build.sh builds, so that
// go.mod and go.sum cover everything it needs.
package tools

import _ "github.com/open-policy-agent/gatekeeper/v3"
