package siteproxy

import (
	"fmt"
	"net"
	"net/netip"
)

// DenyAddr refuses the addresses a proxied request must never reach, as
// smokescreen's classifyAddr does: loopback, link-local (where cloud
// metadata services live), unspecified, multicast and broadcast, and the
// agent's own addresses (the agent's own services are not a BMC). IPv4
// addresses embedded in IPv6 are judged as IPv4.
func DenyAddr(a netip.Addr) error {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return fmt.Errorf("%s is a loopback address", a)
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return fmt.Errorf("%s is a link-local address", a)
	case a.IsUnspecified(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is not a unicast address", a)
	}
	if a.Is6() {
		// 6to4 and NAT64 forms that carry an IPv4 address inside.
		b := a.As16()
		if b[0] == 0x20 && b[1] == 0x02 {
			return DenyAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
		if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b {
			return DenyAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		}
	}
	own, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("reading the agent's own addresses: %w", err)
	}
	for _, o := range own {
		if n, ok := o.(*net.IPNet); ok {
			if oa, ok := netip.AddrFromSlice(n.IP); ok && oa.Unmap() == a {
				return fmt.Errorf("%s is one of the agent's own addresses", a)
			}
		}
	}
	return nil
}
