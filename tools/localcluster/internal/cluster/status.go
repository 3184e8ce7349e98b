package cluster

import (
	"context"
	"fmt"
	"io"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cohort.dev/tools/localcluster/internal/hostnet"
)

// ErrNotUp is returned by Status when the cluster is not (fully) running.
var ErrNotUp = fmt.Errorf("local cluster is not up")

// Status prints what runs, where the logs are, and the API's view of the nodes and pods.
func Status(l Layout, out io.Writer) error {
	s, err := loadSettings(l)
	if err != nil {
		return err
	}
	up := true
	for _, c := range components(l, s) {
		pid, ok := l.runningPID(c)
		state := fmt.Sprintf("running (pid %d)", pid)
		if !ok {
			state, up = "stopped", false
		}
		fmt.Fprintf(out, "%-24s %-20s log %s\n", c.name, state, l.LogFile(c.name))
	}
	gw, _ := s.Gateway()
	bridge := "absent"
	if (hostnet.Bridge{Name: s.Bridge, Gateway: gw}).Exists() {
		bridge = "present"
	}
	namespaces, _ := hostnet.ListNamespaces()
	fmt.Fprintf(out, "%-24s %s (%s), %d pod network namespaces\n", "bridge "+s.Bridge, bridge, gw, len(namespaces))
	if s.FakeNVML != "" {
		fmt.Fprintf(out, "%-24s %s\n", "fake NVML", s.FakeNVML)
	}
	if err := apiReady(l, s); err != nil {
		fmt.Fprintf(out, "%-24s not ready: %v\n", "api "+s.APIServerURL(), err)
		return ErrNotUp
	}
	fmt.Fprintf(out, "%-24s ready\n", "api "+s.APIServerURL())
	client, err := adminClient(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, node := range s.NodeNames() {
		if err := nodeReady(client, node); err != nil {
			fmt.Fprintf(out, "%-24s %v\n", "node "+node, err)
			up = false
		} else {
			fmt.Fprintf(out, "%-24s Ready\n", "node "+node)
		}
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err == nil {
		phases := map[v1.PodPhase]int{}
		for _, p := range pods.Items {
			phases[p.Status.Phase]++
		}
		fmt.Fprintf(out, "%-24s %d (%d Running, %d Pending, %d Succeeded, %d Failed); logs under %s\n", "pods",
			len(pods.Items), phases[v1.PodRunning], phases[v1.PodPending], phases[v1.PodSucceeded], phases[v1.PodFailed], l.PodLogs)
	}
	fmt.Fprintf(out, "KUBECONFIG=%s\n", l.Kubeconfig())
	if !up {
		return ErrNotUp
	}
	return nil
}
