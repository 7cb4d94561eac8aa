//go:build tools

// Package tools only records the command this module builds. It is never compiled.
package tools

import _ "sigs.k8s.io/jobset"
