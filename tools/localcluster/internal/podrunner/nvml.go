package podrunner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// With Config.FakeNVML the runner plays the NVIDIA container toolkit for the fake NVML
// library the tests build (tests/sidecar/gpu/fake_nvml): what a container of a GPU node
// would find there (the node's GPUs, through libnvidia-ml.so.1), it finds through these
// variables, which the fake and cohort's sidecar read.
const (
	// NVMLLibraryEnv names the NVML library cohort loads instead of libnvidia-ml.so.1.
	NVMLLibraryEnv = "COHORT_NVML_LIBRARY"
	// FakeNVMLConfigEnv names the JSON file describing the node's GPUs to the fake.
	FakeNVMLConfigEnv = "FAKE_NVML_CONFIG"
	// FakeNVMLControlEnv names the FIFO the fake makes and reads fault injections from
	// ("xid INDEX CODE", "dbe INDEX COUNT", "lost INDEX", "sm INDEX FRACTION", one a line).
	FakeNVMLControlEnv = "FAKE_NVML_CONTROL_FIFO"
	// nvmlControlFile is the FIFO's name in the pod's directory of the state dir.
	nvmlControlFile = "nvml-control"
	// FakeNVMLAnnotation, "true" on a pod, asks for the fake NVML. Other pods see no NVML, as
	// before: the tests that share the cluster expect a node without a driver.
	FakeNVMLAnnotation = "local-cluster.cohort.dev/fake-nvml"
)

// wantsFakeNVML says whether the pod gets the fake NVML: the runner has one, and the pod asks.
func (r *Runner) wantsFakeNVML(pod *v1.Pod) bool {
	return r.cfg.FakeNVML != "" && pod.Annotations[FakeNVMLAnnotation] == "true"
}

// FakeNVMLConfigPath is the fake NVML config of a node: STATE/nvml/NODE.json.
func FakeNVMLConfigPath(stateDir, node string) string {
	return filepath.Join(stateDir, "nvml", node+".json")
}

// NVMLControlFIFO is the fake NVML control FIFO of a pod: STATE/POD-UID/nvml-control, in
// the pod's own directory, so it goes with the pod.
func NVMLControlFIFO(stateDir, podUID string) string {
	return filepath.Join(stateDir, podUID, nvmlControlFile)
}

// fakeNVMLNode is the fake's config (see tests/sidecar/gpu/fake_nvml/fake_node.h).
type fakeNVMLNode struct {
	DriverVersion     string        `json:"driver_version"`
	NVMLVersion       string        `json:"nvml_version"`
	CUDADriverVersion int           `json:"cuda_driver_version"`
	GPUs              []fakeNVMLGPU `json:"gpus"`
}

type fakeNVMLGPU struct {
	UUID              string           `json:"uuid"`
	Name              string           `json:"name"`
	PCIBusID          string           `json:"pci_bus_id"`
	PCIDeviceID       uint32           `json:"pci_device_id"`
	PCISubsystemID    uint32           `json:"pci_subsystem_id"`
	Memory            map[string]int64 `json:"memory"`
	ComputeCapability [2]int           `json:"compute_capability"`
	NUMANode          int              `json:"numa_node"`
	ECCEnabled        bool             `json:"ecc_enabled"`
	Utilization       map[string]int   `json:"utilization"`
	Temperature       int              `json:"temperature"`
	PowerMW           int              `json:"power_mw"`
	PowerLimitMW      int              `json:"power_limit_mw"`
	SMClockMHz        int              `json:"sm_clock_mhz"`
	PCIeReplay        int              `json:"pcie_replay"`
	ECC               map[string]int   `json:"ecc"`
	RemappedRows      map[string]any   `json:"remapped_rows"`
	MIGMode           map[string]int   `json:"mig_mode"`
}

