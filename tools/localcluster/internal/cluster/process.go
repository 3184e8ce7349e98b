package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cohort.dev/tools/localcluster/internal/podrunner"
)

// component is one long-running process of the cluster.
type component struct {
	name   string // also the name of its log and PID files
	binary string
	args   []string
}

func (l Layout) pidFile(name string) string { return filepath.Join(l.Run, name+".pid") }

// LogFile is where a component's output goes.
func (l Layout) LogFile(name string) string { return filepath.Join(l.Logs, name+".log") }

// start runs the component detached from the caller's session, output appended to its
// log, and records its PID.
func (l Layout) start(c component) (int, error) {
	logFile, err := os.OpenFile(l.LogFile(c.name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n==== %s: %s %s\n", time.Now().Format(time.RFC3339), c.binary, strings.Join(c.args, " "))
	cmd := exec.Command(c.binary, c.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = l.State
	// Its own session: Ctrl-C in the terminal that ran `up` does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", c.name, err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(l.pidFile(c.name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return pid, err
	}
	// Reap it if it dies while we are still here, so it can be seen as gone.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// runningPID returns the PID of the component if its recorded process is alive and is
// still the component's binary.
func (l Layout) runningPID(c component) (int, bool) {
	data, err := os.ReadFile(l.pidFile(c.name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	if !podrunner.IsProcessOf(pid, c.binary) || isZombie(pid) {
		return pid, false
	}
	return pid, true
}

// stop sends SIGTERM to the recorded process and SIGKILL after grace, then forgets it.
func (l Layout) stop(c component, grace time.Duration) (bool, error) {
	pid, ok := l.runningPID(c)
	defer os.Remove(l.pidFile(c.name))
	if !ok {
		return false, nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if _, alive := l.runningPID(c); !alive {
			return true, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for range 50 {
		if _, alive := l.runningPID(c); !alive {
			return true, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true, fmt.Errorf("%s (pid %d) did not exit", c.name, pid)
}

func isZombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// tail returns the last n lines of a log file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
