package podrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"cohort.dev/tools/localcluster/internal/containerspec"
)

// launch starts one run of the container. On failure it returns the waiting reason the
// kubelet would report.
func (c *container) launch() (*process, string, error) {
	sb := c.w.currentSandbox()
	pod := c.w.currentPod()
	spec, reason, err := c.processSpec(sb, pod, c.spec.Command, c.spec.Args, true)
	if err != nil {
		return nil, reason, err
	}
	c.mu.Lock()
	run := c.restarts
	c.mu.Unlock()
	dir := sb.containerDir(c.spec.Name)
	specPath := filepath.Join(dir, "spec-"+strconv.Itoa(int(run))+".json")
	if err := spec.Write(specPath); err != nil {
		return nil, "CreateContainerError", err
	}
	logFile, err := c.w.r.openContainerLog(pod, c.spec.Name, run)
	if err != nil {
		return nil, "CreateContainerError", err
	}
	defer logFile.Close()
	proc, err := startProcess(c.w.r.cfg.InitBinary, specPath, filepath.Join(dir, "start-error"),
		logFile, filepath.Join(dir, "pid"), spec.PIDNamespace != "")
	if err != nil {
		return nil, "StartError", err
	}
	return proc, "", nil
}

// processSpec resolves everything a process of this container needs: its command line
// (mapping cohort images to build/bin), environment and mounts. Exec probes use it too,
// with their own command.
func (c *container) processSpec(sb *sandbox, pod *v1.Pod, command, args []string, useImage bool) (*containerspec.Spec, string, error) {
	env, err := c.w.r.containerEnv(c.w.ctx, pod, &c.spec, sb)
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}

	var argv []string
	if useImage {
		cmd, err := c.w.r.resolveCommand(&c.spec, env)
		if err != nil {
			return nil, "CreateContainerError", err
		}
		argv = cmd.argv
		c.mu.Lock()
		c.imageID = cmd.imageID
		c.mu.Unlock()
	} else {
		argv = expandAll(append(append([]string{}, command...), args...), env)
		argv = c.w.r.mapInterpreter(argv)
	}
	mounts, err := sb.mountsFor(&c.spec)
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}
	// Without a workingDir a container starts in its image's WORKDIR, private to it; a
	// scratch directory of its own is the closest thing here.
	scratch := filepath.Join(sb.containerDir(c.spec.Name), "work")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return nil, "CreateContainerError", err
	}
	return &containerspec.Spec{
		NetNS:         sb.netNSPath(),
		PIDNamespace:  sb.pidNSPath(),
		Hostname:      sb.hostname,
		Mounts:        mounts,
		MountpointLog: c.w.r.cfg.MountpointLog,
		WorkingDir:    c.spec.WorkingDir,
		ScratchDir:    scratch,
		Argv:          argv,
		Env:           envList(env),
	}, "", nil
}

// openContainerLog opens (appending) the log file of one run of a container, laid out as
// the kubelet lays out /var/log/pods: NS_POD_UID/CONTAINER/RUN.log.
func (r *Runner) openContainerLog(pod *v1.Pod, container string, run int32) (*os.File, error) {
	path := containerLogPath(r.cfg.LogDir, pod, container, run)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}

func containerLogPath(logDir string, pod *v1.Pod, container string, run int32) string {
	podDir := fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)
	return filepath.Join(logDir, podDir, container, strconv.Itoa(int(run))+".log")
}
