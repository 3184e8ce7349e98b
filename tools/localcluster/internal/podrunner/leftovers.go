package podrunner

import (
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"cohort.dev/tools/localcluster/internal/hostnet"
)

// removeLeftovers clears what an earlier runner that did not stop cleanly left behind:
// container processes, network namespaces and per-pod state. Pods still in the API are
// then started afresh.
func removeLeftovers(cfg Config) {
	KillContainers(cfg.StateDir, cfg.InitBinary)
	RemovePodNetworks()
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		log.Printf("remove %s: %v", cfg.StateDir, err)
	}
	_ = os.MkdirAll(cfg.StateDir, 0o755)
}

// KillContainers sends SIGKILL to every container init process (STATE/POD-UID/containers/
// NAME/pid) and then every pod's pause process (STATE/POD-UID/pause.pid) recorded under
// stateDir that is still that binary. Killing init ends the container's own PID namespace,
// if it has one; killing pause ends the pod's shared PID namespace and every process in
// it. Pause goes last, so the inits it would make exit are still there to count.
func KillContainers(stateDir, initBinary string) int {
	files, _ := filepath.Glob(filepath.Join(stateDir, "*", "containers", "*", "pid"))
	pauses, _ := filepath.Glob(filepath.Join(stateDir, "*", pidNamespaceFile))
	files = append(files, pauses...)
	killed := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 1 {
			continue
		}
		if !IsProcessOf(pid, initBinary) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

// IsProcessOf says whether pid runs the given executable, so a recycled PID is never
// signalled by mistake.
func IsProcessOf(pid int, executable string) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	want, err := filepath.EvalSymlinks(executable)
	if err != nil {
		want = executable
	}
	return exe == want || exe == executable
}

// RemovePodNetworks deletes every network namespace the local cluster created.
func RemovePodNetworks() int {
	names, err := hostnet.ListNamespaces()
	if err != nil {
		log.Printf("list network namespaces: %v", err)
		return 0
	}
	for _, n := range names {
		if err := hostnet.RemoveNamespace(n); err != nil {
			log.Printf("remove network namespace %s: %v", n, err)
		}
	}
	return len(names)
}
