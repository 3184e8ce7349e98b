package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cohort.dev/tools/localcluster/internal/podrunner"
)

// NVMLControlFIFO prints the fake NVML control FIFO of a pod (NAMESPACE/NAME, or NAME in
// the default namespace) of the running cluster: the FIFO a test writes "xid INDEX CODE"
// lines to, to inject a fault into the pod's GPUs. It asks the API for the pod's UID and
// fails while the pod has no sandbox yet (not scheduled, or not started).
func NVMLControlFIFO(l Layout, pod string, out io.Writer) error {
	s, err := loadSettings(l)
	if err != nil {
		return err
	}
	if s.FakeNVML == "" {
		return fmt.Errorf("the cluster runs without a fake NVML: set COHORT_LOCAL_FAKE_NVML for up (after down)")
	}
	namespace, name, ok := strings.Cut(pod, "/")
	if !ok {
		namespace, name = "default", pod
	}
	client, err := adminClient(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	path := podrunner.NVMLControlFIFO(l.Pods, string(p.UID))
	if info, err := os.Stat(path); err != nil || info.Mode()&os.ModeNamedPipe == 0 {
		return fmt.Errorf("pod %s/%s (node %q) has no fake NVML control FIFO at %s yet", namespace, name, p.Spec.NodeName, path)
	}
	fmt.Fprintln(out, path)
	return nil
}
