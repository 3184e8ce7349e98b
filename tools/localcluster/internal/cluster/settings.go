package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Settings are the cluster's addresses and names. Defaults can be changed through
// COHORT_LOCAL_* variables at `up`; the values in use are saved so `down` and `status`
// find the same cluster.
type Settings struct {
	PodCIDR     string `json:"podCIDR"`     // pods get addresses here; the bridge has the first
	ServiceCIDR string `json:"serviceCIDR"` // cluster IPs (allocated, not routed)
	Bridge      string `json:"bridge"`
	APIPort     int    `json:"apiPort"`  // on loopback; pods use the gateway on 443 and this port
	EtcdPort    int    `json:"etcdPort"` // client port; the peer port is this + 10
	KubeletPort int    `json:"kubeletPort"`
	NodeName    string `json:"nodeName"`
	// PathPrepend goes first in containers' PATH; Python replaces python/python3.
	PathPrepend string `json:"pathPrepend"`
	Python      string `json:"python"`
	// What the node advertises to the scheduler: CPU and memory as quantities, and a
	// number of nvidia.com/gpu (fake: no device behind them). The same on every machine,
	// so that what fits in tests does not depend on the host.
	NodeCPU    string `json:"nodeCPU"`
	NodeMemory string `json:"nodeMemory"`
	NodeGPUs   int    `json:"nodeGPUs"`
	// NodePods is each node's pods capacity (0 in settings saved before it existed: 250).
	NodePods int `json:"nodePods,omitempty"`
	// SpareNodes is how many more nodes (SpareNodeNames) there are. Each advertises the
	// same and is tainted, so that only pods that tolerate cohort.dev/spare-node=true:
	// NoSchedule land there. The one pod runner serves them all, on this one host.
	SpareNodes int `json:"spareNodes"`
	// FakeNVML, if set, is the fake libnvidia-ml.so.1 the containers of pods annotated
	// local-cluster.cohort.dev/fake-nvml: "true" get, with their node's GPUs and their pod's
	// control FIFO (see tools/README.md).
	FakeNVML string `json:"fakeNVML,omitempty"`
	// Addons running besides the core (`up --addons`): AddonKueue, AddonCoscheduling.
	Addons []string `json:"addons,omitempty"`
	// WithoutGenericWorkload (COHORT_LOCAL_GENERIC_WORKLOAD=false) leaves the GenericWorkload
	// feature gate off: no scheduling.k8s.io/v1beta1 Workload and PodGroup, no gang scheduling
	// by the kube-scheduler, as on a cluster before Kubernetes 1.37 or without the gate.
	WithoutGenericWorkload bool `json:"withoutGenericWorkload,omitempty"`
}

// GenericWorkloadFlags are the API server's flags for the Workload API and the kube-scheduler's
// gang scheduling (the GenericWorkload gate, beta and off by default in 1.37), or none.
func (s Settings) GenericWorkloadFlags(apiServer bool) []string {
	if s.WithoutGenericWorkload {
		return nil
	}
	flags := []string{"--feature-gates=GenericWorkload=true"}
	if apiServer {
		flags = append(flags, "--runtime-config=scheduling.k8s.io/v1beta1=true")
	}
	return flags
}

// DefaultSettings reads COHORT_LOCAL_* overrides from the environment.
func DefaultSettings(l Layout) (Settings, error) {
	s := Settings{
		PodCIDR:     envOr("COHORT_LOCAL_POD_CIDR", "10.244.0.0/16"),
		ServiceCIDR: envOr("COHORT_LOCAL_SERVICE_CIDR", "10.96.0.0/16"),
		Bridge:      envOr("COHORT_LOCAL_BRIDGE", "cohort0"),
		NodeName:    envOr("COHORT_LOCAL_NODE_NAME", "local"),
		Python:      os.Getenv("COHORT_LOCAL_PYTHON"),
		NodeCPU:     envOr("COHORT_LOCAL_NODE_CPU", "32"),
		NodeMemory:  envOr("COHORT_LOCAL_NODE_MEMORY", "64Gi"),
	}
	venv := filepath.Join(l.Root, ".venv", "bin")
	if _, err := os.Stat(venv); err == nil {
		s.PathPrepend = venv
	}
	if v, ok := os.LookupEnv("COHORT_LOCAL_PATH"); ok {
		s.PathPrepend = v
	}
	var err error
	if s.APIPort, err = envInt("COHORT_LOCAL_API_PORT", 6443); err != nil {
		return s, err
	}
	if s.EtcdPort, err = envInt("COHORT_LOCAL_ETCD_PORT", 23790); err != nil {
		return s, err
	}
	if s.KubeletPort, err = envInt("COHORT_LOCAL_KUBELET_PORT", 10250); err != nil {
		return s, err
	}
	if s.NodeGPUs, err = envCount("COHORT_LOCAL_NODE_GPUS", 4); err != nil {
		return s, err
	}
	if s.NodePods, err = envCountUpTo("COHORT_LOCAL_NODE_PODS", 250, maxNodePods); err != nil {
		return s, err
	}
	if s.NodePods < 1 {
		return s, fmt.Errorf("COHORT_LOCAL_NODE_PODS=%d: want 1 to %d", s.NodePods, maxNodePods)
	}
	if s.SpareNodes, err = envCountUpTo("COHORT_LOCAL_SPARE_NODES", 0, maxSpareNodes); err != nil {
		return s, err
	}
	switch v := os.Getenv("COHORT_LOCAL_GENERIC_WORKLOAD"); v {
	case "", "true", "1":
	case "false", "0":
		s.WithoutGenericWorkload = true
	default:
		return s, fmt.Errorf("COHORT_LOCAL_GENERIC_WORKLOAD=%q: want true or false", v)
	}
	if s.FakeNVML, err = fakeNVMLFromEnv(); err != nil {
		return s, err
	}
	for name, q := range map[string]string{"COHORT_LOCAL_NODE_CPU": s.NodeCPU, "COHORT_LOCAL_NODE_MEMORY": s.NodeMemory} {
		if v, err := resource.ParseQuantity(q); err != nil || v.Sign() <= 0 {
			return s, fmt.Errorf("%s=%q: want a positive quantity (e.g. 32, 64Gi)", name, q)
		}
	}
	_, err = s.Gateway()
	return s, err
}

