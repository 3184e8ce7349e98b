package podrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEveryNodeGetsAFakeNVMLConfigWithItsOwnGPUs(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{NodeName: "local", SpareNodes: []string{"local-spare-1"}, GPUs: 10, StateDir: dir, FakeNVML: "/opt/libnvidia-ml.so.1"}
	if err := writeFakeNVMLConfigs(cfg); err != nil {
		t.Fatal(err)
	}
	for _, node := range cfg.Nodes() {
		data, err := os.ReadFile(filepath.Join(dir, "nvml", node+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var config struct {
			GPUs []struct {
				UUID     string `json:"uuid"`
				PCIBusID string `json:"pci_bus_id"`
			} `json:"gpus"`
		}
		if err := json.Unmarshal(data, &config); err != nil {
			t.Fatal(err)
		}
		if len(config.GPUs) != 10 {
			t.Fatalf("%s: %d GPUs, want 10", node, len(config.GPUs))
		}
		busIDs := map[string]bool{}
		for i, gpu := range config.GPUs {
			if want := fmt.Sprintf("GPU-%s-%d", node, i); gpu.UUID != want {
				t.Errorf("%s: GPU %d has UUID %s, want %s", node, i, gpu.UUID, want)
			}
			if busIDs[gpu.PCIBusID] {
				t.Errorf("%s: PCI bus id %s twice", node, gpu.PCIBusID)
			}
			busIDs[gpu.PCIBusID] = true
		}
	}
}

func TestWithoutAFakeNVMLNothingIsWrittenOrSet(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{cfg: Config{NodeName: "local", GPUs: 4, StateDir: dir}}
	sb := &sandbox{dir: filepath.Join(dir, "uid-1"), hostname: "w"}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "uid-1",
		Annotations: map[string]string{FakeNVMLAnnotation: "true"}}, Spec: v1.PodSpec{NodeName: "local"}}
	if err := writeFakeNVMLConfigs(r.cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.makeNVMLControlFIFO(pod, sb); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("state dir has %v", entries)
	}
	expectNoFakeNVMLEnv(t, r, pod, sb, "without a fake NVML")
}

func TestContainersGetTheFakeNVMLOfTheirNodeUnlessTheySetItThemselves(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{cfg: Config{NodeName: "local", SpareNodes: []string{"local-spare-1"}, StateDir: dir,
		FakeNVML: "/opt/libnvidia-ml.so.1", APIHost: "10.244.0.1", APIPort: 443}}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ml", UID: "uid-1",
			Annotations: map[string]string{FakeNVMLAnnotation: "true"}},
		Spec: v1.PodSpec{NodeName: "local-spare-1"},
	}
	sb := &sandbox{dir: filepath.Join(dir, "uid-1"), hostname: "w"}
	if err := os.MkdirAll(sb.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.makeNVMLControlFIFO(pod, sb); err != nil {
			t.Fatal(err)
		}
	}
	fifo := filepath.Join(dir, "uid-1", "nvml-control")
	if fifo != NVMLControlFIFO(dir, "uid-1") {
		t.Errorf("NVMLControlFIFO = %s, want %s", NVMLControlFIFO(dir, "uid-1"), fifo)
	}
	if info, err := os.Stat(fifo); err != nil || info.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("control FIFO %s: %v, %v", fifo, info, err)
	}
	cases := []struct {
		container  v1.Container
		wantConfig string
	}{
		{v1.Container{Name: "sidecar"}, filepath.Join(dir, "nvml", "local-spare-1.json")},
		{v1.Container{Name: "own", Env: []v1.EnvVar{{Name: FakeNVMLConfigEnv, Value: "/mine.json"}}}, "/mine.json"},
	}
	for _, c := range cases {
		env, err := r.containerEnv(context.Background(), pod, &c.container, sb)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{NVMLLibraryEnv: "/opt/libnvidia-ml.so.1", FakeNVMLConfigEnv: c.wantConfig, FakeNVMLControlEnv: fifo}
		for name, value := range want {
			if got, _ := env.lookup(name); got != value {
				t.Errorf("container %s: %s=%q, want %q", c.container.Name, name, got, value)
			}
		}
	}
}

func TestOnlyPodsThatAskGetTheFakeNVML(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{cfg: Config{NodeName: "local", StateDir: dir, FakeNVML: "/opt/libnvidia-ml.so.1",
		APIHost: "10.244.0.1", APIPort: 443}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "uid-2"}, Spec: v1.PodSpec{NodeName: "local"}}
	sb := &sandbox{dir: filepath.Join(dir, "uid-2"), hostname: "w"}
	if err := os.MkdirAll(sb.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.makeNVMLControlFIFO(pod, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(NVMLControlFIFO(dir, "uid-2")); !os.IsNotExist(err) {
		t.Errorf("a pod without %s got a control FIFO (%v)", FakeNVMLAnnotation, err)
	}
	expectNoFakeNVMLEnv(t, r, pod, sb, "for a pod that did not ask for the fake NVML")
}

// expectNoFakeNVMLEnv fails the test if a container of `pod` gets any fake NVML variable.
func expectNoFakeNVMLEnv(t *testing.T, r *Runner, pod *v1.Pod, sb *sandbox, why string) {
	t.Helper()
	env, err := r.containerEnv(context.Background(), pod, &v1.Container{Name: "c"}, sb)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{NVMLLibraryEnv, FakeNVMLConfigEnv, FakeNVMLControlEnv} {
		if v, ok := env.lookup(name); ok {
			t.Errorf("%s=%s %s", name, v, why)
		}
	}
}
