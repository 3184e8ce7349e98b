package podrunner

import (
	"fmt"
	"slices"
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
	// podPolicy is the pod's restartPolicy; spec.restartPolicy and spec.restartPolicyRules
	// come first (exitActionFor).
	podPolicy v1.RestartPolicy
	// initialWaiting is the waiting reason before the first run (PodInitializing or
	// ContainerCreating).
	initialWaiting string

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
		w: w, spec: spec, role: role, podPolicy: podPolicy, initialWaiting: waitingReason,
		startedCh: make(chan struct{}),
		stopCh:    make(chan struct{}),
		restartCh: make(chan string, 1),
		done:      make(chan struct{}),
	}
	c.state = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: waitingReason}}
	return c
}

// exitAction is what follows the exit of a container's process.
type exitAction int

const (
	exitDone       exitAction = iota // the container is done for good
	exitRestart                      // it restarts, after the back-off
	exitRestartAll                   // every container of the pod restarts in place
)

// exitActionFor decides what follows an exit with code, as the kubelet does (k8s.io/kubernetes
// pkg/api/v1/pod ContainerShouldRestart and FindMatchingContainerRestartRule, kubelet
// ShouldAllContainersRestart): the container's restartPolicyRules in order, the first that
// matches decides (Restart: this container restarts, whatever the pod's restartPolicy;
// RestartAllContainers: the whole pod's containers restart in place); with no match the
// container's own restartPolicy, and without one the pod's. Sidecars (init containers with
// restartPolicy Always) restart unless a rule says otherwise. An init container that
// succeeded is done (the next one starts), unless a RestartAllContainers rule matches its 0.
// The API server accepts rules only with an explicit container restartPolicy.
func exitActionFor(spec *v1.Container, role containerRole, podPolicy v1.RestartPolicy, code int32) exitAction {
	if rule, ok := matchingRestartRule(spec.RestartPolicyRules, code); ok {
		switch rule.Action {
		case v1.ContainerRestartRuleActionRestartAllContainers:
			return exitRestartAll
		case v1.ContainerRestartRuleActionRestart:
			if role == roleInit && code == 0 {
				return exitDone
			}
			return exitRestart
		}
		// An action this runner does not know: the policies decide, as in the kubelet.
	}
	switch {
	case role == roleSidecar:
		return exitRestart
	case role == roleInit && code == 0:
		return exitDone
	case policyRestarts(spec, podPolicy, code):
		return exitRestart
	}
	return exitDone
}

// policyRestarts: the container's own restartPolicy, else the pod's, restarts it after an
// exit with code.
func policyRestarts(spec *v1.Container, podPolicy v1.RestartPolicy, code int32) bool {
	policy := podPolicy
	if spec.RestartPolicy != nil {
		policy = v1.RestartPolicy(*spec.RestartPolicy)
	}
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// exitActionAfterProbeKill decides what follows a kill for a failed liveness or startup
// probe. The kubelet restarts such a container as its restartPolicy (its own, else the
// pod's) says, without trying its rules, since it was running when killed
// (kuberuntime_manager.go computePodActions); only a container its policy leaves exited has
// its rules tried on the exit code, as on any exit. So a probe kill restarts that container
// alone, not all of them, unless its policy is Never. (The kubelet restarts on OnFailure
// whatever the code; here, as before rules, OnFailure needs a non-zero code, which the API
// server's status validation also asks of a terminated container that runs again.)
func exitActionAfterProbeKill(spec *v1.Container, role containerRole, podPolicy v1.RestartPolicy, code int32) exitAction {
	if role == roleSidecar || policyRestarts(spec, podPolicy, code) {
		return exitRestart
	}
	return exitActionFor(spec, role, podPolicy, code)
}

// matchingRestartRule is the first rule whose exitCodes match code.
func matchingRestartRule(rules []v1.ContainerRestartRule, code int32) (v1.ContainerRestartRule, bool) {
	for _, rule := range rules {
		if rule.ExitCodes == nil {
			continue
		}
		in := slices.Contains(rule.ExitCodes.Values, code)
		switch rule.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return rule, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return rule, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// hasRestartAllRule says whether any container of the pod may restart all of them: the
// kubelet then reports the AllContainersRestarting condition, and the API server lets every
// container status leave the terminated state (pkg/api/v1/pod AllContainersCouldRestart).
func hasRestartAllRule(spec *v1.PodSpec) bool {
	for _, containers := range [][]v1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range containers {
			for _, rule := range c.RestartPolicyRules {
				if rule.Action == v1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
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
		proc, reason, err := c.w.launchContainer(c)
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
		result, probeKill := c.waitOrStop(proc)
		probes.stop()
		c.setTerminated(proc, result)
		action := exitDone
		switch {
		case c.stopRequested():
		case probeKill:
			action = exitActionAfterProbeKill(&c.spec, c.role, c.podPolicy, int32(result.code))
		default:
			action = exitActionFor(&c.spec, c.role, c.podPolicy, int32(result.code))
		}
		if action != exitRestart {
			c.mu.Lock()
			c.finalExit = result.code
			c.mu.Unlock()
			if action == exitRestartAll {
				// The worker stops the others and starts the pod's containers over.
				c.w.requestRestartAll(c, result.code)
			}
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
// failed probe (with the container's termination grace period); probeKill says it was the
// last.
func (c *container) waitOrStop(proc *process) (result exitResult, probeKill bool) {
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
		probeKill = true
	}
	return proc.result, probeKill
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

// Status strings of an in-place restart of all containers, as the kubelet writes them
// (pkg/kubelet/kubelet_pods.go RestartingAllContainers, status/generate.go
// RestartAllContainersStarted).
const (
	reasonRestartingAllContainers  = "RestartingAllContainers"
	messageRestartingAllContainers = "The container is removed because RestartAllContainers in place"
	reasonRestartAllStarted        = "RestartAllContainersStarted"
	messageRestartAllStarted       = "container exited with restart policy rule"
)

// successor is the container that takes c's place once c is stopped and removed by an
// in-place restart of all the pod's containers: the same container, not started yet, its
// status as the kubelet reports a container so removed. A container that ran (running,
// terminated, or waiting to restart) is waiting with reason RestartingAllContainers and
// one more restart; one that ran to a termination has that termination replaced by a last
// state terminated with reason RestartingAllContainers and exit code 137 (the kubelet
// reports every removed container so, the container that triggered the restart
// included); one that never ran is unchanged.
func (c *container) successor() *container {
	n := newContainer(c.w, c.spec, c.role, c.podPolicy, c.initialWaiting)
	c.mu.Lock()
	defer c.mu.Unlock()
	n.imageID = c.imageID
	n.restarts, n.lastState = c.restarts, *c.lastState.DeepCopy()
	if c.containerID == "" {
		return n
	}
	n.restarts++
	n.state = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
		Reason: reasonRestartingAllContainers, Message: messageRestartingAllContainers,
	}}
	if c.state.Waiting == nil {
		n.lastState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: 137, Reason: reasonRestartingAllContainers, Message: messageRestartingAllContainers,
		}}
	}
	return n
}
