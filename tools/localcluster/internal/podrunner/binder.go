package podrunner

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// binder does the scheduler's job for a cluster of one node: every pending pod that asks
// for the default scheduler goes to this node, unless it cannot fit it (a node selector
// the node does not match, or an extended resource such as nvidia.com/gpu the node lacks).
type binder struct {
	client   kubernetes.Interface
	nodeName string
	node     *nodeAgent

	mu      sync.Mutex
	pending map[types.UID]bool
}

func (b *binder) consider(pod *v1.Pod) {
	if pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 {
		return
	}
	if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != v1.DefaultSchedulerName {
		return
	}
	b.mu.Lock()
	if b.pending[pod.UID] {
		b.mu.Unlock()
		return
	}
	b.pending[pod.UID] = true
	b.mu.Unlock()
	go func() {
		defer func() {
			b.mu.Lock()
			delete(b.pending, pod.UID)
			b.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.bind(ctx, pod); err != nil {
			log.Printf("bind %s/%s: %v", pod.Namespace, pod.Name, err)
		}
	}()
}

func (b *binder) bind(ctx context.Context, pod *v1.Pod) error {
	node, err := b.client.CoreV1().Nodes().Get(ctx, b.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if reason := unfit(pod, node); reason != "" {
		return b.markUnschedulable(ctx, pod, reason)
	}
	return b.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     v1.ObjectReference{Kind: "Node", Name: b.nodeName},
	}, metav1.CreateOptions{})
}

// unfit says why the pod cannot run on the node, or "" if it can. CPU and memory are not
// checked: a developer machine runs more than it "has".
func unfit(pod *v1.Pod, node *v1.Node) string {
	for k, v := range pod.Spec.NodeSelector {
		if node.Labels[k] != v {
			return fmt.Sprintf("node %s does not match node selector %s=%s", node.Name, k, v)
		}
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for name, want := range c.Resources.Limits {
			if name == v1.ResourceCPU || name == v1.ResourceMemory || name == v1.ResourceEphemeralStorage {
				continue
			}
			have, ok := node.Status.Allocatable[name]
			if !ok || have.Cmp(want) < 0 {
				return fmt.Sprintf("node %s has %s of %s, container %s needs %s", node.Name, have.String(), name, c.Name, want.String())
			}
		}
	}
	return ""
}

func (b *binder) markUnschedulable(ctx context.Context, pod *v1.Pod, message string) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Message == message {
			return nil
		}
	}
	pod = pod.DeepCopy()
	setCondition(&pod.Status, v1.PodCondition{
		Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: message,
	})
	_, err := b.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}
