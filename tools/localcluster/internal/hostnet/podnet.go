package hostnet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// NamespacePrefix starts the name of every network namespace the local cluster creates,
// so leftovers can be found and removed.
const NamespacePrefix = "cohort-"

// PodNetwork is one pod's network namespace: eth0 with the pod's address, a default route
// through the bridge, and loopback.
type PodNetwork struct {
	Namespace string // name under /run/netns
	HostVeth  string // the bridge-side end of the veth pair
	Address   netip.Prefix
}

// NewPodNetwork names the namespace and veth after the pod's UID. Interface names are
// limited to 15 bytes, hence the short hash.
func NewPodNetwork(podUID string, address netip.Prefix) PodNetwork {
	sum := sha256.Sum256([]byte(podUID))
	short := hex.EncodeToString(sum[:])[:10]
	return PodNetwork{
		Namespace: NamespacePrefix + short,
		HostVeth:  "vc" + short,
		Address:   address,
	}
}

// Path is the namespace's file, which processes join with setns.
func (p PodNetwork) Path() string { return "/run/netns/" + p.Namespace }

// Create builds the namespace and plugs it into the bridge. A half-built namespace from an
// earlier failed attempt is removed first.
func (p PodNetwork) Create(b Bridge) error {
	_ = p.Remove()
	steps := [][]string{
		{"netns", "add", p.Namespace},
		{"link", "add", p.HostVeth, "type", "veth", "peer", "name", "eth0", "netns", p.Namespace},
		{"link", "set", p.HostVeth, "master", b.Name, "up"},
		{"-n", p.Namespace, "addr", "add", p.Address.String(), "dev", "eth0"},
		{"-n", p.Namespace, "link", "set", "eth0", "up"},
		{"-n", p.Namespace, "link", "set", "lo", "up"},
		{"-n", p.Namespace, "route", "add", "default", "via", b.Gateway.Addr().String()},
	}
	for _, step := range steps {
		if _, err := ip(step...); err != nil {
			_ = p.Remove()
			return fmt.Errorf("pod network: %w", err)
		}
	}
	return nil
}

// Remove deletes the namespace, which also deletes both ends of the veth pair.
func (p PodNetwork) Remove() error {
	return RemoveNamespace(p.Namespace)
}

// RemoveNamespace deletes one network namespace; a missing one is not an error.
func RemoveNamespace(name string) error {
	if linkExists(vethFor(name)) {
		_, _ = ip("link", "del", vethFor(name))
	}
	names, err := ListNamespaces()
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == name {
			_, err := ip("netns", "del", name)
			return err
		}
	}
	return nil
}

func vethFor(namespace string) string {
	return "vc" + strings.TrimPrefix(namespace, NamespacePrefix)
}

// ListNamespaces returns the local cluster's network namespaces.
func ListNamespaces() ([]string, error) {
	out, err := ip("netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.HasPrefix(fields[0], NamespacePrefix) {
			names = append(names, fields[0])
		}
	}
	return names, nil
}
