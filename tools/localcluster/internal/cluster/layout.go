// Package cluster is `local-cluster`: it starts and stops the local cluster's processes
// (embedded etcd, kube-apiserver, kube-controller-manager, the pod runner), makes its
// certificates and kubeconfigs, and reports its state.
package cluster

import (
	"path/filepath"
)

// Layout is where everything lives, relative to the repository root.
type Layout struct {
	Root      string // repository root
	State     string // build/local-cluster: everything the cluster writes
	Logs      string // process logs
	PodLogs   string // container logs, laid out like /var/log/pods
	Run       string // PID files and the settings of the running cluster
	PKI       string // certificates and keys
	Etcd      string // etcd's data
	Pods      string // per-pod runtime state of the pod runner
	Volumes   string // the directories of provisioned PersistentVolumes
	ToolsBin  string // build/tools/bin: our and upstream binaries, kubectl and helm
	CohortBin string // build/bin: cohort's binaries, which images map to
}

// NewLayout lays the cluster out under root/build.
func NewLayout(root string) Layout {
	state := filepath.Join(root, "build", "local-cluster")
	return Layout{
		Root:      root,
		State:     state,
		Logs:      filepath.Join(state, "logs"),
		PodLogs:   filepath.Join(state, "logs", "pods"),
		Run:       filepath.Join(state, "run"),
		PKI:       filepath.Join(state, "pki"),
		Etcd:      filepath.Join(state, "etcd"),
		Pods:      filepath.Join(state, "pods"),
		Volumes:   filepath.Join(state, "volumes"),
		ToolsBin:  filepath.Join(root, "build", "tools", "bin"),
		CohortBin: filepath.Join(root, "build", "bin"),
	}
}

// Kubeconfig is the cluster-admin kubeconfig tests and tools use.
func (l Layout) Kubeconfig() string { return filepath.Join(l.State, "kubeconfig") }

// MountpointLog lists mount points containers created on the host.
func (l Layout) MountpointLog() string { return filepath.Join(l.Run, "mountpoints") }

// Binary is one of the binaries in build/tools/bin.
func (l Layout) Binary(name string) string { return filepath.Join(l.ToolsBin, name) }

// PKIFile is a certificate or key.
func (l Layout) PKIFile(name string) string { return filepath.Join(l.PKI, name) }

// ComponentKubeconfig is the kubeconfig of one component's identity.
func (l Layout) ComponentKubeconfig(name string) string {
	return filepath.Join(l.PKI, name+".kubeconfig")
}
