package podrunner

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHostsFileGivesShortNamesOnlyInTheOwnNamespace(t *testing.T) {
	h := &hostsWriter{}
	records := []hostRecord{
		{namespace: "a", ip: "10.244.0.5", relative: []string{"web"}, absolute: qualified("web", "a")},
		{namespace: "b", ip: "10.244.0.6", relative: []string{"db"}, absolute: qualified("db", "b")},
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "a"},
		Spec: v1.PodSpec{Hostname: "w-0", Subdomain: "w"}}
	sb := &sandbox{podIP: netip.MustParseAddr("10.244.0.7"), hostname: "w-0"}
	got := string(h.render(pod, sb, records))
	for _, line := range []string{
		"10.244.0.7\tw-0.w.a.svc.cluster.local w-0\n",
		"10.244.0.5\tweb web.a web.a.svc web.a.svc.cluster.local\n",
		"10.244.0.6\tdb.b db.b.svc db.b.svc.cluster.local\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("hosts file lacks %q:\n%s", line, got)
		}
	}
}

func TestServesOnlyReadyLivePodsUnlessPublishingNotReady(t *testing.T) {
	ready := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue}
	notReady := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse}
	pod := func(phase v1.PodPhase, c v1.PodCondition) *v1.Pod {
		return &v1.Pod{Status: v1.PodStatus{PodIP: "10.244.0.2", Phase: phase, Conditions: []v1.PodCondition{c}}}
	}
	svc := &v1.Service{}
	publishing := &v1.Service{Spec: v1.ServiceSpec{PublishNotReadyAddresses: true}}
	if !serves(pod(v1.PodRunning, ready), svc) {
		t.Error("a ready running pod serves")
	}
	if serves(pod(v1.PodRunning, notReady), svc) {
		t.Error("an unready pod does not serve")
	}
	if !serves(pod(v1.PodRunning, notReady), publishing) {
		t.Error("an unready pod serves when the service publishes unready addresses")
	}
	if serves(pod(v1.PodSucceeded, ready), publishing) {
		t.Error("a finished pod never serves")
	}
}
