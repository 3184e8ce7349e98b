package podrunner

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	defaultGracePeriod = 30 * time.Second
	sandboxRetry       = 2 * time.Second
)

// podWorker runs one pod from binding to deletion:
//
//	sandbox (network namespace, volumes) -> init containers in order (native sidecars are
//	started and left running) -> main containers -> when all main containers are done for
//	good, sidecars are stopped and the pod is Succeeded or Failed -> on deletion, every
//	process is stopped within the grace period and the pod object is removed.
//
// When a container's exit matches a RestartAllContainers rule, every container is stopped
// and the sequence from the init containers on runs again in the same sandbox
// (restartAllInPlace).
type podWorker struct {
	r   *Runner
	uid types.UID
	ctx context.Context
	// cancel ends the worker's API calls once the pod is finished with.
	cancel context.CancelFunc

	mu          sync.Mutex
	pod         *v1.Pod
	gone        bool // the API object no longer exists
	sandbox     *sandbox
	sandboxErr  string
	startTime   *metav1.Time
	initialized bool
	terminal    v1.PodPhase // Succeeded or Failed once decided
	// finishedBefore marks a pod that ended before this runner started: its status is
	// history this runner must not overwrite.
	finishedBefore bool

	// inits and mains are the pod's containers; an in-place restart of all of them
	// replaces them (under mu) with their successors.
	inits []*container
	mains []*container
	// restartAllBy are the containers whose exit matched a RestartAllContainers rule since
	// the last in-place restart; restartAll wakes the worker for them.
	restartAllBy []*container
	restartAll   chan struct{}
	// restartingAll: an in-place restart of all containers is under way (the pod's
	// AllContainersRestarting condition is True).
	restartingAll bool
	// lastRestartAll and restartAllBackoff space out in-place restarts that follow each
	// other closely (worker goroutine only).
	lastRestartAll    time.Time
	restartAllBackoff restartBackoff
	// launchFn starts a run of a container; nil is (*container).launch. Tests replace it.
	launchFn func(*container) (*process, string, error)

	stopOnce sync.Once
	// stop is closed when the pod must stop: deletion, or the runner shutting down.
	stop         chan struct{}
	runnerExit   bool
	statusDirty  chan struct{}
	statusClosed chan struct{}
	// statusMu orders the status writes of the status loop and of restartAllInPlace.
	statusMu sync.Mutex
}

func newPodWorker(r *Runner, pod *v1.Pod) *podWorker {
	ctx, cancel := context.WithCancel(context.Background())
	w := &podWorker{
		r: r, uid: pod.UID, ctx: ctx, cancel: cancel, pod: pod,
		stop:         make(chan struct{}),
		restartAll:   make(chan struct{}, 1),
		statusDirty:  make(chan struct{}, 1),
		statusClosed: make(chan struct{}),
	}
	waiting := "ContainerCreating"
	if len(pod.Spec.InitContainers) > 0 {
		waiting = "PodInitializing"
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		role := roleInit
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			role = roleSidecar
		}
		w.inits = append(w.inits, newContainer(w, *c, role, pod.Spec.RestartPolicy, waiting))
	}
	for _, c := range pod.Spec.Containers {
		w.mains = append(w.mains, newContainer(w, c, roleMain, pod.Spec.RestartPolicy, waiting))
	}
	if pod.DeletionTimestamp != nil {
		w.requestStop(false)
	}
	return w
}

func (w *podWorker) currentPod() *v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

// containers are the pod's current init and main containers.
func (w *podWorker) containers() (inits, mains []*container) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inits, w.mains
}

func (w *podWorker) launchContainer(c *container) (*process, string, error) {
	if w.launchFn != nil {
		return w.launchFn(c)
	}
	return c.launch()
}

func (w *podWorker) currentSandbox() *sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sandbox
}

// update takes the latest pod object from the informer.
func (w *podWorker) update(pod *v1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		w.requestStop(false)
	}
}

// objectGone is called when the pod object was removed without our help (force deletion).
func (w *podWorker) objectGone() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.requestStop(false)
}

func (w *podWorker) runnerStopping() { w.requestStop(true) }

func (w *podWorker) requestStop(runnerExit bool) {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.runnerExit = runnerExit
		w.mu.Unlock()
		close(w.stop)
	})
}

func (w *podWorker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *podWorker) run() {
	defer w.cancel()
	go w.statusLoop()
	pod := w.currentPod()
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		// Finished before this runner started; only its deletion is left to do.
		w.mu.Lock()
		w.terminal, w.finishedBefore = pod.Status.Phase, true
		w.mu.Unlock()
	} else {
		w.mu.Lock()
		w.startTime = pod.Status.StartTime
		if w.startTime == nil {
			w.startTime = ptr.To(metav1.Now().Rfc3339Copy())
		}
		w.mu.Unlock()
		w.notify()
		outcome := w.runPod()
		w.stopContainers()
		if !w.stopping() {
			w.finish(outcome)
		}
	}
	<-w.stop
	w.stopContainers()
	w.teardown()
	close(w.statusClosed)
	w.finalizeDeletion()
}

