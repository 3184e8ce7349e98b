package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"cohort.dev/tools/localcluster/internal/containerspec"
)

// enterContainer turns this process's fresh namespaces into the container's view of the
// machine and returns the program to run. Everything happens in the private mount
// namespace, so other pods and the host keep their own /etc/hosts and mounts.
//
// A volume may be mounted over a directory that holds host paths the container needs
// (mountPath /src over a repository in /src/cohort), so every host path is opened before
// the first mount and used through its file descriptor afterwards.
func enterContainer(spec *containerspec.Spec) (string, error) {
	program, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		return "", err
	}
	var programStat unix.Stat_t
	if err := unix.Stat(program, &programStat); err != nil {
		return "", err
	}
	scratch, err := unix.Open(spec.ScratchDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("scratch directory: %w", err)
	}
	defer unix.Close(scratch)
	mounts, err := openSources(spec.Mounts)
	if err != nil {
		return "", err
	}
	defer func() {
		for _, m := range mounts {
			unix.Close(m.fd)
		}
	}()

	// Without this, bind mounts would propagate back to the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("make mounts private: %w", err)
	}
	for _, m := range mounts {
		if err := bindMount(m, spec.MountpointLog); err != nil {
			return "", err
		}
	}
	// In a pod's shared PID namespace, the second stage mounts /proc from inside it.
	if spec.PIDNamespace == "" {
		if err := mountProc(); err != nil {
			return "", err
		}
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return "", fmt.Errorf("set hostname: %w", err)
		}
	}
	if spec.NetNS != "" {
		if err := joinNetNS(spec.NetNS); err != nil {
			return "", err
		}
	}
	if spec.PIDNamespace != "" {
		if err := joinPodPIDNamespace(spec.PIDNamespace); err != nil {
			return "", err
		}
	}
	if err := enterWorkingDir(spec.WorkingDir, scratch); err != nil {
		return "", err
	}
	var after unix.Stat_t
	if err := unix.Stat(program, &after); err != nil || after.Dev != programStat.Dev || after.Ino != programStat.Ino {
		return "", fmt.Errorf("a volume's mountPath hides the program %s; mount the volume elsewhere", program)
	}
	return program, nil
}

// openedMount is a mount whose source is held open.
type openedMount struct {
	containerspec.Mount
	fd    int
	isDir bool
}

func openSources(specs []containerspec.Mount) ([]openedMount, error) {
	var out []openedMount
	for _, m := range specs {
		fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, o := range out {
				unix.Close(o.fd)
			}
			return nil, fmt.Errorf("volume source for %s: %w", m.Target, err)
		}
		var st unix.Stat_t
		_ = unix.Fstat(fd, &st)
		out = append(out, openedMount{Mount: m, fd: fd, isDir: st.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	// Parents first, so a mount below another volume's path lands inside that volume.
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].Target, "/") < strings.Count(out[j].Target, "/")
	})
	return out, nil
}

func bindMount(m openedMount, mountpointLog string) error {
	if err := ensureMountpoint(m.Target, m.isDir, mountpointLog); err != nil {
		return fmt.Errorf("create mount point %s: %w", m.Target, err)
	}
	source := "/proc/self/fd/" + strconv.Itoa(m.fd)
	if err := unix.Mount(source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		if err := unix.Mount("", m.Target, "", flags, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// ensureMountpoint creates a missing mount target. Below a path that is not a bind mount
// this creates it on the host's file system, so the topmost created path is logged for
// `local-cluster down` to remove once no pod needs it.
func ensureMountpoint(target string, dir bool, logPath string) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	top := target
	for parent := filepath.Dir(top); parent != "/"; parent = filepath.Dir(parent) {
		if _, err := os.Lstat(parent); err == nil {
			break
		}
		top = parent
	}
	parentDir := target
	if !dir {
		parentDir = filepath.Dir(target)
	}
	if err := os.MkdirAll(parentDir, 0o755); err != nil {
		return err
	}
	if !dir {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	if logPath != "" {
		if f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, top)
			f.Close()
		}
	}
	return nil
}

// mountProc mounts a /proc that shows the PID namespace of the calling process.
func mountProc() error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

func joinNetNS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("join network namespace %s: %w", path, err)
	}
	return nil
}

// enterWorkingDir changes to the container's workingDir (created if missing, as the
// runtime does), or to its scratch directory.
func enterWorkingDir(workingDir string, scratch int) error {
	if workingDir == "" {
		if err := unix.Fchdir(scratch); err != nil {
			return fmt.Errorf("scratch directory: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(workingDir, 0o755); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if err := unix.Chdir(workingDir); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	return nil
}
