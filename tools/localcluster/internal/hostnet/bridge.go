package hostnet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Bridge is the root-namespace side of the pod network: a Linux bridge that every pod's
// veth joins, carrying the gateway address (which the host, and so the apiserver, also
// answers on).
type Bridge struct {
	Name    string
	Gateway netip.Prefix // e.g. 10.244.0.1/16
}

// Ensure creates the bridge and its address if missing; it is safe to call again.
func (b Bridge) Ensure() error {
	if !linkExists(b.Name) {
		if _, err := ip("link", "add", b.Name, "type", "bridge"); err != nil {
			return err
		}
	}
	out, err := ip("-o", "addr", "show", "dev", b.Name)
	if err != nil {
		return err
	}
	if !containsWord(out, b.Gateway.String()) {
		if _, err := ip("addr", "add", b.Gateway.String(), "dev", b.Name); err != nil {
			return err
		}
	}
	if _, err := ip("link", "set", b.Name, "up"); err != nil {
		return err
	}
	// A blackhole for the pod range, behind the bridge's own route (a higher metric), and
	// left in place by Remove: with the cluster down, anything still addressed to a pod IP
	// is dropped here instead of leaving the machine by its default route.
	_, err = ip("route", "replace", "blackhole", b.Gateway.Masked().String(), "metric", "4096")
	return err
}

// Remove deletes the bridge; a missing bridge is not an error.
func (b Bridge) Remove() error {
	if !linkExists(b.Name) {
		return nil
	}
	if _, err := ip("link", "del", b.Name); err != nil {
		return fmt.Errorf("remove bridge: %w", err)
	}
	return nil
}

// Exists says whether the bridge is there.
func (b Bridge) Exists() bool { return linkExists(b.Name) }

func containsWord(text, word string) bool {
	return slices.Contains(strings.Fields(text), word)
}
