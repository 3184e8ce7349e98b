package hostnet

import (
	"net/netip"
	"testing"
)

func TestAddressPoolSkipsGatewayAndDoesNotReuseAtOnce(t *testing.T) {
	p := NewAddressPool(netip.MustParsePrefix("10.9.0.0/29"), netip.MustParseAddr("10.9.0.1"))
	a, _ := p.Allocate("a")
	b, _ := p.Allocate("b")
	if a.String() != "10.9.0.2/29" || b.String() != "10.9.0.3/29" {
		t.Fatalf("got %s %s", a, b)
	}
	if again, _ := p.Allocate("a"); again != a {
		t.Errorf("the same owner got a second address %s", again)
	}
	p.Release("a")
	if c, _ := p.Allocate("c"); c.String() != "10.9.0.4/29" {
		t.Errorf("released address reused at once: %s", c)
	}
}

func TestAddressPoolRunsOut(t *testing.T) {
	p := NewAddressPool(netip.MustParsePrefix("10.9.0.0/30"), netip.MustParseAddr("10.9.0.1"))
	if a, err := p.Allocate("a"); err != nil || a.Addr().String() != "10.9.0.2" {
		t.Fatalf("got %s %v", a, err)
	}
	if _, err := p.Allocate("b"); err == nil {
		t.Error("a /30 has one pod address; want an error for the second")
	}
}
