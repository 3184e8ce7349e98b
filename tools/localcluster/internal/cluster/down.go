package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"cohort.dev/tools/localcluster/internal/hostnet"
	"cohort.dev/tools/localcluster/internal/podrunner"
)

// Down stops every process `up` started, in reverse order (the pod runner first, which
// stops the pods), then removes what may be left: container processes, network
// namespaces, the bridge, mount points created on the host. Etcd's data, certificates
// and logs stay; the next `up` continues the same cluster. Safe to run at any time.
func Down(l Layout, out io.Writer) error {
	s, err := loadSettings(l)
	if err != nil {
		return err
	}
	var errs []string
	all := components(l, s)
	for i := len(all) - 1; i >= 0; i-- {
		c := all[i]
		stopped, err := l.stop(c, stopGrace(c.name))
		if err != nil {
			errs = append(errs, err.Error())
		}
		if stopped {
			fmt.Fprintf(out, "local-cluster: stopped %s\n", c.name)
		}
	}
	if n := podrunner.KillContainers(l.Pods, l.Binary("cohort-container-init")); n > 0 {
		fmt.Fprintf(out, "local-cluster: killed %d leftover containers\n", n)
	}
	if n := podrunner.RemovePodNetworks(); n > 0 {
		fmt.Fprintf(out, "local-cluster: removed %d pod network namespaces\n", n)
	}
	if err := os.RemoveAll(l.Pods); err != nil {
		errs = append(errs, err.Error())
	}
	if gw, err := s.Gateway(); err == nil {
		if err := (hostnet.Bridge{Name: s.Bridge, Gateway: gw}).Remove(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	removeMountpoints(l.MountpointLog())
	if len(errs) > 0 {
		return fmt.Errorf("down: %s", strings.Join(errs, "; "))
	}
	fmt.Fprintln(out, "local-cluster: down")
	return nil
}

// Reset is Down and then forgets the cluster: etcd data, certificates, logs.
func Reset(l Layout, out io.Writer) error {
	if err := Down(l, out); err != nil {
		return err
	}
	if err := os.RemoveAll(l.State); err != nil {
		return err
	}
	fmt.Fprintf(out, "local-cluster: removed %s\n", l.State)
	return nil
}

// removeMountpoints deletes the mount points containers had to create on the host, deepest
// first, and only while they are still empty.
func removeMountpoints(logPath string) {
	f, err := os.Open(logPath)
	if err != nil {
		return
	}
	var paths []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if p := strings.TrimSpace(scanner.Text()); strings.HasPrefix(p, "/") && p != "/" {
			paths = append(paths, p)
		}
	}
	f.Close()
	slices.Sort(paths)
	paths = slices.Compact(paths)
	var kept []string
	for i := len(paths) - 1; i >= 0; i-- {
		if !removeIfEmpty(paths[i]) {
			kept = append(kept, paths[i])
		}
	}
	if len(kept) == 0 {
		_ = os.Remove(logPath)
		return
	}
	_ = os.WriteFile(logPath, []byte(strings.Join(kept, "\n")+"\n"), 0o644)
}

// removeIfEmpty removes an empty directory tree or an empty file.
func removeIfEmpty(path string) bool {
	info, err := os.Lstat(path)
	if err != nil {
		return true
	}
	if !info.IsDir() {
		if info.Mode().IsRegular() && info.Size() == 0 {
			return os.Remove(path) == nil
		}
		return false
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return false
	}
	for _, e := range entries {
		p := path + "/" + e.Name()
		if !removeIfEmpty(p) {
			return false
		}
	}
	return os.Remove(path) == nil
}
