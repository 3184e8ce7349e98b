package hostnet

import (
	"fmt"
	"net/netip"
	"sync"
)

// AddressPool hands out pod addresses from the pod CIDR. It walks forward through the
// range rather than reusing the lowest free address, so a deleted pod's address is not
// given to the next pod while clients may still hold it.
type AddressPool struct {
	mu      sync.Mutex
	prefix  netip.Prefix
	reserve map[netip.Addr]bool // network, gateway, broadcast
	inUse   map[netip.Addr]string
	next    netip.Addr
}

// NewAddressPool serves prefix, never handing out the gateway.
func NewAddressPool(prefix netip.Prefix, gateway netip.Addr) *AddressPool {
	prefix = prefix.Masked()
	return &AddressPool{
		prefix:  prefix,
		reserve: map[netip.Addr]bool{prefix.Addr(): true, gateway: true, lastAddr(prefix): true},
		inUse:   map[netip.Addr]string{},
		next:    prefix.Addr(),
	}
}

// Allocate returns the address held by owner, or a new one.
func (p *AddressPool) Allocate(owner string) (netip.Prefix, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, o := range p.inUse {
		if o == owner {
			return netip.PrefixFrom(addr, p.prefix.Bits()), nil
		}
	}
	size := 1 << (p.prefix.Addr().BitLen() - p.prefix.Bits())
	for range size {
		candidate := p.next.Next()
		if !p.prefix.Contains(candidate) {
			candidate = p.prefix.Addr()
		}
		p.next = candidate
		if p.reserve[candidate] || p.inUse[candidate] != "" {
			continue
		}
		p.inUse[candidate] = owner
		return netip.PrefixFrom(candidate, p.prefix.Bits()), nil
	}
	return netip.Prefix{}, fmt.Errorf("no free address in %s", p.prefix)
}

// Release returns owner's address to the pool.
func (p *AddressPool) Release(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, o := range p.inUse {
		if o == owner {
			delete(p.inUse, addr)
		}
	}
}

func lastAddr(prefix netip.Prefix) netip.Addr {
	bytes := prefix.Addr().As16()
	hostBits := prefix.Addr().BitLen() - prefix.Bits()
	for i := 15; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		bytes[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	addr := netip.AddrFrom16(bytes)
	if prefix.Addr().Is4() {
		addr = addr.Unmap()
	}
	return addr
}
