package podrunner

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func exitCodes(op v1.ContainerRestartRuleOnExitCodesOperator, values ...int32) *v1.ContainerRestartRuleOnExitCodes {
	return &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: values}
}

func rule(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, values ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{Action: action, ExitCodes: exitCodes(op, values...)}
}

const (
	restart    = v1.ContainerRestartRuleActionRestart
	restartAll = v1.ContainerRestartRuleActionRestartAllContainers
	in         = v1.ContainerRestartRuleOnExitCodesOpIn
	notIn      = v1.ContainerRestartRuleOnExitCodesOpNotIn
)

func TestExitActionFollowsRulesThenTheContainerPolicyThenThePods(t *testing.T) {
	never, onFailure, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyAlways
	cases := []struct {
		name      string
		role      containerRole
		policy    *v1.ContainerRestartPolicy // the container's own
		rules     []v1.ContainerRestartRule
		podPolicy v1.RestartPolicy
		code      int32
		want      exitAction
	}{
		// No container policy, no rules: the pod's policy, as before rules existed.
		{"pod Always, success", roleMain, nil, nil, v1.RestartPolicyAlways, 0, exitRestart},
		{"pod unset means Always", roleMain, nil, nil, "", 0, exitRestart},
		{"pod OnFailure, failure", roleMain, nil, nil, v1.RestartPolicyOnFailure, 1, exitRestart},
		{"pod OnFailure, success", roleMain, nil, nil, v1.RestartPolicyOnFailure, 0, exitDone},
		{"pod Never, failure", roleMain, nil, nil, v1.RestartPolicyNever, 1, exitDone},
		{"init, pod Always, failure", roleInit, nil, nil, v1.RestartPolicyAlways, 1, exitRestart},
		{"init, pod Always, success", roleInit, nil, nil, v1.RestartPolicyAlways, 0, exitDone},
		{"init, pod Never, failure", roleInit, nil, nil, v1.RestartPolicyNever, 1, exitDone},
		{"sidecar, pod Never, success", roleSidecar, &always, nil, v1.RestartPolicyNever, 0, exitRestart},

		// The container's own policy overrides the pod's.
		{"container OnFailure under pod Never", roleMain, &onFailure, nil, v1.RestartPolicyNever, 2, exitRestart},
		{"container Never under pod Always", roleMain, &never, nil, v1.RestartPolicyAlways, 2, exitDone},
		{"container Always under pod OnFailure", roleMain, &always, nil, v1.RestartPolicyOnFailure, 0, exitRestart},
		{"init container OnFailure under pod Never", roleInit, &onFailure, nil, v1.RestartPolicyNever, 1, exitRestart},

		// Rules: In and NotIn, Restart even under Never.
		{"Restart In matches", roleMain, &never, []v1.ContainerRestartRule{rule(restart, in, 42, 43)}, v1.RestartPolicyNever, 43, exitRestart},
		{"Restart In misses: container policy", roleMain, &never, []v1.ContainerRestartRule{rule(restart, in, 42)}, v1.RestartPolicyAlways, 1, exitDone},
		{"Restart NotIn matches", roleMain, &never, []v1.ContainerRestartRule{rule(restart, notIn, 0)}, v1.RestartPolicyNever, 9, exitRestart},
		{"Restart NotIn misses", roleMain, &never, []v1.ContainerRestartRule{rule(restart, notIn, 0)}, v1.RestartPolicyNever, 0, exitDone},
		{"Restart of a success", roleMain, &never, []v1.ContainerRestartRule{rule(restart, in, 0)}, v1.RestartPolicyNever, 0, exitRestart},
		{"init container Restart rule", roleInit, &never, []v1.ContainerRestartRule{rule(restart, in, 7)}, v1.RestartPolicyNever, 7, exitRestart},
		{"succeeded init container is done even if a Restart rule matches", roleInit, &never, []v1.ContainerRestartRule{rule(restart, in, 0)}, v1.RestartPolicyNever, 0, exitDone},

		// RestartAllContainers.
		{"RestartAllContainers In", roleMain, &never, []v1.ContainerRestartRule{rule(restartAll, in, 3)}, v1.RestartPolicyNever, 3, exitRestartAll},
		{"RestartAllContainers misses: container Never", roleMain, &never, []v1.ContainerRestartRule{rule(restartAll, in, 3)}, v1.RestartPolicyAlways, 4, exitDone},
		{"RestartAllContainers misses: container OnFailure", roleMain, &onFailure, []v1.ContainerRestartRule{rule(restartAll, in, 3)}, v1.RestartPolicyNever, 4, exitRestart},
		{"RestartAllContainers NotIn under pod Always", roleMain, &always, []v1.ContainerRestartRule{rule(restartAll, notIn, 0)}, v1.RestartPolicyAlways, 137, exitRestartAll},
		{"RestartAllContainers on a succeeded init container", roleInit, &never, []v1.ContainerRestartRule{rule(restartAll, in, 0)}, v1.RestartPolicyNever, 0, exitRestartAll},
		{"sidecar RestartAllContainers", roleSidecar, &always, []v1.ContainerRestartRule{rule(restartAll, notIn, 0)}, v1.RestartPolicyNever, 1, exitRestartAll},
		{"sidecar rule misses: Always", roleSidecar, &always, []v1.ContainerRestartRule{rule(restartAll, notIn, 0)}, v1.RestartPolicyNever, 0, exitRestart},

		// First match wins.
		{"first of two matching rules wins (Restart)", roleMain, &never,
			[]v1.ContainerRestartRule{rule(restart, in, 5), rule(restartAll, notIn, 0)}, v1.RestartPolicyNever, 5, exitRestart},
		{"first of two matching rules wins (RestartAllContainers)", roleMain, &never,
			[]v1.ContainerRestartRule{rule(restartAll, notIn, 0), rule(restart, in, 5)}, v1.RestartPolicyNever, 5, exitRestartAll},
		{"a rule that misses lets the next decide", roleMain, &never,
			[]v1.ContainerRestartRule{rule(restart, in, 5), rule(restartAll, in, 6)}, v1.RestartPolicyNever, 6, exitRestartAll},
		{"a rule without exitCodes never matches", roleMain, &never,
			[]v1.ContainerRestartRule{{Action: restartAll}}, v1.RestartPolicyNever, 6, exitDone},
		{"an unknown operator never matches", roleMain, &never,
			[]v1.ContainerRestartRule{rule(restartAll, "Between", 6)}, v1.RestartPolicyNever, 6, exitDone},
	}
	for _, c := range cases {
		spec := v1.Container{Name: "c", RestartPolicy: c.policy, RestartPolicyRules: c.rules}
		if got := exitActionFor(&spec, c.role, c.podPolicy, c.code); got != c.want {
			t.Errorf("%s: exit %d gives %v, want %v", c.name, c.code, got, c.want)
		}
	}
}

