package main

// A pod with shareProcessNamespace has one PID namespace for all its containers, held by
// a pause process as in Kubernetes. Container init then gets no PID namespace of its own:
// the runner starts it in the runner's, and init joins the pod's with setns before it
// starts the workload. setns(CLONE_NEWPID) only decides where the caller's children go,
// and /proc shows the PID namespace of the process that mounts it, so the child is a
// second stage of this program that mounts /proc inside the namespace and then execs the
// workload. Init itself stays outside, as a runtime's shim does: the pod's /proc lists
// pause, the containers' workloads and what they start, nothing else.

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The second stage's file descriptors besides stdin, stdout and stderr.
const (
	stageErrorFD = 3 // the start-error file
	stageSelfFD  = 4 // this program, which it was started from
)

// pause is the whole life of the process that holds a pod's PID namespace: PID 1 of it,
// keeping it alive while containers come and go, and reaping the processes orphaned in
// it. The runner ends it with SIGKILL once the pod's containers have stopped, and with it,
// by the kernel's rule for a namespace's PID 1, every process still in the namespace.
// SIGTERM and SIGINT end it too, as they end Kubernetes' pause.
func pause() int {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "cohort-container-init: the pause process must be PID 1 of a new PID namespace")
		return 2
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return 0
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); err != nil || pid <= 0 {
				break
			}
		}
	}
	return 0
}

// joinPodPIDNamespace makes this thread's children start in the pod's PID namespace.
func joinPodPIDNamespace(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open pod PID namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWPID); err != nil {
		return fmt.Errorf("join pod PID namespace %s: %w", path, err)
	}
	return nil
}

// execFlag starts the second stage: cohort-container-init --exec PROGRAM ARGV...
const execFlag = "--exec"

// secondStage is how init starts the workload in a pod's PID namespace: this program
// again, from self (the file it runs from; a volume may hide its path), given the
// start-error file and self as stageErrorFD and stageSelfFD. When init exits, nothing in
// the namespace ends with it: the runner then ends every process of the container's mount
// namespace. (No Pdeathsig: Go's fork checks it with getppid, which is 0 across the
// namespace boundary, and the child would kill itself.)
func secondStage(program string, argv []string, attr *syscall.ProcAttr, errorFile *os.File, self int) (string, []string) {
	attr.Files = append(attr.Files, errorFile.Fd(), uintptr(self))
	return fmt.Sprintf("/proc/self/fd/%d", stageSelfFD), append([]string{"cohort-container-init", execFlag, program}, argv...)
}

// execInPodPIDNamespace is the second stage: the container's first process inside the
// pod's PID namespace. It mounts /proc for that namespace in the container's mount
// namespace and becomes the workload; it returns only if that fails.
func execInPodPIDNamespace(program string, argv []string) int {
	unix.CloseOnExec(stageErrorFD)
	unix.CloseOnExec(stageSelfFD)
	err := mountProc()
	if err == nil {
		err = fmt.Errorf("exec %s: %w", argv[0], unix.Exec(program, argv, os.Environ()))
	}
	fmt.Fprintf(os.Stderr, "cohort-container-init: %v\n", err)
	fmt.Fprint(os.NewFile(stageErrorFD, "start-error"), err.Error())
	return startErrorExit
}
