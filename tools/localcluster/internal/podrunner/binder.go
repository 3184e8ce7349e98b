package podrunner

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// binder does the scheduler's job for a cluster of one node: every pending pod that asks
// for the default scheduler goes to this node, unless it cannot fit it (a node selector
// the node does not match, an extended resource such as nvidia.com/gpu the node lacks) or
// it must wait (a persistentVolumeClaim that is not bound yet, as the scheduler's volume
// binding waits; the runner considers the pod again when the claim changes).
type binder struct {
	client   kubernetes.Interface
	nodeName string
	node     *nodeAgent

	mu sync.Mutex
	// pending holds the pods being bound; true: consider the pod again once that ends,
	// because something changed meanwhile (its claim was bound).
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
	if _, busy := b.pending[pod.UID]; busy {
		b.pending[pod.UID] = true
		b.mu.Unlock()
		return
	}
	b.pending[pod.UID] = false
	b.mu.Unlock()
	go func() {
		for {
			b.attempt(pod)
			b.mu.Lock()
			again := b.pending[pod.UID]
			if !again {
				delete(b.pending, pod.UID)
				b.mu.Unlock()
				return
			}
			b.pending[pod.UID] = false
			b.mu.Unlock()
		}
	}()
}

// attempt binds the pod unless it is bound or gone already.
func (b *binder) attempt(pod *v1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	latest, err := b.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err == nil && latest.UID == pod.UID && latest.Spec.NodeName == "" && latest.DeletionTimestamp == nil {
		err = b.bind(ctx, latest)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		log.Printf("bind %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func (b *binder) bind(ctx context.Context, pod *v1.Pod) error {
	node, err := b.client.CoreV1().Nodes().Get(ctx, b.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if reason := unfit(pod, node); reason != "" {
		return b.markUnschedulable(ctx, pod, reason)
	}
	if reason, err := b.unboundClaim(ctx, pod); err != nil || reason != "" {
		if err != nil {
			return err
		}
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

// unboundClaim says which of the pod's claims keeps it from running, and why, or "".
func (b *binder) unboundClaim(ctx context.Context, pod *v1.Pod) (string, error) {
	for _, name := range claimNames(pod) {
		pvc, err := b.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("persistentvolumeclaim %q not found", name), nil
		}
		if err != nil {
			return "", err
		}
		if reason := unusableClaim(pvc); reason != "" {
			return reason, nil
		}
	}
	return "", nil
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
