//go:build tools

// Package tools only records the command this module builds. It is never compiled.
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
