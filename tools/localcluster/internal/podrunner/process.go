package podrunner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// exitResult is how a container process ended.
type exitResult struct {
	code       int
	signal     int
	startError string // set when the container could not start at all
	finishedAt time.Time
}

// process is one run of cohort-container-init and, under it, the workload. Signals go to
// init, which forwards them; SIGKILL to init ends the container's whole PID namespace.
type process struct {
	cmd       *exec.Cmd
	pidFile   string
	startedAt time.Time
	exited    chan struct{}
	result    exitResult
}

// startProcess runs init in new mount, PID and UTS namespaces (the network namespace is
// joined by init itself). output receives the workload's stdout and stderr.
func startProcess(initBinary, specPath, errorPath string, output *os.File, pidFile string) (*process, error) {
	_ = os.Remove(errorPath)
	cmd := exec.Command(initBinary, specPath, errorPath)
	cmd.Stdout = output
	cmd.Stderr = output
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS,
		Setpgid:    true,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start container init: %w", err)
	}
	p := &process{cmd: cmd, pidFile: pidFile, startedAt: time.Now(), exited: make(chan struct{})}
	if pidFile != "" {
		// Lets `local-cluster down` find the container if this runner dies first.
		_ = os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	}
	go p.wait(errorPath)
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) wait(errorPath string) {
	err := p.cmd.Wait()
	r := exitResult{finishedAt: time.Now()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		ws, _ := exitErr.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			r.signal = int(ws.Signal())
			r.code = 128 + r.signal
		} else {
			r.code = ws.ExitStatus()
		}
	default:
		r.code = 128
		r.startError = err.Error()
	}
	if msg, err := os.ReadFile(errorPath); err == nil && len(msg) > 0 && r.code == 128 {
		r.startError = string(msg)
	}
	if p.pidFile != "" {
		_ = os.Remove(p.pidFile)
	}
	p.result = r
	close(p.exited)
}

// terminate sends SIGTERM and, if the process is still there at deadline, SIGKILL.
func (p *process) terminate(deadline time.Time) {
	select {
	case <-p.exited:
		return
	default:
	}
	if time.Until(deadline) > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(time.Until(deadline)):
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}
