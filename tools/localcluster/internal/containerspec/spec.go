// Package containerspec is the contract between the pod runner and cohort-container-init:
// the runner writes one Spec per container start as JSON, and the init process reads it,
// builds the container's namespaces and mounts, and runs the workload.
package containerspec

import (
	"encoding/json"
	"fmt"
	"os"
)

// Mount is a bind mount of a host path (a pod volume directory, a hosts file, ...) onto
// a path inside the container's private mount namespace.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// PauseCommand is the command line of the process that holds a pod's shared PID namespace
// (cohort-container-init started under this name). Kubernetes' pause container shows up
// as /pause in a pod with shareProcessNamespace, and programs that look for the workload
// among the pod's processes (cohort-sidecar's default pattern) leave it out by that name.
const PauseCommand = "/pause"

// Spec describes one container process.
type Spec struct {
	// NetNS is the path of the pod's network namespace (/run/netns/NAME).
	NetNS string `json:"netns"`
	// PIDNamespace is the path of the pod's shared PID namespace (/proc/PID/ns/pid of the
	// pause process) when the pod has shareProcessNamespace. Then init itself stays in the
	// runner's PID namespace and starts the workload in this one; when empty, init is PID 1
	// of a PID namespace of the container's own.
	PIDNamespace string `json:"pidNamespace,omitempty"`
	// Hostname is set in the container's own UTS namespace.
	Hostname string  `json:"hostname"`
	Mounts   []Mount `json:"mounts"`
	// MountpointLog is a file to which init appends every mount target it had to create
	// on the host, so that `local-cluster down` can remove them again.
	MountpointLog string `json:"mountpointLog"`
	// WorkingDir is the container's workingDir, inside its view; if empty, the workload
	// starts in ScratchDir, a host directory private to the container.
	WorkingDir string   `json:"workingDir,omitempty"`
	ScratchDir string   `json:"scratchDir"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
}

// Write stores the spec at path.
func (s *Spec) Write(path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Read loads a spec written by Write.
func Read(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("container spec %s: %w", path, err)
	}
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("container spec %s: empty argv", path)
	}
	return &s, nil
}
