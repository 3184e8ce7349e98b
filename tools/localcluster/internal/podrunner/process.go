package podrunner

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"sync"
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
// In a pod's shared PID namespace there is no such namespace to end: the processes of the
// container's mount namespace are killed instead, when it is stopped and once init has
// exited.
type process struct {
	cmd       *exec.Cmd
	pidFile   string
	startedAt time.Time
	exited    chan struct{}
	result    exitResult
	// mountNS is the container's mount namespace, set in a shared PID namespace only. The
	// kernel hands a freed namespace's inode number to the next one made (any process's:
	// another container's init, `ip -n`), so mountNSPin holds the namespace open until the
	// last kill is done: until then the number names this container's alone. nsMu orders
	// the kills of terminate and wait with the release.
	mountNS    namespaceID
	mountNSPin *os.File
	nsMu       sync.Mutex
}

// startProcess runs init in new mount, PID and UTS namespaces (the network namespace is
// joined by init itself); with sharedPID, in new mount and UTS namespaces only, as init
// starts the workload in the pod's PID namespace. output receives the workload's stdout
// and stderr.
func startProcess(initBinary, specPath, errorPath string, output *os.File, pidFile string, sharedPID bool) (*process, error) {
	_ = os.Remove(errorPath)
	cmd := exec.Command(initBinary, specPath, errorPath)
	cmd.Stdout = output
	cmd.Stderr = output
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS,
		Setpgid:    true,
	}
	if sharedPID {
		cmd.SysProcAttr.Cloneflags &^= syscall.CLONE_NEWPID
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start container init: %w", err)
	}
	p := &process{cmd: cmd, pidFile: pidFile, startedAt: time.Now(), exited: make(chan struct{})}
	if sharedPID {
		// Read at once: init is still setting up, long before the workload could exist.
		pin, ns, err := pinNamespace(cmd.Process.Pid, "mnt")
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("container init's mount namespace: %w", err)
		}
		p.mountNS, p.mountNSPin = ns, pin
	}
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
	p.nsMu.Lock()
	if p.mountNSPin != nil {
		if left := killMountNamespace(p.mountNS, 0, leftoverKillTimeout); left > 0 {
			log.Printf("container init %d: %d processes of its mount namespace did not end", p.pid(), left)
		}
		_ = p.mountNSPin.Close()
		p.mountNSPin = nil
	}
	p.nsMu.Unlock()
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
	p.nsMu.Lock()
	pinned := p.mountNSPin != nil
	if pinned {
		// Killing init first would hand the workload to the host's reaper, outside the
		// pod's namespace, whose pause process then cannot end before that reaper acts.
		// Ending the container's other processes lets init reap the workload and exit.
		killMountNamespace(p.mountNS, p.pid(), leftoverKillTimeout)
	}
	p.nsMu.Unlock()
	if pinned {
		select {
		case <-p.exited:
			return
		case <-time.After(time.Second):
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}