func TestAProbeKillRestartsByPolicyBeforeTheRulesAreTried(t *testing.T) {
	never, onFailure, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyAlways
	all := []v1.ContainerRestartRule{rule(restartAll, notIn, 0)}
	cases := []struct {
		name      string
		role      containerRole
		policy    *v1.ContainerRestartPolicy
		rules     []v1.ContainerRestartRule
		podPolicy v1.RestartPolicy
		code      int32
		want      exitAction
	}{
		{"no rules, pod Always", roleMain, nil, nil, v1.RestartPolicyAlways, 137, exitRestart},
		{"no rules, pod OnFailure, exit 0 on SIGTERM", roleMain, nil, nil, v1.RestartPolicyOnFailure, 0, exitDone},
		{"no rules, pod Never", roleMain, nil, nil, v1.RestartPolicyNever, 137, exitDone},
		{"container Always: this container only", roleMain, &always, all, v1.RestartPolicyNever, 137, exitRestart},
		{"container OnFailure: this container only", roleMain, &onFailure, all, v1.RestartPolicyNever, 143, exitRestart},
		{"sidecar: this container only", roleSidecar, &always, all, v1.RestartPolicyNever, 137, exitRestart},
		{"container Never: the rules decide", roleMain, &never, all, v1.RestartPolicyAlways, 137, exitRestartAll},
		{"container Never, no rule matches", roleMain, &never, []v1.ContainerRestartRule{rule(restart, in, 1)}, v1.RestartPolicyAlways, 137, exitDone},
	}
	for _, c := range cases {
		spec := v1.Container{Name: "c", RestartPolicy: c.policy, RestartPolicyRules: c.rules}
		if got := exitActionAfterProbeKill(&spec, c.role, c.podPolicy, c.code); got != c.want {
			t.Errorf("%s: exit %d gives %v, want %v", c.name, c.code, got, c.want)
		}
	}
}

