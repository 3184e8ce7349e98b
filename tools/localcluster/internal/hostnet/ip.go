// Package hostnet creates and removes the local cluster's network devices with iproute2:
// one bridge in the root network namespace and, per pod, a network namespace joined to
// that bridge by a veth pair. Nothing here routes or NATs beyond the bridge, so pods reach
// each other and the host, and nothing else.
package hostnet

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// ip runs one iproute2 command and returns its standard output.
func ip(args ...string) (string, error) {
	cmd := exec.Command("ip", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// linkExists says whether a network device of that name exists in the root namespace.
func linkExists(name string) bool {
	_, err := ip("link", "show", "dev", name)
	return err == nil
}
