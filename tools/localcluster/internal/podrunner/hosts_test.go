package podrunner

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
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

// A process resolving a name while the hosts file is rewritten finds the pod's own names in
// it, whatever the moment: the file is never emptied on the way, and it ends as the newest
// version, however much shorter.
func TestARewrittenHostsFileAlwaysHoldsThePodsOwnNames(t *testing.T) {
	h := &hostsWriter{}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "a"}}
	sb := &sandbox{dir: dir, podIP: netip.MustParseAddr("10.244.0.7"), hostname: "w-0"}
	versions := make([][]byte, 2)
	for i := range versions {
		var records []hostRecord
		for j := 0; j < 1+i*50; j++ { // one short, one long
			records = append(records, hostRecord{namespace: "a", ip: fmt.Sprintf("10.244.1.%d", j),
				relative: []string{fmt.Sprintf("svc-%d", j)}})
		}
		versions[i] = h.render(pod, sb, records)
	}
	const own = "10.244.0.7\tw-0\n"
	if err := sb.writeHosts(versions[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		defer close(bad)
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(sb.etcPath("hosts"))
			if err != nil || !strings.Contains(string(got), own) {
				bad <- fmt.Sprintf("a read found %q (%v)", got, err)
				return
			}
		}
	}()
	for i := 0; i < 2000; i++ {
		if err := sb.writeHosts(versions[(i+1)%2]); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if msg, ok := <-bad; ok {
		t.Fatal(msg)
	}
	got, err := os.ReadFile(sb.etcPath("hosts"))
	if err != nil || string(got) != string(versions[0]) {
		t.Fatalf("the file ends as %q (%v), not the last version written", got, err)
	}
}
