package podrunner

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// newEventRecorder posts Events (Started, Killing, Unhealthy, ...) as the kubelet would,
// so `kubectl describe pod` explains what happened.
func newEventRecorder(client kubernetes.Interface, nodeName string) record.EventRecorder {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: nodeName})
}
