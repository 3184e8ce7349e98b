package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"cohort.dev/tools/localcluster/internal/hostnet"
)

const (
	etcdTimeout      = 60 * time.Second
	apiserverTimeout = 180 * time.Second
	nodeTimeout      = 120 * time.Second
)

// Up starts the cluster, or finds it running, with the addons asked for (besides those it
// runs already), and prints KUBECONFIG=PATH last.
func Up(l Layout, addons []string, out io.Writer) error {
	if err := checkHost(); err != nil {
		return err
	}
	if s, err := loadSettings(l); err == nil && allRunning(l, s) && apiReady(l, s) == nil {
		fmt.Fprintf(out, "local-cluster: already up (%s)\n", s.APIServerURL())
		warnIfNodesDiffer(l, s, out)
		if missing := withAddons(&s, addons); missing {
			if err := s.save(filepath.Join(l.Run, "settings.json")); err != nil {
				return err
			}
		}
		if err := applyAddons(l, s, out); err != nil {
			return err
		}
		fmt.Fprintf(out, "KUBECONFIG=%s\n", l.Kubeconfig())
		return nil
	}
	// A half-running cluster (a crashed component) is restarted as a whole.
	if err := Down(l, io.Discard); err != nil {
		return err
	}
	s, err := DefaultSettings(l)
	if err != nil {
		return err
	}
	withAddons(&s, addons)
	if err := prepare(l, s); err != nil {
		return err
	}
	if err := startAll(l, s, out); err != nil {
		_ = Down(l, io.Discard)
		return err
	}
	if err := applyAddons(l, s, out); err != nil {
		_ = Down(l, io.Discard)
		return err
	}
	if spares := s.SpareNodeNames(); len(spares) > 0 {
		fmt.Fprintf(out, "local-cluster: up (%s, node %s, spare nodes %s)\n", s.APIServerURL(), s.NodeName, strings.Join(spares, ", "))
	} else {
		fmt.Fprintf(out, "local-cluster: up (%s, node %s)\n", s.APIServerURL(), s.NodeName)
	}
	fmt.Fprintf(out, "KUBECONFIG=%s\n", l.Kubeconfig())
	return nil
}

// warnIfNodesDiffer says so when COHORT_LOCAL_SPARE_NODES or COHORT_LOCAL_FAKE_NVML ask
// for something the running cluster does not have: settings apply when the cluster starts,
// and a cluster other tests may be using is not restarted for them.
func warnIfNodesDiffer(l Layout, running Settings, out io.Writer) {
	_, spares := os.LookupEnv("COHORT_LOCAL_SPARE_NODES")
	_, nvml := os.LookupEnv("COHORT_LOCAL_FAKE_NVML")
	_, pods := os.LookupEnv("COHORT_LOCAL_NODE_PODS")
	want, err := DefaultSettings(l)
	if err != nil || (!spares || want.SpareNodes == running.SpareNodes) && (!nvml || want.FakeNVML == running.FakeNVML) &&
		(!pods || want.NodePodsOrDefault() == running.NodePodsOrDefault()) {
		return
	}
	fmt.Fprintf(out, "local-cluster: warning: the running cluster has %d spare nodes, fake NVML %q and %d pods a node; "+
		"COHORT_LOCAL_SPARE_NODES, COHORT_LOCAL_FAKE_NVML and COHORT_LOCAL_NODE_PODS apply only after down\n",
		running.SpareNodes, running.FakeNVML, running.NodePodsOrDefault())
}

func checkHost() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the local cluster needs root (network namespaces, mount namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("the local cluster needs the ip command (Debian package iproute2)")
	}
	return nil
}

func prepare(l Layout, s Settings) error {
	for _, dir := range []string{l.Logs, l.PodLogs, l.Run, l.Etcd, l.Pods} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := s.save(filepath.Join(l.Run, "settings.json")); err != nil {
		return err
	}
	if err := ensurePKI(l, s); err != nil {
		return err
	}
	kubeconfigs := map[string]string{
		l.Kubeconfig(): "admin",
		l.ComponentKubeconfig("controller-manager"): "controller-manager",
		l.ComponentKubeconfig("scheduler"):          "scheduler",
		l.ComponentKubeconfig("coscheduler"):        "coscheduler",
		l.ComponentKubeconfig("pod-runner"):         "pod-runner",
	}
	for path, identity := range kubeconfigs {
		if err := writeKubeconfig(l, s, path, identity); err != nil {
			return err
		}
	}
	gw, err := s.Gateway()
	if err != nil {
		return err
	}
	// The apiserver listens on the bridge's address, so the bridge comes first.
	return hostnet.Bridge{Name: s.Bridge, Gateway: gw}.Ensure()
}

// withAddons adds the addons s does not have yet; true if there were any.
func withAddons(s *Settings, addons []string) bool {
	added := false
	for _, a := range addons {
		if !s.has(a) {
			s.Addons = append(s.Addons, a)
			added = true
		}
	}
	slices.Sort(s.Addons)
	return added
}

// startAll starts the core components; applyAddons starts the addons' after their API
// objects are in.
func startAll(l Layout, s Settings, out io.Writer) error {
	for _, c := range coreComponents(l, s) {
		fmt.Fprintf(out, "local-cluster: starting %s (log %s)\n", c.name, l.LogFile(c.name))
		if _, err := l.start(c); err != nil {
			return err
		}
		var err error
		switch c.name {
		case "etcd":
			err = waitFor(l, c, etcdTimeout, func() error { return etcdHealthy(s) })
		case "kube-apiserver":
			err = waitFor(l, c, apiserverTimeout, func() error { return apiReady(l, s) })
		}
		if err != nil {
			return err
		}
	}
	client, err := adminClient(l)
	if err != nil {
		return err
	}
	for _, c := range coreComponents(l, s) {
		if c.name == "pod-runner" {
			return waitFor(l, c, nodeTimeout, func() error {
				for _, node := range s.NodeNames() {
					if err := nodeReady(client, node); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	return fmt.Errorf("no pod runner among the components")
}

// waitFor polls check until it passes, the component dies, or timeout.
func waitFor(l Layout, c component, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return nil
		}
		if _, alive := l.runningPID(c); !alive {
			return fmt.Errorf("%s exited; last lines of %s:\n%s", c.name, l.LogFile(c.name), tail(l.LogFile(c.name), 30))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s (%v); last lines of %s:\n%s",
		c.name, timeout, err, l.LogFile(c.name), tail(l.LogFile(c.name), 30))
}

func etcdHealthy(s Settings) error {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(s.EtcdPort) + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd health: %s", resp.Status)
	}
	return nil
}

// apiReady asks /readyz, trusting only the cluster's CA.
func apiReady(l Layout, s Settings) error {
	caPEM, err := os.ReadFile(l.PKIFile("ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	resp, err := client.Get(s.APIServerURL() + "/readyz")
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %s: %s", resp.Status, body)
	}
	return nil
}

func adminClient(l Layout) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// nodeReady: the node is registered and Ready, and pods can be created in the default
// namespace (its service account exists; the ServiceAccount admission plugin needs it).
func nodeReady(client kubernetes.Interface, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s not Ready", name)
	}
	_, err = client.CoreV1().ServiceAccounts(v1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
	return err
}

func allRunning(l Layout, s Settings) bool {
	for _, c := range components(l, s) {
		if _, ok := l.runningPID(c); !ok {
			return false
		}
	}
	return true
}