// maxSpareNodes caps COHORT_LOCAL_SPARE_NODES.
const maxSpareNodes = 8

// maxNodePods caps COHORT_LOCAL_NODE_PODS: the pod CIDR (/16) holds far more, but one host
// runs every pod.
const maxNodePods = 2000

// SpareNodeNames are the spare nodes' names: NODE-spare-1 to NODE-spare-N.
func (s Settings) SpareNodeNames() []string {
	var names []string
	for i := 1; i <= s.SpareNodes; i++ {
		names = append(names, s.NodeName+"-spare-"+strconv.Itoa(i))
	}
	return names
}

// NodePodsOrDefault is NodePods, or 250 for settings saved before it existed.
func (s Settings) NodePodsOrDefault() int {
	if s.NodePods > 0 {
		return s.NodePods
	}
	return 250
}

// NodeNames are every node's name, the main node first.
func (s Settings) NodeNames() []string {
	return append([]string{s.NodeName}, s.SpareNodeNames()...)
}

// fakeNVMLFromEnv reads COHORT_LOCAL_FAKE_NVML: empty, or a file, made absolute.
func fakeNVMLFromEnv() (string, error) {
	v := os.Getenv("COHORT_LOCAL_FAKE_NVML")
	if v == "" {
		return "", nil
	}
	path, err := filepath.Abs(v)
	if err == nil {
		var info os.FileInfo
		if info, err = os.Stat(path); err == nil && info.IsDir() {
			err = fmt.Errorf("a directory")
		}
	}
	if err != nil {
		return "", fmt.Errorf("COHORT_LOCAL_FAKE_NVML=%q: want the fake libnvidia-ml.so.1: %v", v, err)
	}
	return path, nil
}

// Gateway is the bridge's address: node IP, pods' default route and the apiserver.
func (s Settings) Gateway() (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(s.PodCIDR)
	if err != nil || !prefix.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("COHORT_LOCAL_POD_CIDR %q: want an IPv4 CIDR", s.PodCIDR)
	}
	return netip.PrefixFrom(prefix.Masked().Addr().Next(), prefix.Bits()), nil
}

// APIServiceIP is the first cluster IP, which the apiserver gives the kubernetes service.
func (s Settings) APIServiceIP() (netip.Addr, error) {
	prefix, err := netip.ParsePrefix(s.ServiceCIDR)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("service CIDR %q: %w", s.ServiceCIDR, err)
	}
	return prefix.Masked().Addr().Next(), nil
}

// APIServerURL is where clients on the host reach the apiserver: loopback only.
func (s Settings) APIServerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(s.APIPort)
}

// PodAPIPort is the port pods use on the gateway: the kubernetes service's port.
const PodAPIPort = 443

func (s Settings) save(path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// loadSettings returns the saved settings of the cluster, or the defaults.
func loadSettings(l Layout) (Settings, error) {
	data, err := os.ReadFile(filepath.Join(l.Run, "settings.json"))
	if err != nil {
		return DefaultSettings(l)
	}
	var s Settings
	if err := json.Unmarshal(data, &s); err != nil {
		return DefaultSettings(l)
	}
	return s, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envCount reads a count of 0 or more.
func envCount(name string, def int) (int, error) {
	return envCountUpTo(name, def, 1024)
}

// envCountUpTo reads a count from 0 to limit.
func envCountUpTo(name string, def, limit int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > limit {
		return 0, fmt.Errorf("%s=%q: want a number from 0 to %d", name, v, limit)
	}
	return n, nil
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("%s=%q: want a port number", name, v)
	}
	return n, nil
}
