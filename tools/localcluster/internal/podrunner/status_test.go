package podrunner

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestPodPhase(t *testing.T) {
	running := v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	waiting := v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}
	crashLooping := v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}, RestartCount: 2}
	cases := []struct {
		name        string
		terminal    v1.PodPhase
		initialized bool
		mains       []v1.ContainerStatus
		want        v1.PodPhase
	}{
		{"init containers still running", "", false, []v1.ContainerStatus{waiting}, v1.PodPending},
		{"main not started yet", "", true, []v1.ContainerStatus{waiting}, v1.PodPending},
		{"a main container runs", "", true, []v1.ContainerStatus{waiting, running}, v1.PodRunning},
		{"restarting counts as running", "", true, []v1.ContainerStatus{crashLooping}, v1.PodRunning},
		{"decided outcome wins", v1.PodSucceeded, true, []v1.ContainerStatus{running}, v1.PodSucceeded},
	}
	for _, c := range cases {
		if got := podPhase(c.terminal, c.initialized, c.mains); got != c.want {
			t.Errorf("%s: phase %s, want %s", c.name, got, c.want)
		}
	}
}

func TestSetConditionKeepsTransitionTimeWhileUnchanged(t *testing.T) {
	var s v1.PodStatus
	setCondition(&s, boolCondition(v1.PodReady, true, "", ""))
	first := s.Conditions[0].LastTransitionTime
	first.Time = first.Add(-3600e9)
	s.Conditions[0].LastTransitionTime = first
	setCondition(&s, boolCondition(v1.PodReady, true, "", ""))
	if len(s.Conditions) != 1 || !s.Conditions[0].LastTransitionTime.Equal(&first) {
		t.Errorf("unchanged condition moved its transition time: %+v", s.Conditions)
	}
	setCondition(&s, boolCondition(v1.PodReady, false, "ContainersNotReady", "x"))
	if s.Conditions[0].LastTransitionTime.Equal(&first) || s.Conditions[0].Reason != "ContainersNotReady" {
		t.Errorf("changed condition kept its old transition: %+v", s.Conditions)
	}
}

func TestRestartBackoffDoublesUpToTheCapAndResetsAfterAHealthyRun(t *testing.T) {
	var b restartBackoff
	var got []int
	for range 7 {
		got = append(got, int(b.next(0).Seconds()))
	}
	want := []int{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if d := b.next(backoffReset); d != initialBackoff {
		t.Errorf("after a healthy run: %s, want %s", d, initialBackoff)
	}
}
