package podrunner

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func nodeConfig(spares ...string) Config {
	return Config{
		NodeName: "local", SpareNodes: spares, NodeIP: netip.MustParseAddr("10.244.0.1"),
		CPU: resource.MustParse("32"), Memory: resource.MustParse("64Gi"), GPUs: 4, KubeletPort: 10250,
	}
}

func TestConfigServesItsNodeAndSpareNodesOnly(t *testing.T) {
	cfg := nodeConfig("local-spare-1")
	for node, want := range map[string]bool{"local": true, "local-spare-1": true, "local-spare-2": false, "": false} {
		if got := cfg.serves(node); got != want {
			t.Errorf("serves(%q) = %v, want %v", node, got, want)
		}
	}
}

func TestSpareNodesAreRegisteredLikeTheNodeButTaintedAndLabelled(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	for _, agent := range nodeAgents(client, nodeConfig("local-spare-1", "local-spare-2")) {
		if err := agent.register(ctx); err != nil {
			t.Fatalf("register %s: %v", agent.name, err)
		}
	}
	for _, name := range []string{"local", "local-spare-1", "local-spare-2"} {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spare := name != "local"
		if node.Labels["kubernetes.io/hostname"] != name || (node.Labels[SpareNodeKey] == "true") != spare {
			t.Errorf("%s: labels %v", name, node.Labels)
		}
		wantTaints := 0
		if spare {
			wantTaints = 1
		}
		if len(node.Spec.Taints) != wantTaints || spare && node.Spec.Taints[0] != spareNodeTaint {
			t.Errorf("%s: taints %v", name, node.Spec.Taints)
		}
		if !slices.Equal(node.Status.DeclaredFeatures, []string{"RestartAllContainersOnContainerExits"}) {
			t.Errorf("%s: declared features %v", name, node.Status.DeclaredFeatures)
		}
		if gpus := node.Status.Capacity[GPUResource]; gpus.Value() != 4 {
			t.Errorf("%s: %s nvidia.com/gpu, want 4", name, gpus.String())
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || c.Type == v1.NodeReady && c.Status == v1.ConditionTrue
		}
		if !ready {
			t.Errorf("%s: not Ready: %v", name, node.Status.Conditions)
		}
		lease, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != name {
			t.Errorf("%s: lease %+v, %v", name, lease, err)
		}
	}
}

func TestSpareNodesOfAnEarlierConfigurationGoAndANodeNoLongerSpareLosesItsTaint(t *testing.T) {
	ctx := context.Background()
	other := v1.Taint{Key: "example.com/other", Effect: v1.TaintEffectNoExecute}
	spareLabels := map[string]string{SpareNodeKey: "true"}
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "local", Labels: map[string]string{SpareNodeKey: "true"}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{spareNodeTaint, other}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "local-spare-1", Labels: spareLabels}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "local-spare-3", Labels: spareLabels}},
	)
	cfg := nodeConfig("local-spare-1")
	if err := removeStaleSpareNodes(ctx, client, cfg); err != nil {
		t.Fatal(err)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"local", "local-spare-1"}) {
		t.Errorf("nodes left %v, want local and local-spare-1", names)
	}
	if err := nodeAgents(client, cfg)[0].register(ctx); err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "local", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels[SpareNodeKey]; ok || len(node.Spec.Taints) != 1 || node.Spec.Taints[0] != other {
		t.Errorf("main node keeps spare marks: labels %v, taints %v", node.Labels, node.Spec.Taints)
	}
}
