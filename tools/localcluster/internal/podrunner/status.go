package podrunner

import (
	"fmt"
	"log"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// notify asks for the pod status to be written; bursts collapse into one write.
func (w *podWorker) notify() {
	select {
	case w.statusDirty <- struct{}{}:
	default:
	}
}

func (w *podWorker) statusLoop() {
	for {
		select {
		case <-w.statusClosed:
			return
		case <-w.statusDirty:
		}
		if err := w.writeStatus(); err != nil && w.ctx.Err() == nil {
			log.Printf("pod %s: status: %v", podKey(w.currentPod()), err)
			time.Sleep(time.Second)
			w.notify()
		}
	}
}

// publishStatus writes the status now rather than in the status loop; a failure is only
// logged, the loop writes again later.
func (w *podWorker) publishStatus() {
	if err := w.writeStatus(); err != nil && w.ctx.Err() == nil {
		log.Printf("pod %s: status: %v", podKey(w.currentPod()), err)
		w.notify()
	}
}

// writeStatus replaces the status fields the kubelet owns and keeps the rest (conditions
// set by others, qosClass, ...).
func (w *podWorker) writeStatus() error {
	w.statusMu.Lock()
	defer w.statusMu.Unlock()
	w.mu.Lock()
	finishedBefore := w.finishedBefore
	w.mu.Unlock()
	if finishedBefore {
		return nil
	}
	pods := w.r.client.CoreV1().Pods(w.currentPod().Namespace)
	pod := w.currentPod()
	for attempt := 0; attempt < 5; attempt++ {
		if pod.UID != w.uid {
			return nil
		}
		want := w.buildStatus(pod)
		if apiequality.Semantic.DeepEqual(want, pod.Status) {
			return nil
		}
		next := pod.DeepCopy()
		next.Status = want
		_, err := pods.UpdateStatus(w.ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return err
		}
		if pod, err = pods.Get(w.ctx, pod.Name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
	return fmt.Errorf("status update kept conflicting")
}

func (w *podWorker) buildStatus(pod *v1.Pod) v1.PodStatus {
	s := *pod.Status.DeepCopy()
	w.mu.Lock()
	sb, sandboxErr, startTime, initialized, terminal := w.sandbox, w.sandboxErr, w.startTime, w.initialized, w.terminal
	restartingAll, inits, mains := w.restartingAll, w.inits, w.mains
	w.mu.Unlock()

	s.InitContainerStatuses = nil
	for _, c := range inits {
		s.InitContainerStatuses = append(s.InitContainerStatuses, c.status())
	}
	s.ContainerStatuses = nil
	for _, c := range mains {
		s.ContainerStatuses = append(s.ContainerStatuses, c.status())
	}
	if startTime != nil {
		s.StartTime = startTime
	}
	nodeIP := w.r.cfg.NodeIP.String()
	s.HostIP, s.HostIPs = nodeIP, []v1.HostIP{{IP: nodeIP}}
	if sb != nil {
		ip := sb.podIP.String()
		s.PodIP, s.PodIPs = ip, []v1.PodIP{{IP: ip}}
	}
	s.Phase = podPhase(terminal, initialized, s.ContainerStatuses)
	s.Reason, s.Message = "", ""

	sandboxReady := sb != nil && terminal == ""
	setCondition(&s, boolCondition(v1.PodScheduled, true, "", ""))
	setCondition(&s, boolCondition(v1.PodReadyToStartContainers, sandboxReady, "", sandboxErr))
	// Once initialized, a pod stays so while all its containers restart in place.
	setCondition(&s, boolCondition(v1.PodInitialized, initialized || terminal == v1.PodSucceeded,
		"ContainersNotInitialized", incompleteInits(inits, s.InitContainerStatuses)))
	ready, readyMsg := containersReady(inits, s)
	reason := "ContainersNotReady"
	if terminal != "" {
		ready, reason, readyMsg = false, "PodCompleted", ""
	}
	setCondition(&s, boolCondition(v1.ContainersReady, ready, reason, readyMsg))
	podReady, podMsg := ready, readyMsg
	for _, gate := range pod.Spec.ReadinessGates {
		if !conditionTrue(s, gate.ConditionType) {
			podReady, reason = false, "ReadinessGatesNotReady"
			podMsg = fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", gate.ConditionType)
		}
	}
	setCondition(&s, boolCondition(v1.PodReady, podReady, reason, podMsg))
	// The kubelet reports this condition for pods that have a RestartAllContainers rule only.
	if hasRestartAllRule(&pod.Spec) {
		setCondition(&s, allContainersRestartingCondition(restartingAll, terminal))
	}
	return s
}

// allContainersRestartingCondition is True while all containers restart in place, as the
// kubelet's GenerateAllContainersRestartingCondition reports it.
func allContainersRestartingCondition(restarting bool, terminal v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse}
	switch {
	case terminal == v1.PodSucceeded:
		c.Reason = "PodCompleted"
	case terminal == v1.PodFailed:
		c.Reason = "PodFailed"
	case restarting:
		c.Status, c.Reason, c.Message = v1.ConditionTrue, reasonRestartAllStarted, messageRestartAllStarted
	}
	return c
}

// podPhase follows the kubelet: Pending until initialized and a main container has run,
// then Running, until the worker decided the pod is finished.
func podPhase(terminal v1.PodPhase, initialized bool, mains []v1.ContainerStatus) v1.PodPhase {
	if terminal != "" {
		return terminal
	}
	if !initialized {
		return v1.PodPending
	}
	for _, c := range mains {
		if c.State.Running != nil || c.State.Terminated != nil || c.RestartCount > 0 {
			return v1.PodRunning
		}
	}
	return v1.PodPending
}

// containersReady: every main container and every sidecar is ready.
func containersReady(inits []*container, s v1.PodStatus) (bool, string) {
	var unready []string
	for _, cs := range s.ContainerStatuses {
		if !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	for i, cs := range s.InitContainerStatuses {
		if inits[i].role == roleSidecar && !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	if len(unready) == 0 {
		return true, ""
	}
	return false, "containers with unready status: [" + strings.Join(unready, " ") + "]"
}

// incompleteInits names the init containers that have not finished (or, for sidecars,
// started).
func incompleteInits(inits []*container, statuses []v1.ContainerStatus) string {
	var names []string
	for i, cs := range statuses {
		done := cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		if inits[i].role == roleSidecar {
			done = cs.Started != nil && *cs.Started
		}
		if !done {
			names = append(names, cs.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "containers with incomplete status: [" + strings.Join(names, " ") + "]"
}

func boolCondition(t v1.PodConditionType, ok bool, reasonIfFalse, messageIfFalse string) v1.PodCondition {
	if ok {
		return v1.PodCondition{Type: t, Status: v1.ConditionTrue}
	}
	return v1.PodCondition{Type: t, Status: v1.ConditionFalse, Reason: reasonIfFalse, Message: messageIfFalse}
}

func conditionTrue(s v1.PodStatus, t v1.PodConditionType) bool {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// setCondition replaces the condition of c's type, keeping its transition time when the
// status did not change.
func setCondition(s *v1.PodStatus, c v1.PodCondition) {
	now := metav1.Now().Rfc3339Copy()
	c.LastTransitionTime = now
	for i := range s.Conditions {
		old := &s.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
			c.LastProbeTime = old.LastProbeTime
		}
		*old = c
		return
	}
	s.Conditions = append(s.Conditions, c)
}