// prepareSandbox retries until the pod's network and volumes exist or the pod is stopped.
func (w *podWorker) prepareSandbox() bool {
	for !w.stopping() {
		sb, err := newSandbox(w.ctx, w.r, w.currentPod())
		if err == nil {
			w.mu.Lock()
			w.sandbox, w.sandboxErr = sb, ""
			w.mu.Unlock()
			w.notify()
			w.r.hosts.changed()
			return true
		}
		w.mu.Lock()
		changed := w.sandboxErr != err.Error()
		w.sandboxErr = err.Error()
		w.mu.Unlock()
		if changed {
			log.Printf("pod %s: %v", podKey(w.currentPod()), err)
			w.r.events.Event(w.currentPod(), v1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
			w.notify()
		}
		select {
		case <-w.stop:
			return false
		case <-time.After(sandboxRetry):
		}
	}
	return false
}

// runPod runs the pod until it finishes on its own, returning Succeeded or Failed, or
// until it is stopped, returning "".
func (w *podWorker) runPod() v1.PodPhase {
	if w.stopping() || !w.prepareSandbox() {
		return ""
	}
	return w.runContainers()
}

// runContainers runs the init containers, then the main containers, and returns the
// pod's outcome, or "" if it was stopped first. Whenever a container's exit matches a
// RestartAllContainers rule, it restarts all containers in place and runs them again.
func (w *podWorker) runContainers() v1.PodPhase {
	for {
		outcome, ok := w.runInitContainers()
		if ok {
			outcome = w.runMainContainers()
		}
		if w.stopping() || !w.restartAllRequested() {
			return outcome
		}
		if !w.restartAllInPlace() {
			return ""
		}
	}
}

// runInitContainers runs ordinary init containers to completion in order, starting native
// sidecars along the way. ok says whether the main containers may start; if not, the
// outcome is Failed when an init container failed for good, or "" when the pod was stopped
// or all its containers are to restart.
func (w *podWorker) runInitContainers() (outcome v1.PodPhase, ok bool) {
	inits, _ := w.containers()
	for _, c := range inits {
		if w.stopping() || w.restartAllRequested() {
			return "", false
		}
		c.start()
		if c.role == roleSidecar {
			select {
			case <-c.startedCh:
				continue
			case <-c.done:
				// Ended before it counted as started: only a stop or a restart of all does that.
				return "", false
			case <-w.stop:
				return "", false
			case <-w.restartAll:
				return "", false
			}
		}
		select {
		case <-c.done:
		case <-w.stop:
			return "", false
		case <-w.restartAll:
			return "", false
		}
		if w.restartAllRequested() {
			return "", false
		}
		if c.finalExitCode() != 0 {
			return v1.PodFailed, false
		}
	}
	w.mu.Lock()
	w.initialized = true
	w.mu.Unlock()
	w.notify()
	return "", true
}

// runMainContainers starts every main container and waits until all are done for good
// (per the restart policies), returning the pod's outcome, or "" if stopped first or all
// containers are to restart.
func (w *podWorker) runMainContainers() v1.PodPhase {
	_, mains := w.containers()
	if w.stopping() || w.restartAllRequested() {
		return ""
	}
	for _, c := range mains {
		c.start()
	}
	for _, c := range mains {
		select {
		case <-c.done:
		case <-w.stop:
			return ""
		case <-w.restartAll:
			return ""
		}
	}
	if w.restartAllRequested() {
		return ""
	}
	for _, c := range mains {
		if c.finalExitCode() != 0 {
			return v1.PodFailed
		}
	}
	return v1.PodSucceeded
}

// requestRestartAll is how a container whose exit matched a RestartAllContainers rule asks
// for all the pod's containers to restart in place.
func (w *podWorker) requestRestartAll(c *container, code int) {
	w.mu.Lock()
	w.restartAllBy = append(w.restartAllBy, c)
	w.mu.Unlock()
	w.r.events.Event(w.currentPod(), v1.EventTypeNormal, reasonRestartingAllContainers,
		fmt.Sprintf("container %s exited with %d, which its restartPolicyRules answer with RestartAllContainers: restarting all containers in place", c.spec.Name, code))
	select {
	case w.restartAll <- struct{}{}:
	default:
	}
}

func (w *podWorker) restartAllRequested() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.restartAllBy) > 0
}

