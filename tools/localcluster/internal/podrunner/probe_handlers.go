package podrunner

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// runProbe performs one probe. Network probes go from the host straight to the pod's
// address; exec probes run in the container's namespaces and mounts.
func runProbe(ctx context.Context, c *container, proc *process, probe *v1.Probe) (bool, string) {
	timeout := seconds(probe.TimeoutSeconds, 1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sb := c.w.currentSandbox()
	if sb == nil {
		return false, "no sandbox"
	}
	var err error
	switch h := probe.ProbeHandler; {
	case h.HTTPGet != nil:
		err = httpProbe(ctx, c, sb, h.HTTPGet)
	case h.TCPSocket != nil:
		err = tcpProbe(ctx, c, sb, h.TCPSocket)
	case h.Exec != nil:
		err = execProbe(ctx, c, sb, h.Exec.Command)
	case h.GRPC != nil:
		err = grpcProbe(ctx, sb, h.GRPC)
	default:
		err = fmt.Errorf("probe has no handler")
	}
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

func probePort(c *container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.spec.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", port.StrVal)
}

func httpProbe(ctx context.Context, c *container, sb *sandbox, g *v1.HTTPGetAction) error {
	port, err := probePort(c, g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = sb.podIP.String()
	}
	scheme := "http"
	if g.Scheme == v1.URISchemeHTTPS {
		scheme = "https"
	}
	url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/local")
	for _, h := range g.HTTPHeaders {
		req.Header.Set(h.Name, h.Value)
	}
	client := &http.Client{Transport: &http.Transport{
		// As the kubelet: HTTPS probes do not verify certificates.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

func tcpProbe(ctx context.Context, c *container, sb *sandbox, t *v1.TCPSocketAction) error {
	port, err := probePort(c, t.Port)
	if err != nil {
		return err
	}
	host := t.Host
	if host == "" {
		host = sb.podIP.String()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}

func grpcProbe(ctx context.Context, sb *sandbox, g *v1.GRPCAction) error {
	conn, err := grpc.NewClient(net.JoinHostPort(sb.podIP.String(), strconv.Itoa(int(g.Port))),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("gRPC health: %s", resp.Status)
	}
	return nil
}

// execProbe runs the command inside the container's view (same network namespace, mounts
// and environment; the pod's PID namespace when it has one) and succeeds on exit status 0.
func execProbe(ctx context.Context, c *container, sb *sandbox, command []string) error {
	spec, _, err := c.processSpec(sb, c.w.currentPod(), command, nil, false)
	if err != nil {
		return err
	}
	// Readiness and liveness probes may run at once: each run gets its own files.
	specFile, err := os.CreateTemp(sb.containerDir(c.spec.Name), "probe-*.json")
	if err != nil {
		return err
	}
	specFile.Close()
	specPath := specFile.Name()
	errorPath := strings.TrimSuffix(specPath, ".json") + ".error"
	defer os.Remove(specPath)
	defer os.Remove(errorPath)
	if err := spec.Write(specPath); err != nil {
		return err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	proc, err := startProcess(c.w.r.cfg.InitBinary, specPath, errorPath, devnull, "", spec.PIDNamespace != "")
	if err != nil {
		return err
	}
	select {
	case <-proc.exited:
	case <-ctx.Done():
		proc.terminate(time.Now())
		return fmt.Errorf("exec probe timed out")
	}
	if r := proc.result; r.code != 0 {
		return fmt.Errorf("exec probe %v exited with %d %s", command, r.code, r.startError)
	}
	return nil
}
