// Package podrunner stands in for the kubelet of a one-node local cluster: it registers
// the node, and runs the containers of each pod the scheduler binds to it as local
// processes, each pod in its own network namespace, reporting status back to the API.
package podrunner

import (
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Config is everything the runner needs to know about its host and cluster.
type Config struct {
	NodeName string
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

	// ShutdownGrace caps the termination grace period when the runner itself stops.
	ShutdownGrace time.Duration
}