func TestOnlyPodsWithARestartAllContainersRuleGetTheCondition(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	withRule := func(action v1.ContainerRestartRuleAction) v1.Container {
		return v1.Container{Name: "c", RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{rule(action, in, 1)}}
	}
	if hasRestartAllRule(&v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}) {
		t.Error("a pod without rules may restart all its containers")
	}
	if hasRestartAllRule(&v1.PodSpec{Containers: []v1.Container{withRule(restart)}}) {
		t.Error("a Restart rule counts as RestartAllContainers")
	}
	if !hasRestartAllRule(&v1.PodSpec{InitContainers: []v1.Container{withRule(restartAll)}}) {
		t.Error("an init container's RestartAllContainers rule is missed")
	}
	if !hasRestartAllRule(&v1.PodSpec{Containers: []v1.Container{{Name: "a"}, withRule(restartAll)}}) {
		t.Error("a main container's RestartAllContainers rule is missed")
	}
	for _, tc := range []struct {
		restarting bool
		terminal   v1.PodPhase
		status     v1.ConditionStatus
		reason     string
	}{
		{false, "", v1.ConditionFalse, ""},
		{true, "", v1.ConditionTrue, "RestartAllContainersStarted"},
		{false, v1.PodSucceeded, v1.ConditionFalse, "PodCompleted"},
		{true, v1.PodFailed, v1.ConditionFalse, "PodFailed"},
	} {
		c := allContainersRestartingCondition(tc.restarting, tc.terminal)
		if c.Type != "AllContainersRestarting" || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("restarting %v, terminal %q: %+v", tc.restarting, tc.terminal, c)
		}
	}
}

func TestResetStopsMainsThenInitsAndTheTriggersLast(t *testing.T) {
	w := &podWorker{}
	mk := func(name string, role containerRole) *container {
		return newContainer(w, v1.Container{Name: name}, role, v1.RestartPolicyNever, "PodInitializing")
	}
	setup, agent, worker, peer, last := mk("setup", roleInit), mk("agent", roleSidecar), mk("worker", roleMain), mk("peer", roleMain), mk("last", roleMain)
	order := resetOrder([]*container{setup, agent}, []*container{worker, peer, last}, []*container{worker, agent})
	var names []string
	for _, c := range order {
		names = append(names, c.spec.Name)
	}
	if want := []string{"peer", "last", "setup", "worker", "agent"}; !slices.Equal(names, want) {
		t.Errorf("reset order %v, want %v", names, want)
	}
}