// restartAllInPlace plays the kubelet's RestartAllContainers (KEP-5532): the
// AllContainersRestarting condition turns True; every container, init containers and
// sidecars included, is killed at once (no grace period, no preStop hook, as the kubelet
// does) and removed, the main containers first, then the init containers, and those whose
// exit asked for it last; each is replaced by its successor (state waiting
// RestartingAllContainers, one more restart); the condition turns False and the caller
// runs the startup sequence again. The sandbox stays: same pod UID, IP and network
// namespace, same volumes with their contents (emptyDir too), same PID namespace. The pod
// stays Running and, once initialized, Initialized. False when the pod was stopped
// meanwhile.
func (w *podWorker) restartAllInPlace() bool {
	w.mu.Lock()
	w.restartingAll = true
	inits, mains, sources := w.inits, w.mains, slices.Clone(w.restartAllBy)
	w.mu.Unlock()
	// Written at once, not left to the status loop, so that the condition and the exit
	// that triggered it are seen even when the restart is quick.
	w.publishStatus()
	for _, c := range resetOrder(inits, mains, sources) {
		c.stopAndWait(time.Time{})
	}
	// Every container of this run is down, so none can ask again: what they asked is done.
	w.mu.Lock()
	w.restartAllBy = nil
	select {
	case <-w.restartAll:
	default:
	}
	w.inits, w.mains = successors(inits), successors(mains)
	w.mu.Unlock()
	w.publishStatus()
	delay := w.nextRestartAllDelay(time.Now())
	w.mu.Lock()
	w.restartingAll = false
	w.mu.Unlock()
	w.notify()
	if delay > 0 {
		log.Printf("pod %s: restarting all containers again, in %s", podKey(w.currentPod()), delay)
		select {
		case <-w.stop:
			return false
		case <-time.After(delay):
		}
	}
	return !w.stopping()
}

// resetOrder is the order in which an in-place restart stops and removes containers, as
// the kubelet's computePodActions lists them (ContainersToReset): main containers, then
// init containers (sidecars included), each in spec order, and the containers whose exit
// triggered the restart (sources) last.
func resetOrder(inits, mains, sources []*container) []*container {
	var targets, last []*container
	for _, group := range [][]*container{mains, inits} {
		for _, c := range group {
			if slices.Contains(sources, c) {
				last = append(last, c)
			} else {
				targets = append(targets, c)
			}
		}
	}
	return append(targets, last...)
}

func successors(cs []*container) []*container {
	out := make([]*container, len(cs))
	for i, c := range cs {
		out[i] = c.successor()
	}
	return out
}

// nextRestartAllDelay spaces out in-place restarts: the first, and any after a minute
// without one, at once; closer ones after the CrashLoopBackOff delays (1 s doubling to
// 30 s). The kubelet has no such delay (removed containers have no back-off); it keeps a
// container that keeps exiting at once from spinning the runner and the API server.
func (w *podWorker) nextRestartAllDelay(now time.Time) time.Duration {
	last := w.lastRestartAll
	w.lastRestartAll = now
	if last.IsZero() || now.Sub(last) >= backoffReset {
		w.restartAllBackoff = restartBackoff{}
		return 0
	}
	return w.restartAllBackoff.next(now.Sub(last))
}

// gracePeriod is the deletion's grace period, or the pod's own when it simply finished.
func (w *podWorker) gracePeriod() time.Duration {
	pod := w.currentPod()
	grace := defaultGracePeriod
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		grace = 0
	}
	if w.runnerExit && grace > w.r.cfg.ShutdownGrace {
		grace = w.r.cfg.ShutdownGrace
	}
	return grace
}

// stopContainers stops main (and unfinished init) containers first and sidecars last, in
// reverse order, as the kubelet does, all within one grace period.
func (w *podWorker) stopContainers() {
	deadline := time.Now().Add(w.gracePeriod())
	inits, mains := w.containers()
	var wg sync.WaitGroup
	for _, c := range append(append([]*container{}, mains...), inits...) {
		if c.role == roleSidecar {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.stopAndWait(deadline) }()
	}
	wg.Wait()
	for i := len(inits) - 1; i >= 0; i-- {
		if c := inits[i]; c.role == roleSidecar {
			// A sidecar still gets a moment even when the main containers used it all.
			c.stopAndWait(later(deadline, time.Now().Add(2*time.Second)))
		}
	}
}

// finish records the end of a pod that completed on its own, after all its containers,
// sidecars included, have stopped: its PID namespace (if shared) and network namespace go,
// its address stays in the status, as on a real node.
func (w *podWorker) finish(outcome v1.PodPhase) {
	if outcome == "" {
		outcome = v1.PodFailed
	}
	w.mu.Lock()
	w.terminal = outcome
	sb := w.sandbox
	w.mu.Unlock()
	if sb != nil {
		sb.stopProcesses()
		sb.removeNetwork()
	}
	w.notify()
	w.r.hosts.changed()
}

func (w *podWorker) teardown() {
	sb := w.currentSandbox()
	if sb != nil {
		sb.remove()
		w.r.pool.Release(string(w.uid))
	}
	w.r.hosts.changed()
}

// finalizeDeletion removes the pod object once its processes are gone, which is what
// ends a graceful deletion. Nothing is deleted when the runner itself is only stopping.
func (w *podWorker) finalizeDeletion() {
	w.mu.Lock()
	skip := w.gone || w.runnerExit
	pod := w.pod
	w.mu.Unlock()
	if skip {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := w.r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &w.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		log.Printf("pod %s: finalize deletion: %v", podKey(pod), err)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func podKey(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }
