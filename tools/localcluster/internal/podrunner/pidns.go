package podrunner

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cohort.dev/tools/localcluster/internal/containerspec"
)

// pidNamespaceFile is where, in a pod's state directory, the PID of its pause process is
// kept for `local-cluster down` and the next runner.
const pidNamespaceFile = "pause.pid"

// leftoverKillTimeout bounds the wait for a container's leftover processes to die.
const leftoverKillTimeout = 10 * time.Second

// podPIDNamespace is the PID namespace the containers of a pod with shareProcessNamespace
// share. As with the kubelet's pause container, a process of its own holds it (PID 1 of
// the namespace, reaping orphans), so it outlives every container's restarts.
type podPIDNamespace struct {
	pause   *exec.Cmd
	pidFile string
	once    sync.Once
}

// startPodPIDNamespace starts the pause process (cohort-container-init under the name
// containerspec.PauseCommand) in a new PID namespace.
func startPodPIDNamespace(initBinary, pidFile string) (*podPIDNamespace, error) {
	cmd := exec.Command(initBinary)
	cmd.Args[0] = containerspec.PauseCommand
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the pod's pause process: %w", err)
	}
	_ = os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	return &podPIDNamespace{pause: cmd, pidFile: pidFile}, nil
}

// path is the namespace's file, which container init joins. The pause process is not
// reaped before stop, so its PID cannot name another process meanwhile; if it died, the
// file is gone and containers fail to start with an error saying so.
func (ns *podPIDNamespace) path() string {
	return "/proc/" + strconv.Itoa(ns.pause.Process.Pid) + "/ns/pid"
}

// stop ends the pause process and so every process still in the namespace.
func (ns *podPIDNamespace) stop() {
	ns.once.Do(func() {
		_ = ns.pause.Process.Signal(syscall.SIGKILL)
		_ = ns.pause.Wait()
		_ = os.Remove(ns.pidFile)
	})
}

// namespaceID names a namespace by the device and inode of its file under /proc/PID/ns.
type namespaceID struct {
	dev, ino uint64
}

func namespaceOf(pid int, kind string) (namespaceID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st); err != nil {
		return namespaceID{}, err
	}
	return namespaceID{dev: st.Dev, ino: st.Ino}, nil
}

// pinNamespace opens a process's namespace of that kind and says which it is: while the
// file is open the namespace lives on, so its identity is not handed to a new one.
func pinNamespace(pid int, kind string) (*os.File, namespaceID, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/" + kind)
	if err != nil {
		return nil, namespaceID{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return nil, namespaceID{}, err
	}
	return f, namespaceID{dev: st.Dev, ino: st.Ino}, nil
}

// killMountNamespace ends the processes of a container in a shared PID namespace. Without
// a PID namespace of its own, what marks them as the container's is the mount namespace
// they all inherited from init (a process that unshares a mount namespace of its own
// escapes this, and lives until the pod's pause process ends). It sends SIGKILL to every
// process in ns but spare (init, when it should reap the workload itself; 0 for none),
// until none is left or timeout passes, and returns how many are left.
func killMountNamespace(ns namespaceID, spare int, timeout time.Duration) int {
	if own, err := namespaceOf(os.Getpid(), "mnt"); err != nil || own == ns {
		return 0 // never the runner's own
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := slices.DeleteFunc(processesInMountNamespace(ns), func(pid int) bool { return pid == spare })
		if len(pids) == 0 || time.Now().After(deadline) {
			return len(pids)
		}
		for _, pid := range pids {
			killIfInMountNamespace(pid, ns)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesInMountNamespace lists the live processes in ns (an exited process no longer
// has namespaces, so zombies are not listed).
func processesInMountNamespace(ns namespaceID) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		log.Printf("list processes: %v", err)
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if id, err := namespaceOf(pid, "mnt"); err == nil && id == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killIfInMountNamespace signals through a pidfd, checking the namespace after opening it,
// so that a PID reused since the scan is never signalled.
func killIfInMountNamespace(pid int, ns namespaceID) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if id, err := namespaceOf(pid, "mnt"); err == nil && id == ns {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}
