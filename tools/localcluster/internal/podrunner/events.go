package podrunner

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// nodeEvents posts Events (Started, Killing, Unhealthy, ...) as the kubelet would, so
// `kubectl describe pod` explains what happened. Each node has its own recorder, so an
// event names the host of the pod's node, as that node's kubelet would.
type nodeEvents struct {
	recorders map[string]record.EventRecorder
	// main records for a pod not bound to any of the nodes (never expected).
	main record.EventRecorder
}

// newNodeEvents records for the given nodes, the main node first, through one broadcaster.
func newNodeEvents(client kubernetes.Interface, nodes []string) *nodeEvents {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	e := &nodeEvents{recorders: map[string]record.EventRecorder{}}
	for _, node := range nodes {
		e.recorders[node] = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: node})
	}
	e.main = e.recorders[nodes[0]]
	return e
}

// Event records an event about the pod from its node.
func (e *nodeEvents) Event(pod *v1.Pod, eventtype, reason, message string) {
	recorder, ok := e.recorders[pod.Spec.NodeName]
	if !ok {
		recorder = e.main
	}
	recorder.Event(pod, eventtype, reason, message)
}
