package podrunner

import (
	"context"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/restartallcontainers"
	"k8s.io/utils/ptr"
)

const (
	// The node lifecycle controller marks a node unreachable after 40-50 s without a
	// renewed Lease; renew well inside that.
	leaseDuration    = 40 * time.Second
	leaseRenewPeriod = 10 * time.Second
	statusPeriod     = 30 * time.Second
	// GPUResource is advertised as the NVIDIA device plugin would, Config.GPUs of them,
	// so the scheduler counts GPUs for real; no device stands behind them.
	GPUResource = v1.ResourceName("nvidia.com/gpu")
	// SpareNodeKey labels every spare node ("true") and taints it (true:NoSchedule), so
	// that only pods that tolerate the taint are placed there and other tests sharing the
	// cluster never see their pods move.
	SpareNodeKey = "cohort.dev/spare-node"
)

// spareNodeTaint keeps pods off a spare node unless they tolerate it.
var spareNodeTaint = v1.Taint{Key: SpareNodeKey, Value: "true", Effect: v1.TaintEffectNoSchedule}

// declaredFeatures are the node features (status.declaredFeatures, sorted as the API server
// requires) of the kubelet behaviour the runner plays. The scheduler's NodeDeclaredFeatures
// plugin places a pod with a RestartAllContainers restart rule only on a node that declares
// RestartAllContainersOnContainerExits.
var declaredFeatures = []string{restartallcontainers.RestartAllContainersOnContainerExits}

// nodeAgent keeps one Node object and its Lease alive, as the kubelet does. The runner
// has one for its node and one for each spare node.
type nodeAgent struct {
	client kubernetes.Interface
	cfg    Config
	name   string
	// spare: the node is one of Config.SpareNodes, labelled and tainted as such.
	spare bool
}

// nodeAgents are the agents of every node the runner serves.
func nodeAgents(client kubernetes.Interface, cfg Config) []*nodeAgent {
	agents := []*nodeAgent{{client: client, cfg: cfg, name: cfg.NodeName}}
	for _, name := range cfg.SpareNodes {
		agents = append(agents, &nodeAgent{client: client, cfg: cfg, name: name, spare: true})
	}
	return agents
}

// newNode is the Node object as the agent creates it: labelled as the kubelet labels its
// node, and for a spare node also labelled and tainted with SpareNodeKey.
func (n *nodeAgent) newNode() *v1.Node {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name,
			Labels: map[string]string{
				"kubernetes.io/hostname": n.name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     runtime.GOARCH,
			},
		},
	}
	markSpare(node, n.spare)
	return node
}

// markSpare gives a spare node its label and taint, and takes them from any other node
// (a node that was spare under another configuration); true if it changed the node.
func markSpare(node *v1.Node, spare bool) bool {
	changed := false
	_, labelled := node.Labels[SpareNodeKey]
	switch {
	case spare && node.Labels[SpareNodeKey] != "true":
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[SpareNodeKey] = "true"
		changed = true
	case !spare && labelled:
		delete(node.Labels, SpareNodeKey)
		changed = true
	}
	var taints []v1.Taint
	tainted := false
	for _, t := range node.Spec.Taints {
		switch {
		case t.Key != SpareNodeKey:
			taints = append(taints, t)
		case spare && !tainted && t.Value == spareNodeTaint.Value && t.Effect == spareNodeTaint.Effect:
			taints = append(taints, t)
			tainted = true
		default:
			changed = true
		}
	}
	if spare && !tainted {
		taints = append(taints, spareNodeTaint)
		changed = true
	}
	node.Spec.Taints = taints
	return changed
}

func (n *nodeAgent) capacity() v1.ResourceList {
	return v1.ResourceList{
		v1.ResourceCPU:              n.cfg.CPU,
		v1.ResourceMemory:           n.cfg.Memory,
		v1.ResourcePods:             *resource.NewQuantity(int64(n.cfg.podsCapacity()), resource.DecimalSI),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		GPUResource:                 *resource.NewQuantity(int64(n.cfg.GPUs), resource.DecimalSI),
	}
}

func (n *nodeAgent) register(ctx context.Context) error {
	nodes := n.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, n.newNode(), metav1.CreateOptions{})
	} else if err == nil && markSpare(node, n.spare) {
		node, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	if err := n.updateStatus(ctx, node); err != nil {
		return err
	}
	return n.renewLease(ctx, node)
}

// removeStaleSpareNodes deletes the spare nodes an earlier configuration had and this one
// has not (etcd's data outlives `down`), so that no pod waits on a node nobody serves. The
// pods bound there are then removed by the pod garbage collector, and a node's Lease goes
// with the node.
func removeStaleSpareNodes(ctx context.Context, client kubernetes.Interface, cfg Config) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: SpareNodeKey + "=true"})
	if err != nil {
		return err
	}
	for _, node := range nodes.Items {
		if cfg.serves(node.Name) {
			continue
		}
		log.Printf("deleting spare node %s: not served any more", node.Name)
		err := client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (n *nodeAgent) heartbeat(ctx context.Context) {
	lease := time.NewTicker(leaseRenewPeriod)
	status := time.NewTicker(statusPeriod)
	defer lease.Stop()
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err == nil {
				err = n.renewLease(ctx, node)
			}
			if err != nil && ctx.Err() == nil {
				log.Printf("node %s lease: %v", n.name, err)
			}
		case <-status.C:
			node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err == nil {
				err = n.updateStatus(ctx, node)
			}
			if err != nil && ctx.Err() == nil {
				log.Printf("node %s status: %v", n.name, err)
			}
		}
	}
}

func (n *nodeAgent) updateStatus(ctx context.Context, node *v1.Node) error {
	now := metav1.Now()
	node = node.DeepCopy()
	capacity := n.capacity()
	node.Status.Capacity = capacity
	node.Status.Allocatable = capacity
	node.Status.Phase = v1.NodeRunning
	node.Status.Addresses = []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: n.cfg.NodeIP.String()},
		{Type: v1.NodeHostName, Address: n.name},
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(n.cfg.KubeletPort)
	node.Status.DeclaredFeatures = slices.Clone(declaredFeatures)
	node.Status.NodeInfo = v1.NodeSystemInfo{
		KubeletVersion:          kubeletVersion(),
		OperatingSystem:         "linux",
		Architecture:            runtime.GOARCH,
		OSImage:                 osImage(),
		ContainerRuntimeVersion: "cohort-pod-runner://local",
		KernelVersion:           kernelVersion(),
	}
	condition := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, message string) v1.NodeCondition {
		c := v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message,
			LastHeartbeatTime: now, LastTransitionTime: now}
		for _, old := range node.Status.Conditions {
			if old.Type == t && old.Status == s {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	node.Status.Conditions = []v1.NodeCondition{
		condition(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "cohort pod runner is posting ready status"),
		condition(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", ""),
		condition(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
		condition(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", ""),
	}
	_, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func (n *nodeAgent) renewLease(ctx context.Context, node *v1.Node) error {
	leases := n.client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      n.name,
				Namespace: v1.NamespaceNodeLease,
				// As the kubelet does: the Lease goes when the Node goes.
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.name),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration.Seconds())),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(n.name)
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func osImage() string {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "linux"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "linux"
}

func kernelVersion() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
