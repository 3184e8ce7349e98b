package podrunner

import (
	"context"
	"log"
	"os"
	"runtime"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
)

// nodeAgent keeps the Node object and its Lease alive, as the kubelet does.
type nodeAgent struct {
	client kubernetes.Interface
	cfg    Config
}

func (n *nodeAgent) capacity() v1.ResourceList {
	return v1.ResourceList{
		v1.ResourceCPU:              n.cfg.CPU,
		v1.ResourceMemory:           n.cfg.Memory,
		v1.ResourcePods:             resource.MustParse("250"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		GPUResource:                 *resource.NewQuantity(int64(n.cfg.GPUs), resource.DecimalSI),
	}
}

func (n *nodeAgent) register(ctx context.Context) error {
	nodes := n.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: n.cfg.NodeName,
				Labels: map[string]string{
					"kubernetes.io/hostname": n.cfg.NodeName,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     runtime.GOARCH,
				},
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	if err := n.updateStatus(ctx, node); err != nil {
		return err
	}
	return n.renewLease(ctx, node)
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
			node, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
			if err == nil {
				err = n.renewLease(ctx, node)
			}
			if err != nil && ctx.Err() == nil {
				log.Printf("node lease: %v", err)
			}
		case <-status.C:
			node, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
			if err == nil {
				err = n.updateStatus(ctx, node)
			}
			if err != nil && ctx.Err() == nil {
				log.Printf("node status: %v", err)
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
		{Type: v1.NodeHostName, Address: n.cfg.NodeName},
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(n.cfg.KubeletPort)
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
	lease, err := leases.Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      n.cfg.NodeName,
				Namespace: v1.NamespaceNodeLease,
				// As the kubelet does: the Lease goes when the Node goes.
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.cfg.NodeName),
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
	lease.Spec.HolderIdentity = ptr.To(n.cfg.NodeName)
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
