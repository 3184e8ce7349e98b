// cohort-pod-runner stands in for the kubelet on the local cluster's node (and its spare
// nodes, all this one host): it runs the containers of the pods the scheduler binds to them
// as local processes. `local-cluster up` starts it; see tools/README.md.
package main

import (
	"context"
	"flag"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"cohort.dev/tools/localcluster/internal/podrunner"
)

func main() {
	var cfg podrunner.Config
	var kubeconfig, nodeIP, podCIDR, pathPrepend string
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the runner's identity (required)")
	flag.StringVar(&cfg.NodeName, "node-name", "local", "name of the Node object")
	var spareNodes string
	flag.StringVar(&spareNodes, "spare-nodes", "", "comma-separated names of more Node objects to serve, tainted "+podrunner.SpareNodeKey+"=true:NoSchedule")
	flag.StringVar(&nodeIP, "node-ip", "10.244.0.1", "the bridge's address: node InternalIP and pod gateway")
	flag.StringVar(&podCIDR, "pod-cidr", "10.244.0.0/16", "pod addresses")
	flag.StringVar(&cfg.Bridge, "bridge", "cohort0", "bridge the pod network namespaces join")
	flag.StringVar(&cfg.APIHost, "api-host", "10.244.0.1", "apiserver address given to pods")
	flag.IntVar(&cfg.APIPort, "api-port", 443, "apiserver port given to pods")
	var apiForward string
	flag.StringVar(&apiForward, "api-forward", "10.244.0.1:443,10.244.0.1:6443",
		"comma-separated gateway addresses that forward to --api-server")
	flag.StringVar(&cfg.APIServer, "api-server", "127.0.0.1:6443", "the apiserver's loopback address")
	flag.StringVar(&cfg.StateDir, "state-dir", "", "per-pod runtime files (required)")
	flag.StringVar(&cfg.LogDir, "log-dir", "", "container logs (required)")
	flag.StringVar(&cfg.VolumeDir, "volume-dir", "", "directories of the PersistentVolumes provisioned for claims (empty: no provisioning)")
	flag.StringVar(&cfg.MountpointLog, "mountpoint-log", "", "file listing mount points created on the host")
	flag.StringVar(&cfg.BinDir, "bin-dir", "", "directory of cohort binaries that images map to")
	flag.StringVar(&cfg.InitBinary, "init-binary", "", "cohort-container-init (required)")
	flag.StringVar(&pathPrepend, "path-prepend", "", "colon-separated directories put first in containers' PATH")
	flag.StringVar(&cfg.Python, "python", "", "interpreter that runs a container command of python or python3")
	flag.IntVar(&cfg.KubeletPort, "kubelet-port", 10250, "port of the container log endpoint on the node address (0: off)")
	flag.StringVar(&cfg.TLSCertFile, "tls-cert", "", "serving certificate of the log endpoint")
	flag.StringVar(&cfg.TLSKeyFile, "tls-key", "", "its key")
	flag.StringVar(&cfg.ClientCAFile, "client-ca", "", "CA whose clients (the apiserver) may read logs")
	var cpu, memory string
	flag.StringVar(&cpu, "cpu", "32", "CPU the node advertises to the scheduler (a quantity)")
	flag.StringVar(&memory, "memory", "64Gi", "memory the node advertises to the scheduler (a quantity)")
	flag.IntVar(&cfg.GPUs, "gpus", 0, "nvidia.com/gpu the node advertises (no devices behind them)")
	flag.IntVar(&cfg.Pods, "pods", 250, "how many pods each node takes (its pods capacity)")
	flag.StringVar(&cfg.FakeNVML, "fake-nvml", "", "fake libnvidia-ml.so.1 given to the containers of pods annotated "+podrunner.FakeNVMLAnnotation+"=true, with their node's GPUs (empty: none)")
	flag.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 5*time.Second, "longest grace period for pods when the runner stops")
	flag.Parse()

	if kubeconfig == "" || cfg.StateDir == "" || cfg.LogDir == "" || cfg.InitBinary == "" {
		log.Fatal("--kubeconfig, --state-dir, --log-dir and --init-binary are required")
	}
	var err error
	if cfg.CPU, err = resource.ParseQuantity(cpu); err != nil || cfg.CPU.Sign() <= 0 {
		log.Fatalf("--cpu %q: want a positive quantity", cpu)
	}
	if cfg.Memory, err = resource.ParseQuantity(memory); err != nil || cfg.Memory.Sign() <= 0 {
		log.Fatalf("--memory %q: want a positive quantity", memory)
	}
	if cfg.Pods < 1 {
		log.Fatalf("--pods %d: want 1 or more", cfg.Pods)
	}
	if cfg.GPUs < 0 {
		log.Fatalf("--gpus %d: want 0 or more", cfg.GPUs)
	}
	if cfg.NodeIP, err = netip.ParseAddr(nodeIP); err != nil {
		log.Fatalf("--node-ip: %v", err)
	}
	if cfg.PodCIDR, err = netip.ParsePrefix(podCIDR); err != nil {
		log.Fatalf("--pod-cidr: %v", err)
	}
	for _, addr := range strings.Split(apiForward, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			cfg.APIForward = append(cfg.APIForward, addr)
		}
	}
	for _, name := range strings.Split(spareNodes, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if slices.Contains(cfg.Nodes(), name) {
			log.Fatalf("--spare-nodes: %s is named twice or is --node-name", name)
		}
		cfg.SpareNodes = append(cfg.SpareNodes, name)
	}
	if cfg.FakeNVML != "" {
		if cfg.FakeNVML, err = filepath.Abs(cfg.FakeNVML); err != nil {
			log.Fatalf("--fake-nvml: %v", err)
		}
		if _, err := os.Stat(cfg.FakeNVML); err != nil {
			log.Fatalf("--fake-nvml: %v", err)
		}
	}
	for _, dir := range filepath.SplitList(pathPrepend) {
		if strings.TrimSpace(dir) != "" {
			cfg.PathPrepend = append(cfg.PathPrepend, dir)
		}
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	restConfig.QPS, restConfig.Burst = 50, 100
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		log.Fatalf("client: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := podrunner.New(cfg, client).Run(ctx); err != nil {
		log.Printf("pod runner: %v", err)
		os.Exit(1)
	}
	log.Printf("pod runner stopped")
}