func TestASuccessorReportsTheRemovalAndOneMoreRestart(t *testing.T) {
	w := &podWorker{uid: "u"}
	mk := func(name string) *container {
		return newContainer(w, v1.Container{Name: name, Image: "img"}, roleMain, v1.RestartPolicyNever, "PodInitializing")
	}
	running, exited, backingOff, neverRan := mk("running"), mk("exited"), mk("backing-off"), mk("never-ran")
	running.containerID, running.restarts = "cohort://u/running/2", 2
	running.state = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	exited.containerID = "cohort://u/exited/0"
	exited.state = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}
	earlier := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
	backingOff.containerID, backingOff.restarts, backingOff.lastState = "cohort://u/backing-off/0", 0, earlier
	backingOff.state = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}

	removed := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		ExitCode: 137, Reason: "RestartingAllContainers", Message: "The container is removed because RestartAllContainers in place"}}
	waiting := v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
		Reason: "RestartingAllContainers", Message: "The container is removed because RestartAllContainers in place"}}
	for _, tc := range []struct {
		c        *container
		restarts int32
		state    v1.ContainerState
		last     v1.ContainerState
	}{
		{running, 3, waiting, removed},
		{exited, 1, waiting, removed},
		{backingOff, 1, waiting, earlier},
		{neverRan, 0, v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}, v1.ContainerState{}},
	} {
		s := tc.c.successor().status()
		if s.RestartCount != tc.restarts || !equalState(s.State, tc.state) || !equalState(s.LastTerminationState, tc.last) ||
			s.ContainerID != "" || s.Ready || *s.Started || s.Image != "img" {
			t.Errorf("%s: successor status %+v", tc.c.spec.Name, s)
		}
	}
}

func equalState(a, b v1.ContainerState) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// restartTest runs a pod's containers as plain shell processes (no namespaces, so no root
// needed) through the worker's own sequence, recording each launch as NAME#RUN.
type restartTest struct {
	t       *testing.T
	dir     string
	client  *fake.Clientset
	w       *podWorker
	mu      sync.Mutex
	started []string
}

func newRestartTest(t *testing.T, pod *v1.Pod, scripts map[string]func(run int32) string) *restartTest {
	rt := &restartTest{t: t, dir: t.TempDir(), client: fake.NewClientset(pod)}
	r := &Runner{cfg: Config{NodeName: "local", NodeIP: netip.MustParseAddr("10.244.0.1")}, client: rt.client}
	r.events = newNodeEvents(rt.client, r.cfg.Nodes())
	rt.w = newPodWorker(r, pod)
	rt.w.sandbox = &sandbox{podIP: netip.MustParseAddr("10.244.0.7")}
	rt.w.startTime = ptr.To(metav1.Now().Rfc3339Copy())
	rt.w.launchFn = func(c *container) (*process, string, error) {
		c.mu.Lock()
		run := c.restarts
		c.mu.Unlock()
		script := strings.ReplaceAll(scripts[c.spec.Name](run), "$DIR", rt.dir)
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return nil, "StartError", err
		}
		rt.mu.Lock()
		rt.started = append(rt.started, fmt.Sprintf("%s#%d", c.spec.Name, run))
		rt.mu.Unlock()
		p := &process{cmd: cmd, startedAt: time.Now(), exited: make(chan struct{})}
		go p.wait(filepath.Join(rt.dir, "no-start-error"))
		return p, "", nil
	}
	go rt.w.statusLoop()
	t.Cleanup(func() {
		rt.w.requestStop(false)
		rt.w.stopContainers()
		close(rt.w.statusClosed)
		rt.w.cancel()
	})
	return rt
}

func (rt *restartTest) launches() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.started)
}

// waitFor polls until ok holds for the worker's status, or fails with what it last saw.
func (rt *restartTest) waitFor(what string, ok func(v1.PodStatus) bool) v1.PodStatus {
	rt.t.Helper()
	var s v1.PodStatus
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if s = rt.w.buildStatus(rt.w.currentPod()); ok(s) {
			return s
		}
	}
	rt.t.Fatalf("%s: never happened; launches %v, status %+v", what, rt.launches(), s)
	return s
}

// writtenStatuses are the statuses the worker wrote, in order.
func (rt *restartTest) writtenStatuses() []v1.PodStatus {
	var out []v1.PodStatus
	for _, a := range rt.client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			out = append(out, u.GetObject().(*v1.Pod).Status)
		}
	}
	return out
}

