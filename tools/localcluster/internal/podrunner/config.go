// Package podrunner stands in for the kubelet of the local cluster: it registers the node
// (and any spare nodes), and runs the containers of each pod the scheduler binds to one of
// them as local processes, each pod in its own network namespace, reporting status back to
// the API.
package podrunner

import (
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Config is everything the runner needs to know about its host and cluster.
type Config struct {
	NodeName string
	// SpareNodes are more Node objects the runner serves besides NodeName, with the same
	// capacity, tainted SpareNodeKey=true:NoSchedule so that only pods that tolerate it
	// land there. They are all this host: pods on every node share the one pod network and
	// node IP.
	SpareNodes []string
	// NodeIP is the bridge's address: the node's InternalIP, the pods' gateway and the
	// apiserver address pods use.
	NodeIP  netip.Addr
	PodCIDR netip.Prefix
	Bridge  string

	// APIHost and APIPort are given to pods as KUBERNETES_SERVICE_HOST/PORT; the runner
	// forwards APIForward (host:port addresses on the gateway) to APIServer (loopback).
	APIHost    string
	APIPort    int
	APIForward []string
	APIServer  string

	// StateDir holds per-pod runtime files (volumes, hosts files, container specs);
	// LogDir holds container logs, laid out like the kubelet's /var/log/pods.
	StateDir string
	LogDir   string
	// VolumeDir holds the directories of the PersistentVolumes the runner provisions.
	VolumeDir string
	// MountpointLog lists mount points created on the host, for `local-cluster down`.
	MountpointLog string

	// BinDir holds cohort's binaries; an image named after one of them runs it.
	BinDir string
	// InitBinary is cohort-container-init.
	InitBinary string
	// PathPrepend goes in front of the containers' PATH (e.g. the repository's .venv/bin).
	PathPrepend []string
	// Python, if set, replaces a container command of python or python3.
	Python string

	// The kubelet-style HTTPS endpoint that serves `kubectl logs`; port 0 turns it off.
	KubeletPort  int
	TLSCertFile  string
	TLSKeyFile   string
	ClientCAFile string

	// What the node advertises: CPU, memory and nvidia.com/gpu (a number, no devices).
	CPU    resource.Quantity
	Memory resource.Quantity
	GPUs   int
	// Pods is how many pods the node takes (its pods capacity; the scheduler's limit).
	Pods int

	// FakeNVML, if set, is the path of a fake libnvidia-ml.so.1 (tests/sidecar/gpu/fake_nvml).
	// The runner then plays the NVIDIA container toolkit: each node gets a fake NVML
	// config describing its GPUs, and every container of a pod that asks
	// (FakeNVMLAnnotation) is pointed at the library, its node's config and its pod's
	// control FIFO (see nvml.go).
	FakeNVML string

	// ShutdownGrace caps the termination grace period when the runner itself stops.
	ShutdownGrace time.Duration
}

// Nodes are the names of every node the runner serves, the main node first.
func (c Config) Nodes() []string {
	return append([]string{c.NodeName}, c.SpareNodes...)
}

// serves says whether pods bound to the node are the runner's to run.
func (c Config) serves(node string) bool {
	return node != "" && slices.Contains(c.Nodes(), node)
}

// defaultNodePods is the pods capacity of a node when Config.Pods is not set.
const defaultNodePods = 250

func (c Config) podsCapacity() int {
	if c.Pods > 0 {
		return c.Pods
	}
	return defaultNodePods
}
