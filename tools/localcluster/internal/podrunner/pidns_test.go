package podrunner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cohort.dev/tools/localcluster/internal/containerspec"
	"golang.org/x/sys/unix"
)

var (
	initBinaryOnce sync.Once
	initBinaryPath string
	initBinaryErr  error
)

// sharedPIDTest skips unless the test may create namespaces (root), and builds
// cohort-container-init once for the tests that run containers.
func sharedPIDTest(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates mount and PID namespaces")
	}
	initBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cohort-container-init-")
		if err != nil {
			initBinaryErr = err
			return
		}
		initBinaryPath = filepath.Join(dir, "cohort-container-init")
		out, err := exec.Command("go", "build", "-o", initBinaryPath,
			"cohort.dev/tools/localcluster/cmd/cohort-container-init").CombinedOutput()
		if err != nil {
			initBinaryErr = &buildError{err: err, output: string(out)}
		}
	})
	if initBinaryErr != nil {
		t.Fatalf("build cohort-container-init: %v", initBinaryErr)
	}
	return initBinaryPath
}

type buildError struct {
	err    error
	output string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.output }

func TestMain(m *testing.M) {
	code := m.Run()
	if initBinaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(initBinaryPath))
	}
	os.Exit(code)
}

// startSharedContainer runs argv as a container of the pod whose PID namespace is ns, with
// its state under dir/containers/NAME.
func startSharedContainer(t *testing.T, initBinary, dir string, ns *podPIDNamespace, name string, argv ...string) (*process, string) {
	t.Helper()
	cdir := filepath.Join(dir, "containers", name)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := containerspec.Spec{
		Hostname:     "shared",
		ScratchDir:   cdir,
		Argv:         argv,
		Env:          []string{"PATH=/usr/bin:/bin"},
		PIDNamespace: ns.path(),
	}
	specPath := filepath.Join(cdir, "spec.json")
	if err := spec.Write(specPath); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(cdir, "log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	proc, err := startProcess(initBinary, specPath, filepath.Join(cdir, "start-error"), out, filepath.Join(cdir, "pid"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.terminate(time.Now()) })
	return proc, logPath
}

func startSharedPod(t *testing.T, initBinary string) (*podPIDNamespace, string) {
	t.Helper()
	dir := t.TempDir()
	ns, err := startPodPIDNamespace(initBinary, filepath.Join(dir, pidNamespaceFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.stop)
	return ns, dir
}

// processesRunning lists the host PIDs of the processes whose command line is cmdline.
func processesRunning(cmdline string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Join(strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"), " ") == cmdline {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitForProcess waits until a process runs cmdline, or fails with the logs of the pod's
// containers.
func waitForProcess(t *testing.T, dir, cmdline string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(processesRunning(cmdline)) > 0 {
			return
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "containers", "*", "*"))
	var out strings.Builder
	for _, l := range logs {
		if data, err := os.ReadFile(l); err == nil && !strings.HasSuffix(l, ".json") {
			fmt.Fprintf(&out, "--- %s\n%s\n", l, data)
		}
	}
	t.Fatalf("no process %q started\n%s", cmdline, out.String())
}

func waitExited(t *testing.T, proc *process, what string) {
	t.Helper()
	select {
	case <-proc.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit", what)
	}
}

func TestContainersOfASharedPIDNamespaceSeeEachOthersProcesses(t *testing.T) {
	initBinary := sharedPIDTest(t)
	ns, dir := startSharedPod(t, initBinary)
	startSharedContainer(t, initBinary, dir, ns, "workload", "sleep", "3011")
	waitForProcess(t, dir, "sleep 3011")

	lister, logPath := startSharedContainer(t, initBinary, dir, ns, "sidecar", "sh", "-c",
		`for f in /proc/[0-9]*/cmdline; do
		   line=$(tr '\0' ' ' < "$f"); echo "$line"
		   [ "$line" = "sleep 3011 " ] && pid=${f#/proc/} && kill -0 "${pid%/cmdline}" && echo signalled
		 done
		 echo "pid1=$(tr '\0' ' ' < /proc/1/cmdline)"`)
	waitExited(t, lister, "the listing container")
	if lister.result.code != 0 {
		t.Fatalf("listing container exited with %d %s", lister.result.code, lister.result.startError)
	}
	out, _ := os.ReadFile(logPath)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	if !slices.Contains(lines, "sleep 3011") {
		t.Errorf("the other container's workload is not in /proc:\n%s", out)
	}
	if !slices.Contains(lines, "signalled") {
		t.Errorf("the other container's workload could not be signalled by the PID in /proc:\n%s", out)
	}
	if !slices.Contains(lines, "pid1="+containerspec.PauseCommand) {
		t.Errorf("PID 1 is not the pause process:\n%s", out)
	}
	if strings.Contains(string(out), "cohort-container-init") {
		t.Errorf("container init is in the pod's PID namespace; it should stay outside:\n%s", out)
	}
}

func TestStoppingAContainerEndsItsProcessesAndNoOther(t *testing.T) {
	initBinary := sharedPIDTest(t)
	ns, dir := startSharedPod(t, initBinary)
	// The shell dies of SIGTERM; its children do not get it and are left behind.
	stopped, _ := startSharedContainer(t, initBinary, dir, ns, "stopped", "sh", "-c", "sleep 3021 & sleep 3022 & wait")
	startSharedContainer(t, initBinary, dir, ns, "other", "sleep", "3023")
	for _, c := range []string{"sleep 3021", "sleep 3022", "sleep 3023"} {
		waitForProcess(t, dir, c)
	}

	stopped.terminate(time.Now().Add(5 * time.Second))
	for _, c := range []string{"sleep 3021", "sleep 3022"} {
		if pids := processesRunning(c); len(pids) > 0 {
			t.Errorf("%q outlived its container: %v", c, pids)
		}
	}
	if len(processesRunning("sleep 3023")) == 0 {
		t.Error("stopping one container ended another")
	}
}

func TestAContainerIgnoringSIGTERMIsKilledAtTheDeadlineAndInitReapsIt(t *testing.T) {
	initBinary := sharedPIDTest(t)
	ns, dir := startSharedPod(t, initBinary)
	stubborn, _ := startSharedContainer(t, initBinary, dir, ns, "stubborn", "sh", "-c", `trap "" TERM; sleep 3071 & wait`)
	waitForProcess(t, dir, "sleep 3071")

	stubborn.terminate(time.Now().Add(300 * time.Millisecond))
	if stubborn.result.code != 137 {
		t.Errorf("exit code %d, want 137 (killed)", stubborn.result.code)
	}
	if pids := processesRunning("sleep 3071"); len(pids) > 0 {
		t.Errorf("the container's process outlived its stop: %v", pids)
	}
	// Nothing of the pod was handed to a reaper outside it, so the namespace ends at once.
	start := time.Now()
	ns.stop()
	if took := time.Since(start); took > time.Second {
		t.Errorf("ending the pod's PID namespace took %s", took)
	}
}

func TestARestartedContainerJoinsTheSameNamespace(t *testing.T) {
	initBinary := sharedPIDTest(t)
	ns, dir := startSharedPod(t, initBinary)
	first, _ := startSharedContainer(t, initBinary, dir, ns, "workload", "sh", "-c", "sleep 3031 & exit 3")
	waitExited(t, first, "the first run")
	if first.result.code != 3 {
		t.Fatalf("first run exited with %d %s, want 3", first.result.code, first.result.startError)
	}
	if pids := processesRunning("sleep 3031"); len(pids) > 0 {
		t.Errorf("the first run's child outlived it: %v", pids)
	}
	startSharedContainer(t, initBinary, dir, ns, "workload", "sleep", "3032")
	waitForProcess(t, dir, "sleep 3032")
}

func TestEndingThePodPIDNamespaceEndsEveryContainer(t *testing.T) {
	initBinary := sharedPIDTest(t)
	ns, dir := startSharedPod(t, initBinary)
	a, _ := startSharedContainer(t, initBinary, dir, ns, "a", "sh", "-c", "sleep 3041 & wait")
	b, _ := startSharedContainer(t, initBinary, dir, ns, "b", "sleep", "3042")
	waitForProcess(t, dir, "sleep 3041")
	waitForProcess(t, dir, "sleep 3042")

	ns.stop()
	waitExited(t, a, "container a")
	waitExited(t, b, "container b")
	for _, c := range []string{"sleep 3041", "sleep 3042"} {
		if pids := processesRunning(c); len(pids) > 0 {
			t.Errorf("%q outlived the pod's PID namespace: %v", c, pids)
		}
	}
}

func TestKillContainersEndsALeftoverPodPIDNamespace(t *testing.T) {
	initBinary := sharedPIDTest(t)
	state := t.TempDir()
	pod := filepath.Join(state, "pod-uid")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	ns, err := startPodPIDNamespace(initBinary, filepath.Join(pod, pidNamespaceFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.stop)
	c, _ := startSharedContainer(t, initBinary, pod, ns, "c", "sh", "-c", "sleep 3051 & wait")
	waitForProcess(t, pod, "sleep 3051")

	if n := KillContainers(state, initBinary); n != 2 {
		t.Errorf("KillContainers killed %d processes, want the pause process and one init", n)
	}
	waitExited(t, c, "the container")
	for deadline := time.Now().Add(5 * time.Second); len(processesRunning("sleep 3051")) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the container's workload outlived KillContainers")
		}
	}
}

func TestKillMountNamespaceNeverKillsTheRunnersOwn(t *testing.T) {
	own, err := namespaceOf(os.Getpid(), "mnt")
	if err != nil {
		t.Skip("no /proc/self/ns:", err)
	}
	child := exec.Command("sleep", "3061")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if !slices.Contains(processesInMountNamespace(own), child.Process.Pid) {
		t.Fatal("a child of the test is not listed in the test's mount namespace")
	}
	if left := killMountNamespace(own, 0, time.Second); left != 0 {
		t.Errorf("killMountNamespace(own) = %d", left)
	}
	time.Sleep(50 * time.Millisecond)
	if len(processesRunning("sleep 3061")) == 0 {
		t.Error("killMountNamespace killed a process of the runner's own mount namespace")
	}
}

// A pinned namespace outlives its last process and keeps its identity: a kill that comes
// after the container's end cannot reach a new namespace that was given its number.
func TestAPinnedMountNamespaceOutlivesItsProcesses(t *testing.T) {
	child := exec.Command("sleep", "3062")
	child.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if err := child.Start(); err != nil {
		t.Skip("cannot start a process in a mount namespace of its own:", err)
	}
	pin, ns, err := pinNamespace(child.Process.Pid, "mnt")
	if err != nil {
		_ = child.Process.Kill()
		t.Fatal(err)
	}
	defer pin.Close()
	if want, _ := namespaceOf(child.Process.Pid, "mnt"); want != ns {
		t.Fatalf("pinned %v, the process is in %v", ns, want)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	var st unix.Stat_t
	if err := unix.Fstat(int(pin.Fd()), &st); err != nil || (namespaceID{st.Dev, st.Ino}) != ns {
		t.Fatalf("after its last process ended the pin names %v (%v), not %v", namespaceID{st.Dev, st.Ino}, err, ns)
	}
	if pids := processesInMountNamespace(ns); len(pids) != 0 {
		t.Fatalf("processes %v in a namespace whose only process ended", pids)
	}
}
