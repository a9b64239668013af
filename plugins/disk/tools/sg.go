package tools

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// SCSIDrive is what disk.wipe reads of `sg_inq` (sg3_utils).
type SCSIDrive struct {
	Vendor   string `json:"vendor"`
	Product  string `json:"product"`
	Revision string `json:"revision"`
	Serial   string `json:"serial,omitempty"`
}

// ParseSgInq parses `sg_inq <dev>`'s standard INQUIRY text.
func ParseSgInq(b []byte) (SCSIDrive, error) {
	var d SCSIDrive
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Vendor identification":
			d.Vendor = v
		case "Product identification":
			d.Product = v
		case "Product revision level":
			d.Revision = v
		case "Unit serial number":
			d.Serial = v
		}
	}
	if d.Vendor == "" && d.Product == "" {
		return d, fmt.Errorf("%w: sg_inq: no Vendor or Product identification", ErrMalformed)
	}
	return d, nil
}

// SenseKey is the sense key `sg_requests <dev>` reports ("No Sense" on a
// drive with nothing pending, a sanitize included).
func SenseKey(b []byte) (string, error) {
	i := bytes.Index(b, []byte("Sense key:"))
	if i < 0 {
		return "", fmt.Errorf("%w: sg_requests: no sense key", ErrMalformed)
	}
	line, _, _ := strings.Cut(string(b[i+len("Sense key:"):]), "\n")
	return strings.TrimSpace(line), nil
}

// SanitizeCompleted reports whether `sg_sanitize`'s output (run without
// --early, so it polls the drive itself) says the sanitize completed.
func SanitizeCompleted(b []byte) bool {
	return bytes.Contains(b, []byte("completed successfully"))
}
