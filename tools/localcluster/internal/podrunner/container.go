package podrunner

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type containerRole int

const (
	roleInit    containerRole = iota // runs to completion before the next one starts
	roleSidecar                      // init container with restartPolicy Always
	roleMain
)

// container supervises one container of a pod: it starts the process, restarts it as
// the restart policy says, runs its probes, and keeps the state the pod status reports.
type container struct {
	w    *podWorker
	spec v1.Container
	role containerRole
	// restartOnSuccess and restartOnFailure are the effective restart policy.
	restartOnSuccess, restartOnFailure bool

	mu           sync.Mutex
	state        v1.ContainerState
	lastState    v1.ContainerState
	restarts     int32
	ready        bool
	started      bool
	containerID  string
	imageID      string
	current      *process
	stopDeadline time.Time
	finalExit    int

	startOnce   sync.Once
	startedOnce sync.Once
	// startedCh closes the first time the container counts as started (for sidecars,
	// the point where the next init container may start).
	startedCh chan struct{}
	stopOnce  sync.Once
	stopCh    chan struct{}
	// restartCh asks for the current process to be killed and restarted (failed probes).
	restartCh chan string
	done      chan struct{}
}

func newContainer(w *podWorker, spec v1.Container, role containerRole, podPolicy v1.RestartPolicy, waitingReason string) *container {
	c := &container{
		w: w, spec: spec, role: role,
		startedCh: make(chan struct{}),
		stopCh:    make(chan struct{}),
		restartCh: make(chan string, 1),
		done:      make(chan struct{}),
	}
	switch {
	case role == roleSidecar:
		c.restartOnSuccess, c.restartOnFailure = true, true
	case role == roleInit:
		// Init containers must succeed; only restartPolicy Never gives up on them.
		c.restartOnFailure = podPolicy != v1.RestartPolicyNever
	case podPolicy == v1.RestartPolicyAlways || podPolicy == "":
		c.restartOnSuccess, c.restartOnFailure = true, true
	case podPolicy == v1.RestartPolicyOnFailure:
		c.restartOnFailure = true
	}
	c.state = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: waitingReason}}
	return c
}

// start begins supervision (once).
func (c *container) start() {
	c.startOnce.Do(func() { go c.supervise() })
}

// stopAndWait stops the container, killing it at deadline, and returns when it is down.
func (c *container) stopAndWait(deadline time.Time) {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopDeadline = deadline
		c.mu.Unlock()
		close(c.stopCh)
	})
	// A container that never started has nothing to wait for, and now never will start.
	c.startOnce.Do(func() { close(c.done) })
	<-c.done
}

func (c *container) stopRequested() bool {
	select {
	case <-c.stopCh:
		return true
	default:
		return false
	}
}

func (c *container) finalExitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.finalExit
}

func (c *container) supervise() {
	defer close(c.done)
	var backoff restartBackoff
	for !c.stopRequested() {
		// A probe of the previous run may have asked for a restart as it ended anyway.
		select {
		case <-c.restartCh:
		default:
		}
		proc, reason, err := c.launch()
		if err != nil {
			c.setWaiting(reason, err.Error())
			c.w.r.events.Event(c.w.currentPod(), v1.EventTypeWarning, "Failed", fmt.Sprintf("container %s: %v", c.spec.Name, err))
			if !c.sleep(backoff.next(0)) {
				return
			}
			continue
		}
		c.setRunning(proc)
		probes := startProbes(c, proc)
		result := c.waitOrStop(proc)
		probes.stop()
		c.setTerminated(proc, result)
		if c.stopRequested() || !c.shouldRestart(result.code) {
			c.mu.Lock()
			c.finalExit = result.code
			c.mu.Unlock()
			return
		}
		delay := backoff.next(result.finishedAt.Sub(proc.startedAt))
		c.setWaiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s",
			delay, c.spec.Name, podKey(c.w.currentPod())))
		if !c.sleep(delay) {
			return
		}
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
	}
}

func (c *container) shouldRestart(code int) bool {
	if code == 0 {
		return c.restartOnSuccess
	}
	return c.restartOnFailure
}

