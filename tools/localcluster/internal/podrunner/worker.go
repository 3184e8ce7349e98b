package podrunner

import (
	"context"
	"log"
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

	inits []*container
	mains []*container

	stopOnce sync.Once
	// stop is closed when the pod must stop: deletion, or the runner shutting down.
	stop         chan struct{}
	runnerExit   bool
	statusDirty  chan struct{}
	statusClosed chan struct{}
}

func newPodWorker(r *Runner, pod *v1.Pod) *podWorker {
	ctx, cancel := context.WithCancel(context.Background())
	w := &podWorker{
		r: r, uid: pod.UID, ctx: ctx, cancel: cancel, pod: pod,
		stop:         make(chan struct{}),
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
	if outcome, ok := w.runInitContainers(); !ok {
		return outcome
	}
	return w.runMainContainers()
}

// runInitContainers runs ordinary init containers to completion in order, starting native
// sidecars along the way. ok says whether the main containers may start; if not, the
// outcome is Failed when an init container failed for good.
func (w *podWorker) runInitContainers() (outcome v1.PodPhase, ok bool) {
	for _, c := range w.inits {
		if w.stopping() {
			return "", false
		}
		c.start()
		if c.role == roleSidecar {
			select {
			case <-c.startedCh:
				continue
			case <-w.stop:
				return "", false
			}
		}
		select {
		case <-c.done:
		case <-w.stop:
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
// (per the pod's restartPolicy), returning the pod's outcome, or "" if stopped first.
func (w *podWorker) runMainContainers() v1.PodPhase {
	if w.stopping() {
		return ""
	}
	for _, c := range w.mains {
		c.start()
	}
	for _, c := range w.mains {
		select {
		case <-c.done:
		case <-w.stop:
			return ""
		}
	}
	for _, c := range w.mains {
		if c.finalExitCode() != 0 {
			return v1.PodFailed
		}
	}
	return v1.PodSucceeded
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
	var wg sync.WaitGroup
	for _, c := range append(append([]*container{}, w.mains...), w.inits...) {
		if c.role == roleSidecar {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.stopAndWait(deadline) }()
	}
	wg.Wait()
	for i := len(w.inits) - 1; i >= 0; i-- {
		if c := w.inits[i]; c.role == roleSidecar {
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
