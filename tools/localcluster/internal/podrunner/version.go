package podrunner

import (
	"runtime/debug"
	"strings"
)

// kubeletVersion reports the Kubernetes release whose client libraries the runner is built
// with, so version-aware tools see a consistent node.
func kubeletVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "v1.0.0"
	}
	for _, dep := range info.Deps {
		if dep.Path == "k8s.io/client-go" {
			// client-go v0.X.Y belongs to Kubernetes v1.X.Y.
			return "v1." + strings.TrimPrefix(dep.Version, "v0.")
		}
	}
	return "v1.0.0"
}