func condition(s v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func allStatuses(s v1.PodStatus) []v1.ContainerStatus {
	return append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
}

func running(s v1.PodStatus, names ...string) bool {
	for _, cs := range allStatuses(s) {
		if slices.Contains(names, cs.Name) && cs.State.Running == nil {
			return false
		}
	}
	return true
}

func TestRestartAllContainersRerunsTheStartupSequenceInTheSameSandbox(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	always := v1.ContainerRestartPolicyAlways
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gang-0", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			NodeName:      "local",
			RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{
				{Name: "setup"},
				{Name: "agent", RestartPolicy: &always},
			},
			Containers: []v1.Container{
				{Name: "worker", RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{rule(restartAll, in, 3)}},
				{Name: "peer"},
			},
		},
	}
	// The worker exits 3 on its first run, once its peer runs; every other run of every
	// container stays up (setup succeeds).
	rt := newRestartTest(t, pod, map[string]func(int32) string{
		"setup": func(int32) string { return "exit 0" },
		"agent": func(int32) string { return "exec sleep 1000" },
		"worker": func(run int32) string {
			if run == 0 {
				return "while [ ! -e $DIR/peer-up ]; do sleep 0.01; done; exit 3"
			}
			return "exec sleep 1000"
		},
		"peer": func(run int32) string { return "touch $DIR/peer-up; exec sleep 1000" },
	})
	done := make(chan v1.PodPhase, 1)
	go func() { done <- rt.w.runContainers() }()

	final := rt.waitFor("all containers restarted once", func(s v1.PodStatus) bool {
		for _, cs := range allStatuses(s) {
			if cs.RestartCount != 1 {
				return false
			}
		}
		return running(s, "agent", "worker", "peer") && s.InitContainerStatuses[0].State.Terminated != nil
	})

	// Starts: the whole sequence twice, the second after the first run ended.
	launches := rt.launches()
	pos := func(l string) int {
		i := slices.Index(launches, l)
		if i < 0 {
			t.Fatalf("%s never started: %v", l, launches)
		}
		return i
	}
	if len(launches) != 8 {
		t.Errorf("launches %v, want each of the 4 containers twice", launches)
	}
	for _, before := range [][2]string{
		{"setup#0", "agent#0"}, {"agent#0", "worker#0"}, {"agent#0", "peer#0"},
		{"worker#0", "setup#1"}, {"peer#0", "setup#1"},
		{"setup#1", "agent#1"}, {"agent#1", "worker#1"}, {"agent#1", "peer#1"},
	} {
		if pos(before[0]) > pos(before[1]) {
			t.Errorf("%s started after %s: %v", before[0], before[1], launches)
		}
	}

	// After: Running, Initialized, the condition False, the same IP, every container's last
	// state the removal.
	if final.Phase != v1.PodRunning || final.PodIP != "10.244.0.7" {
		t.Errorf("after the restart: phase %s, IP %s", final.Phase, final.PodIP)
	}
	if c := condition(final, v1.PodInitialized); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("after the restart: Initialized %+v", c)
	}
	if c := condition(final, v1.AllContainersRestarting); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("after the restart: AllContainersRestarting %+v", c)
	}
	for _, cs := range allStatuses(final) {
		last := cs.LastTerminationState.Terminated
		if last == nil || last.Reason != "RestartingAllContainers" || last.ExitCode != 137 {
			t.Errorf("%s: last state %+v", cs.Name, cs.LastTerminationState)
		}
	}

	// Written on the way: the trigger's own exit with the condition True, then every
	// container removed (waiting RestartingAllContainers, one restart more), the condition
	// still True, then False once they run again (written by the status loop, in time);
	// the pod Running and Initialized throughout, its IP the same.
	var sawTrigger, sawRemoved, sawFalseAgain bool
	for deadline := time.Now().Add(5 * time.Second); !sawFalseAgain && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sawTrigger, sawRemoved, sawFalseAgain = false, false, false
		wasTrue := false
		for _, s := range rt.writtenStatuses() {
			c := condition(s, v1.AllContainersRestarting)
			if c == nil {
				t.Fatalf("a status without the AllContainersRestarting condition: %+v", s.Conditions)
			}
			if s.PodIP != "10.244.0.7" {
				t.Fatalf("a status with pod IP %q", s.PodIP)
			}
			restarting := c.Status == v1.ConditionTrue
			if restarting && (c.Reason != "RestartAllContainersStarted" || c.Message != "container exited with restart policy rule") {
				t.Fatalf("condition %+v", c)
			}
			if restarting && (s.Phase != v1.PodRunning || condition(s, v1.PodInitialized).Status != v1.ConditionTrue) {
				t.Fatalf("while restarting: phase %s, conditions %+v", s.Phase, s.Conditions)
			}
			worker := s.ContainerStatuses[0]
			if restarting && worker.State.Terminated != nil && worker.State.Terminated.ExitCode == 3 && worker.RestartCount == 0 {
				sawTrigger = true
			}
			removed := restarting
			for _, cs := range allStatuses(s) {
				removed = removed && cs.RestartCount == 1 && cs.State.Waiting != nil &&
					cs.State.Waiting.Reason == "RestartingAllContainers" &&
					cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 137
			}
			sawRemoved = sawRemoved || removed
			sawFalseAgain = sawFalseAgain || wasTrue && !restarting
			wasTrue = wasTrue || restarting
		}
	}
	if !sawTrigger || !sawRemoved || !sawFalseAgain {
		t.Errorf("statuses written: the trigger's exit %v, all removed %v, the condition False again %v",
			sawTrigger, sawRemoved, sawFalseAgain)
	}

	select {
	case phase := <-done:
		t.Fatalf("the pod ended (%s) though its containers run", phase)
	default:
	}
	rt.w.requestStop(false)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop")
	}
}

