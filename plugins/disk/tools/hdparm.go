package tools

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// ATASecurity is the Security section of `hdparm -I`, the state machine an
// ATA secure erase goes through.
type ATASecurity struct {
	Supported bool `json:"supported"`
	Enabled   bool `json:"enabled"`
	Locked    bool `json:"locked"`
	// Frozen: the BIOS froze the security state at boot; no erase until
	// the drive is power-cycled (a suspend/resume or a hot-plug).
	Frozen            bool   `json:"frozen"`
	Expired           bool   `json:"expired"`
	EnhancedErase     bool   `json:"enhancedErase"`
	EraseTime         string `json:"eraseTime,omitempty"`
	EnhancedEraseTime string `json:"enhancedEraseTime,omitempty"`
}

// ATADrive is what disk.wipe reads of `hdparm -I`.
type ATADrive struct {
	Model    string      `json:"model"`
	Serial   string      `json:"serial"`
	Firmware string      `json:"firmware"`
	WWN      string      `json:"wwn,omitempty"`
	Security ATASecurity `json:"security"`
}

// ParseHdparmI parses `hdparm -I <dev>`. A drive without a Security
// section, or a section whose state lines are missing, is an error: a
// secure erase must never guess the state.
func ParseHdparmI(b []byte) (ATADrive, error) {
	var d ATADrive
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	inSec := false
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		if k, v, ok := strings.Cut(trim, ":"); ok && !strings.HasPrefix(line, "\t\t") {
			switch strings.TrimSpace(k) {
			case "Model Number":
				d.Model = strings.TrimSpace(v)
			case "Serial Number":
				d.Serial = strings.TrimSpace(v)
			case "Firmware Revision":
				d.Firmware = strings.TrimSpace(v)
			case "Logical Unit WWN Device Identifier":
				d.WWN = strings.TrimSpace(v)
			}
		}
		if trim == "Security:" {
			inSec = true
			continue
		}
		if !inSec {
			continue
		}
		if line != "" && !strings.HasPrefix(line, "\t") {
			inSec = false
			continue
		}
		neg := false
		f := strings.Fields(trim)
		if len(f) > 0 && f[0] == "not" {
			neg, f = true, f[1:]
		}
		if len(f) == 0 {
			continue
		}
		word := strings.Join(f, " ")
		switch {
		case word == "supported":
			d.Security.Supported, seen["supported"] = !neg, true
		case word == "enabled":
			d.Security.Enabled, seen["enabled"] = !neg, true
		case word == "locked":
			d.Security.Locked, seen["locked"] = !neg, true
		case word == "frozen":
			d.Security.Frozen, seen["frozen"] = !neg, true
		case strings.HasPrefix(word, "expired"):
			d.Security.Expired = !neg
		case word == "supported: enhanced erase":
			d.Security.EnhancedErase = !neg
		case strings.Contains(word, "for SECURITY ERASE UNIT"):
			for _, part := range strings.Split(word, ".") {
				part = strings.TrimSpace(part)
				t, what, ok := strings.Cut(part, " for ")
				if !ok {
					continue
				}
				if strings.HasPrefix(what, "ENHANCED") {
					d.Security.EnhancedEraseTime = t
				} else {
					d.Security.EraseTime = t
				}
			}
		}
	}
	if d.Model == "" && d.Serial == "" {
		return d, fmt.Errorf("%w: hdparm -I: no Model Number or Serial Number", ErrMalformed)
	}
	for _, k := range []string{"supported", "enabled", "locked", "frozen"} {
		if !seen[k] {
			return d, fmt.Errorf("%w: hdparm -I: the Security section does not say whether the drive is %s", ErrMalformed, k)
		}
	}
	return d, nil
}
