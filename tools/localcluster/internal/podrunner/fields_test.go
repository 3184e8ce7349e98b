package podrunner

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFieldValueResolvesDownwardAPIPaths(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "ns", UID: "u1",
			Labels: map[string]string{"app": "w"}, Annotations: map[string]string{"a/b": "c"}},
		Spec: v1.PodSpec{NodeName: "local"},
	}
	sb := &sandbox{podIP: netip.MustParseAddr("10.244.0.9"), hostIP: "10.244.0.1"}
	cases := map[string]string{
		"metadata.name":               "w-0",
		"metadata.namespace":          "ns",
		"metadata.uid":                "u1",
		"metadata.labels['app']":      "w",
		`metadata.annotations["a/b"]`: "c",
		"metadata.labels":             `app="w"`,
		"spec.nodeName":               "local",
		"status.podIP":                "10.244.0.9",
		"status.hostIP":               "10.244.0.1",
	}
	for path, want := range cases {
		got, err := fieldValue(pod, sb, path)
		if err != nil || got != want {
			t.Errorf("fieldValue(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := fieldValue(pod, sb, "spec.bogus"); err == nil {
		t.Error("want an error for an unsupported path")
	}
}
