package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"cohort.dev/tools/localcluster/internal/containerspec"
)

// startWorkload forks the workload from this (namespace-joined, locked) thread; in a pod's
// shared PID namespace, through the second stage.
func startWorkload(program string, spec *containerspec.Spec, errorFile *os.File) (int, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	attr := &syscall.ProcAttr{
		Env:   spec.Env,
		Files: []uintptr{devnull.Fd(), os.Stdout.Fd(), os.Stderr.Fd()},
	}
	path, argv := program, spec.Argv
	if spec.PIDNamespace != "" {
		self, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("open cohort-container-init: %w", err)
		}
		defer unix.Close(self)
		path, argv = secondStage(program, spec.Argv, attr, errorFile, self)
	}
	// Subscribe before forking so no SIGCHLD or SIGTERM can slip past.
	signals = make(chan os.Signal, 16)
	signal.Notify(signals)
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, fmt.Errorf("exec %s: %w", spec.Argv[0], err)
	}
	return pid, nil
}

var signals chan os.Signal

// superviseWorkload does what PID 1 must: forward signals to the workload and reap every
// orphan, until the workload itself exits. It returns the exit status to pass on, using
// the shell's 128+signal convention that Kubernetes reports too.
func superviseWorkload(pid int) int {
	for sig := range signals {
		s, ok := sig.(syscall.Signal)
		if !ok {
			continue
		}
		switch s {
		case syscall.SIGCHLD:
			if status, done := reap(pid); done {
				return status
			}
		case syscall.SIGURG, syscall.SIGWINCH, syscall.SIGPIPE:
			// Go's runtime preemption signal and terminal noise: not for the workload.
		default:
			_ = syscall.Kill(pid, s)
		}
	}
	return 1
}

func reap(workload int) (int, bool) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err != nil || got <= 0 {
			return 0, false
		}
		if got != workload {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ws.ExitStatus(), true
	}
}

// lookPath resolves a bare command name with the container's PATH, not the runner's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		candidate := filepath.Join(dir, name)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH %s", name, path)
}