// sleep waits d unless the container is stopped first; false means stopped.
func (c *container) sleep(d time.Duration) bool {
	select {
	case <-c.stopCh:
		return false
	case <-time.After(d):
		return true
	}
}

// waitOrStop waits for the process to end on its own, be stopped, or be restarted by a
// failed probe (with the container's termination grace period).
func (c *container) waitOrStop(proc *process) exitResult {
	select {
	case <-proc.exited:
	case <-c.stopCh:
		c.mu.Lock()
		deadline := c.stopDeadline
		c.mu.Unlock()
		proc.terminate(deadline)
	case why := <-c.restartCh:
		c.w.r.events.Event(c.w.currentPod(), v1.EventTypeNormal, "Killing",
			fmt.Sprintf("container %s %s, will be restarted", c.spec.Name, why))
		proc.terminate(time.Now().Add(c.w.gracePeriod()))
	}
	return proc.result
}

// requestRestart is how a failed liveness or startup probe kills the container.
func (c *container) requestRestart(why string) {
	select {
	case c.restartCh <- why:
	default:
	}
}

func (c *container) setWaiting(reason, message string) {
	c.mu.Lock()
	c.leaveTerminated()
	c.state = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason, Message: message}}
	c.ready = false
	c.mu.Unlock()
	c.w.notify()
}

func (c *container) setRunning(proc *process) {
	c.mu.Lock()
	c.leaveTerminated()
	c.current = proc
	c.containerID = fmt.Sprintf("cohort://%s/%s/%d", c.w.uid, c.spec.Name, c.restarts)
	c.state = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(proc.startedAt).Rfc3339Copy()}}
	c.ready, c.started = false, false
	c.mu.Unlock()
	c.w.notify()
}

// markStarted records that the startup probe (if any) passed.
func (c *container) markStarted(proc *process) {
	c.mu.Lock()
	if c.current == proc {
		c.started = true
		if c.spec.ReadinessProbe == nil && c.role != roleInit {
			c.ready = true
		}
	}
	c.mu.Unlock()
	c.startedOnce.Do(func() { close(c.startedCh) })
	c.w.notify()
}

func (c *container) setReady(proc *process, ready bool) {
	c.mu.Lock()
	changed := c.current == proc && c.ready != ready
	if changed {
		c.ready = ready
	}
	c.mu.Unlock()
	if changed {
		c.w.notify()
	}
}

func (c *container) setTerminated(proc *process, r exitResult) {
	term := &v1.ContainerStateTerminated{
		ExitCode:    int32(r.code),
		Signal:      int32(r.signal),
		Reason:      "Completed",
		StartedAt:   metav1.NewTime(proc.startedAt).Rfc3339Copy(),
		FinishedAt:  metav1.NewTime(r.finishedAt).Rfc3339Copy(),
		ContainerID: c.containerID,
	}
	switch {
	case r.startError != "":
		term.Reason, term.Message = "StartError", r.startError
	case r.code != 0:
		term.Reason = "Error"
	}
	c.mu.Lock()
	c.current = nil
	c.state = v1.ContainerState{Terminated: term}
	// A completed init container counts as ready, as the kubelet reports it.
	c.ready = c.role == roleInit && r.code == 0
	c.started = false
	c.mu.Unlock()
	if r.code != 0 || r.startError != "" {
		c.w.r.events.Event(c.w.currentPod(), v1.EventTypeNormal, "Exited",
			fmt.Sprintf("container %s exited with %d %s", c.spec.Name, r.code, r.startError))
	}
	c.w.notify()
}

// leaveTerminated keeps the end of the previous run as the last state (lock held).
func (c *container) leaveTerminated() {
	if c.state.Terminated != nil {
		c.lastState = c.state
	}
}

// status is the container's entry in the pod status.
func (c *container) status() v1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	started := c.started
	return v1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              c.imageID,
		ContainerID:          c.containerID,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
		Ready:                c.ready,
		RestartCount:         c.restarts,
		Started:              &started,
	}
}
