// cohort-container-init is the first process of every container the pod runner starts.
//
// The runner starts it in fresh mount, PID and UTS namespaces. It joins the pod's network
// namespace, bind-mounts the pod's volumes, hosts and resolv.conf files at the paths the
// container expects, mounts a /proc for the new PID namespace, and then runs the workload
// as its child. Being PID 1 of the container's PID namespace is the point: when it exits,
// the kernel kills every process the workload left behind, so deleting a pod cannot leak
// processes. It forwards signals to the workload and exits with the workload's status.
//
// In a pod with shareProcessNamespace the PID namespace is the pod's, held by this
// program started as /pause, and init starts the workload in it (sharedpid.go).
package main

import (
	"fmt"
	"os"
	"runtime"

	"cohort.dev/tools/localcluster/internal/containerspec"
)

// startErrorExit is the exit status when the container could not be started at all; the
// runner reads the message from the error file and reports reason StartError.
const startErrorExit = 128

func init() {
	// setns(CLONE_NEWNET) changes only the calling thread, and the workload is forked
	// from that same thread, so main must stay on one OS thread.
	runtime.LockOSThread()
}

func main() {
	switch {
	case os.Args[0] == containerspec.PauseCommand:
		os.Exit(pause())
	case len(os.Args) >= 4 && os.Args[1] == execFlag:
		os.Exit(execInPodPIDNamespace(os.Args[2], os.Args[3:]))
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cohort-container-init SPEC.json ERROR-FILE")
		os.Exit(2)
	}
	// Opened before any mount can hide its path.
	errorFile, err := os.OpenFile(os.Args[2], os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort-container-init: %v\n", err)
		os.Exit(startErrorExit)
	}
	spec, err := containerspec.Read(os.Args[1])
	var program string
	if err == nil {
		program, err = enterContainer(spec)
	}
	var pid int
	if err == nil {
		pid, err = startWorkload(program, spec, errorFile)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort-container-init: %v\n", err)
		fmt.Fprint(errorFile, err.Error())
		os.Exit(startErrorExit)
	}
	errorFile.Close()
	os.Exit(superviseWorkload(pid))
}
