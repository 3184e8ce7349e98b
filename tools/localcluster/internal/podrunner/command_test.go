package podrunner

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestImageProgramIsTheRepositoryName(t *testing.T) {
	cases := map[string]string{
		"ghcr.io/cohort/cohort-sidecar:0.1.0":     "cohort-sidecar",
		"cohort-operator":                         "cohort-operator",
		"localhost:5000/a/b/cohort-coordinator":   "cohort-coordinator",
		"registry:5000/x/cohort-agent@sha256:abc": "cohort-agent",
		"python:3.12":                             "python",
	}
	for image, want := range cases {
		if got := imageProgram(image); got != want {
			t.Errorf("imageProgram(%q) = %q, want %q", image, got, want)
		}
	}
}

func runnerWithBinary(t *testing.T, name string) (*Runner, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, name)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Runner{cfg: Config{BinDir: dir}}, bin
}

func TestCohortImageRunsItsBinaryWithArgs(t *testing.T) {
	r, bin := runnerWithBinary(t, "cohort-sidecar")
	c := &v1.Container{Image: "ghcr.io/cohort/cohort-sidecar:0.1.0", Args: []string{"--task", "$(ID)"}}
	env := newEnvironment()
	env.set("ID", "3")
	got, err := r.resolveCommand(c, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{bin, "--task", "3"}; !reflect.DeepEqual(got.argv, want) {
		t.Errorf("argv = %v, want %v", got.argv, want)
	}
}

func TestCohortImageCommandNamingTheBinaryIsMapped(t *testing.T) {
	r, bin := runnerWithBinary(t, "cohort-operator")
	c := &v1.Container{Image: "cohort-operator:1", Command: []string{"/usr/bin/cohort-operator", "--leader-elect"}, Args: []string{"-v"}}
	got, err := r.resolveCommand(c, newEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{bin, "--leader-elect", "-v"}; !reflect.DeepEqual(got.argv, want) {
		t.Errorf("argv = %v, want %v", got.argv, want)
	}
}

func TestOtherImageRunsItsCommandAndPythonCanBeMapped(t *testing.T) {
	r := &Runner{cfg: Config{BinDir: t.TempDir(), Python: "/venv/bin/python3"}}
	c := &v1.Container{Image: "python:3", Command: []string{"python3", "-c"}, Args: []string{"print(1)"}}
	got, err := r.resolveCommand(c, newEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/venv/bin/python3", "-c", "print(1)"}; !reflect.DeepEqual(got.argv, want) {
		t.Errorf("argv = %v, want %v", got.argv, want)
	}
}

func TestImageWithoutProgramOrCommandCannotRun(t *testing.T) {
	r := &Runner{cfg: Config{BinDir: t.TempDir()}}
	if _, err := r.resolveCommand(&v1.Container{Image: "nginx"}, newEnvironment()); err == nil {
		t.Error("want an error for an image with no program and no command")
	}
	got, err := r.resolveCommand(&v1.Container{Image: "registry.k8s.io/pause:3.10"}, newEnvironment())
	if err != nil || got.argv[0] != "sleep" {
		t.Errorf("pause: %v %v", got.argv, err)
	}
}
