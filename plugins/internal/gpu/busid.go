package gpu

import (
	"strings"
)

// NormalizeBusID returns the canonical form of a PCI bus id, "0000:3b:00":
// lower case, a four-digit domain, bus and device, no function. The kernel
// log writes "PCI:0000:3b:00", NVML "00000000:3B:00.0", sysfs
// "0000:3b:00.0" and nvidia-smi "00000000:3B:00.0"; all four name one GPU,
// and merging the sources needs one key. A GPU is one PCI function, so
// dropping the function loses nothing. It returns "" for a string that is not
// a bus id.
func NormalizeBusID(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "PCI:")
	s = strings.TrimPrefix(s, "pci:")
	s = strings.ToLower(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if !isHex(s[i+1:]) || len(s[i+1:]) != 1 {
			return ""
		}
		s = s[:i]
	}
	parts := strings.Split(s, ":")
	var domain, bus, dev string
	switch len(parts) {
	case 2:
		domain, bus, dev = "0000", parts[0], parts[1]
	case 3:
		domain, bus, dev = parts[0], parts[1], parts[2]
	default:
		return ""
	}
	if domain == "" || len(domain) > 8 || !isHex(domain) || len(bus) != 2 || !isHex(bus) || len(dev) != 2 || !isHex(dev) {
		return ""
	}
	// NVML pads the domain to eight digits; the kernel uses four. Domains
	// above 0xffff do not exist on Linux, so the last four digits suffice.
	if len(domain) > 4 {
		if strings.Trim(domain[:len(domain)-4], "0") != "" {
			return ""
		}
		domain = domain[len(domain)-4:]
	}
	for len(domain) < 4 {
		domain = "0" + domain
	}
	return domain + ":" + bus + ":" + dev
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
