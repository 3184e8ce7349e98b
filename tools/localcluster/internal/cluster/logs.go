package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"cohort.dev/tools/localcluster/internal/podrunner"
)

// LogsRequest names a container's log: NS/POD, optionally the container, the run before
// the current one, or only the file's path.
type LogsRequest struct {
	Pod       string // NAMESPACE/NAME, or NAME in the default namespace
	Container string
	Previous  bool
	PathOnly  bool
}

// Logs prints a container's log from its file; it needs no running cluster, so it also
// works after `down` and for pods that are gone (the newest pod of that name).
func Logs(l Layout, req LogsRequest, out io.Writer) error {
	namespace, name, ok := strings.Cut(req.Pod, "/")
	if !ok {
		namespace, name = "default", req.Pod
	}
	podDir, err := newestPodLogDir(l.PodLogs, namespace, name)
	if err != nil {
		return err
	}
	container := req.Container
	if container == "" {
		entries, _ := os.ReadDir(podDir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) != 1 {
			return fmt.Errorf("pod %s/%s has containers %s: name one", namespace, name, strings.Join(names, ", "))
		}
		container = names[0]
	}
	dir := filepath.Join(podDir, container)
	runs := podrunner.LogRuns(dir)
	i := len(runs) - 1
	if req.Previous {
		i--
	}
	if i < 0 {
		return fmt.Errorf("no %slog for container %s in %s", map[bool]string{true: "previous "}[req.Previous], container, podDir)
	}
	path := filepath.Join(dir, strconv.Itoa(runs[i])+".log")
	if req.PathOnly {
		fmt.Fprintln(out, path)
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(out, f)
	return err
}

// newestPodLogDir finds NS_POD_UID with the newest modification time: the current pod of
// that name, or the last one.
func newestPodLogDir(root, namespace, name string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(root, namespace+"_"+name+"_*"))
	// A pod named like a prefix of another (web vs web_x) cannot match: names have no '_'.
	if len(matches) == 0 {
		return "", fmt.Errorf("no logs for pod %s/%s under %s", namespace, name, root)
	}
	sort.Slice(matches, func(i, j int) bool { return modTime(matches[i]) > modTime(matches[j]) })
	return matches[0], nil
}

func modTime(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.ModTime().UnixNano()
}
