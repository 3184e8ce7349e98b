package podrunner

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// serveContainerLogs is the one kubelet endpoint the runner offers: the apiserver proxies
// `kubectl logs` to /containerLogs/NS/POD/CONTAINER on the node. Only clients with a
// certificate from the cluster CA (the apiserver) are served. exec, attach and
// port-forward are not offered.
func serveContainerLogs(ctx context.Context, r *Runner) error {
	caPEM, err := os.ReadFile(r.cfg.ClientCAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificates in %s", r.cfg.ClientCAFile)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/", r.handleContainerLogs)
	srv := &http.Server{
		Addr:              net.JoinHostPort(r.cfg.NodeIP.String(), strconv.Itoa(r.cfg.KubeletPort)),
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err = srv.ListenAndServeTLS(r.cfg.TLSCertFile, r.cfg.TLSKeyFile)
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

func (r *Runner) handleContainerLogs(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 {
		http.Error(w, "want /containerLogs/NAMESPACE/POD/CONTAINER", http.StatusBadRequest)
		return
	}
	pod, err := r.pods.Pods(parts[0]).Get(parts[1])
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	q := req.URL.Query()
	previous := q.Get("previous") == "true"
	path, err := r.logFileFor(pod, parts[2], previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain")
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		if err := seekToLastLines(f, n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	var out io.Writer = w
	if limit, err := strconv.ParseInt(q.Get("limitBytes"), 10, 64); err == nil && limit > 0 {
		out = &limitedWriter{w: w, left: limit}
	}
	_, _ = io.Copy(out, f)
	if q.Get("follow") != "true" || previous {
		return
	}
	r.followLog(req.Context(), w, out, f, pod, parts[2])
}

// followLog streams what the container writes until it stops running or the client goes.
func (r *Runner) followLog(ctx context.Context, flusher http.ResponseWriter, out io.Writer, f *os.File, pod *v1.Pod, container string) {
	idle := 0
	for {
		if fl, ok := flusher.(http.Flusher); ok {
			fl.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		n, _ := io.Copy(out, f)
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle > 4 && !r.containerRunning(pod, container) {
			return
		}
	}
}

func (r *Runner) containerRunning(pod *v1.Pod, name string) bool {
	w := r.worker(pod.UID)
	if w == nil {
		return false
	}
	inits, mains := w.containers()
	for _, c := range append(append([]*container{}, inits...), mains...) {
		if c.spec.Name == name {
			c.mu.Lock()
			running := c.state.Running != nil
			c.mu.Unlock()
			return running
		}
	}
	return false
}

// logFileFor finds the current (or previous) run's log of a container.
func (r *Runner) logFileFor(pod *v1.Pod, container string, previous bool) (string, error) {
	dir := filepath.Dir(containerLogPath(r.cfg.LogDir, pod, container, 0))
	runs := LogRuns(dir)
	if len(runs) == 0 {
		return "", fmt.Errorf("no logs for container %s of pod %s", container, podKey(pod))
	}
	i := len(runs) - 1
	if previous {
		i--
	}
	if i < 0 {
		return "", fmt.Errorf("container %s of pod %s has no previous run", container, podKey(pod))
	}
	return filepath.Join(dir, strconv.Itoa(runs[i])+".log"), nil
}

// LogRuns lists the run numbers that have a log file in a container's log directory.
func LogRuns(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var runs []int
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log")); err == nil {
			runs = append(runs, n)
		}
	}
	sort.Ints(runs)
	return runs
}

// seekToLastLines positions f at the start of its last n lines.
func seekToLastLines(f *os.File, n int) error {
	data, err := io.ReadAll(bufio.NewReader(f))
	if err != nil {
		return err
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	pos := len(data)
	for i := 0; i < n && pos > 0; i++ {
		pos = bytes.LastIndexByte(data[:pos], '\n')
		if pos < 0 {
			pos = 0
			break
		}
	}
	if n == 0 {
		pos = len(data) + 1
	} else if pos > 0 {
		pos++
	}
	_, err = f.Seek(int64(min(pos, len(data)+1)), io.SeekStart)
	return err
}

type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return len(p), nil
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return len(p), err
}