// h100BusIDs are the PCI buses of the eight GPUs of an HGX H100 board, in NVML's order.
var h100BusIDs = []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// fakeNVMLConfig describes a node with the given number of idle, healthy H100s. Each GPU's
// UUID names the node and the index, GPU-NODE-INDEX, so a test can tell which node a
// report came from. Every eight GPUs are another PCI domain, half the GPUs on each NUMA
// node.
func fakeNVMLConfig(node string, gpus int) fakeNVMLNode {
	config := fakeNVMLNode{
		DriverVersion:     "550.54.15",
		NVMLVersion:       "12.550.54.15",
		CUDADriverVersion: 12040,
		GPUs:              []fakeNVMLGPU{},
	}
	for i := range gpus {
		numa := 0
		if i >= (gpus+1)/2 {
			numa = 1
		}
		config.GPUs = append(config.GPUs, fakeNVMLGPU{
			UUID:              fmt.Sprintf("GPU-%s-%d", node, i),
			Name:              "NVIDIA H100 80GB HBM3",
			PCIBusID:          fmt.Sprintf("%08X:%02X:00.0", i/len(h100BusIDs), h100BusIDs[i%len(h100BusIDs)]),
			PCIDeviceID:       0x233010de,
			PCISubsystemID:    0x16c110de,
			Memory:            map[string]int64{"total": 85520809984, "used": 0, "reserved": 503316480},
			ComputeCapability: [2]int{9, 0},
			NUMANode:          numa,
			ECCEnabled:        true,
			Utilization:       map[string]int{"gpu": 0, "memory": 0},
			Temperature:       30,
			PowerMW:           70000,
			PowerLimitMW:      700000,
			SMClockMHz:        1980,
			ECC:               map[string]int{"volatile_single": 0, "volatile_double": 0, "aggregate_single": 0, "aggregate_double": 0},
			RemappedRows:      map[string]any{"correctable": 0, "uncorrectable": 0, "pending": false, "failure": false},
			MIGMode:           map[string]int{"current": 0, "pending": 0},
		})
	}
	return config
}

// writeFakeNVMLConfigs writes each node's fake NVML config once, as the runner starts
// (after the state dir was cleared); nothing without Config.FakeNVML.
func writeFakeNVMLConfigs(cfg Config) error {
	if cfg.FakeNVML == "" {
		return nil
	}
	for _, node := range cfg.Nodes() {
		path := FakeNVMLConfigPath(cfg.StateDir, node)
		data, err := json.MarshalIndent(fakeNVMLConfig(node, cfg.GPUs), "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nvmlControlFIFO is the pod's fake NVML control FIFO (see NVMLControlFIFO).
func (sb *sandbox) nvmlControlFIFO() string { return filepath.Join(sb.dir, nvmlControlFile) }

// makeNVMLControlFIFO makes the pod's control FIFO before any container starts. The fake
// would make it too, as it first loads; made here, a test that writes to it early blocks
// until the fake reads, instead of creating a plain file the fake would then not use.
// Anyone may open it: the sidecar reading it may run as any user.
func (r *Runner) makeNVMLControlFIFO(pod *v1.Pod, sb *sandbox) error {
	if !r.wantsFakeNVML(pod) {
		return nil
	}
	if err := syscall.Mkfifo(sb.nvmlControlFIFO(), 0o666); err != nil && !os.IsExist(err) {
		return fmt.Errorf("fake NVML control FIFO: %w", err)
	}
	if err := os.Chmod(sb.nvmlControlFIFO(), 0o666); err != nil {
		return fmt.Errorf("fake NVML control FIFO: %w", err)
	}
	return nil
}

// setFakeNVMLEnv points a container of a pod that asks for the fake (FakeNVMLAnnotation) at the fake NVML library, its node's config and its
// pod's control FIFO. It is part of the base environment, so a pod's own env (or envFrom)
// naming these variables wins.
func (r *Runner) setFakeNVMLEnv(env *environment, pod *v1.Pod, sb *sandbox) {
	if !r.wantsFakeNVML(pod) {
		return
	}
	env.set(NVMLLibraryEnv, r.cfg.FakeNVML)
	env.set(FakeNVMLConfigEnv, FakeNVMLConfigPath(r.cfg.StateDir, pod.Spec.NodeName))
	env.set(FakeNVMLControlEnv, sb.nvmlControlFIFO())
}