func TestWithoutRulesAContainerThatExitsEndsThePodAsBefore(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns", UID: "uid-2"},
		Spec: v1.PodSpec{
			NodeName: "local", RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "main"}},
		},
	}
	rt := newRestartTest(t, pod, map[string]func(int32) string{"main": func(int32) string { return "exit 3" }})
	done := make(chan v1.PodPhase, 1)
	go func() { done <- rt.w.runContainers() }()
	var phase v1.PodPhase
	select {
	case phase = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pod did not end")
	}
	if phase != v1.PodFailed || !slices.Equal(rt.launches(), []string{"main#0"}) {
		t.Errorf("phase %s, launches %v", phase, rt.launches())
	}
	s := rt.w.buildStatus(rt.w.currentPod())
	if c := condition(s, v1.AllContainersRestarting); c != nil {
		t.Errorf("a pod without a RestartAllContainers rule reports %+v", c)
	}
}

func TestARestartRuleRestartsOnlyItsContainerUnderPodNever(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rules", Namespace: "ns", UID: "uid-3"},
		Spec: v1.PodSpec{
			NodeName: "local", RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{
				{Name: "flaky", RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{rule(restart, in, 42)}},
				{Name: "steady"},
			},
		},
	}
	rt := newRestartTest(t, pod, map[string]func(int32) string{
		"flaky": func(run int32) string {
			if run == 0 {
				return "exit 42"
			}
			return "exec sleep 1000"
		},
		"steady": func(int32) string { return "exec sleep 1000" },
	})
	go rt.w.runContainers()
	s := rt.waitFor("flaky restarted", func(s v1.PodStatus) bool {
		return s.ContainerStatuses[0].RestartCount == 1 && running(s, "flaky", "steady")
	})
	if slices.Contains(rt.launches(), "steady#1") || s.ContainerStatuses[1].RestartCount != 0 {
		t.Errorf("the other container restarted too: %v", rt.launches())
	}
	if last := s.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 42 || last.Reason != "Error" {
		t.Errorf("flaky's last state %+v", s.ContainerStatuses[0].LastTerminationState)
	}
	if c := condition(s, v1.AllContainersRestarting); c != nil {
		t.Errorf("a pod with Restart rules only reports %+v", c)
	}
}
