package cluster

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGatewayIsTheFirstAddressOfThePodCIDR(t *testing.T) {
	gw, err := Settings{PodCIDR: "10.244.3.7/16"}.Gateway()
	if err != nil || gw.String() != "10.244.0.1/16" {
		t.Errorf("gateway %s, %v", gw, err)
	}
	if _, err := (Settings{PodCIDR: "fd00::/64"}).Gateway(); err == nil {
		t.Error("want an error for an IPv6 pod CIDR")
	}
}

func TestPKIIsMadeOnceAndServingCertificatesFollowThePodNetwork(t *testing.T) {
	l := NewLayout(t.TempDir())
	s := Settings{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", NodeName: "local"}
	if err := ensurePKI(l, s); err != nil {
		t.Fatal(err)
	}
	if !certCovers(l.PKIFile("apiserver.crt"), []net.IP{net.IPv4(10, 244, 0, 1), net.IPv4(10, 96, 0, 1)}) {
		t.Error("apiserver certificate does not name the gateway and the kubernetes service IP")
	}
	s.PodCIDR = "10.77.0.0/16"
	if err := ensurePKI(l, s); err != nil {
		t.Fatal(err)
	}
	if !certCovers(l.PKIFile("apiserver.crt"), []net.IP{net.IPv4(10, 77, 0, 1)}) {
		t.Error("apiserver certificate was not issued again for the new gateway")
	}
}

func TestNodeCapacityComesFromTheEnvironmentAndBadValuesAreRefused(t *testing.T) {
	l := NewLayout(t.TempDir())
	s, err := DefaultSettings(l)
	if err != nil || s.NodeCPU != "32" || s.NodeMemory != "64Gi" || s.NodeGPUs != 4 {
		t.Fatalf("defaults %+v, %v", s, err)
	}
	t.Setenv("COHORT_LOCAL_NODE_GPUS", "8")
	t.Setenv("COHORT_LOCAL_NODE_CPU", "500m")
	if s, err = DefaultSettings(l); err != nil || s.NodeGPUs != 8 || s.NodeCPU != "500m" {
		t.Fatalf("overrides %+v, %v", s, err)
	}
	for name, bad := range map[string]string{
		"COHORT_LOCAL_NODE_GPUS": "-1", "COHORT_LOCAL_NODE_CPU": "lots", "COHORT_LOCAL_NODE_MEMORY": "0",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			if _, err := DefaultSettings(l); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: got %v, want an error naming the variable", name, bad, err)
			}
		})
	}
}

func TestSpareNodesAndTheFakeNVMLComeFromTheEnvironmentAndReachThePodRunner(t *testing.T) {
	l := NewLayout(t.TempDir())
	s, err := DefaultSettings(l)
	if err != nil || s.SpareNodes != 0 || s.FakeNVML != "" || !slices.Equal(s.NodeNames(), []string{"local"}) {
		t.Fatalf("defaults %+v, %v", s, err)
	}
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COHORT_LOCAL_SPARE_NODES", "2")
	t.Setenv("COHORT_LOCAL_FAKE_NVML", lib)
	if s, err = DefaultSettings(l); err != nil || s.SpareNodes != 2 || s.FakeNVML != lib {
		t.Fatalf("overrides %+v, %v", s, err)
	}
	if got := s.NodeNames(); !slices.Equal(got, []string{"local", "local-spare-1", "local-spare-2"}) {
		t.Errorf("node names %v", got)
	}
	var runner component
	for _, c := range coreComponents(l, s) {
		if c.name == "pod-runner" {
			runner = c
		}
	}
	for _, want := range []string{"--spare-nodes=local-spare-1,local-spare-2", "--fake-nvml=" + lib} {
		if !slices.Contains(runner.args, want) {
			t.Errorf("pod runner args %v lack %s", runner.args, want)
		}
	}
	for name, bad := range map[string]string{
		"COHORT_LOCAL_SPARE_NODES": "9", "COHORT_LOCAL_FAKE_NVML": filepath.Join(t.TempDir(), "missing.so"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			if _, err := DefaultSettings(l); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: got %v, want an error naming the variable", name, bad, err)
			}
		})
	}
}
