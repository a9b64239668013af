package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// NVMeController is what disk.wipe reads of `nvme id-ctrl -o json`.
type NVMeController struct {
	Model    string `json:"model"`
	Serial   string `json:"serial"`
	Firmware string `json:"firmware"`
	// FormatSupported is OACS bit 1: the controller supports Format NVM.
	FormatSupported bool `json:"formatSupported"`
	// CryptoEraseFormat is FNA bit 2: Format NVM can erase cryptographically.
	CryptoEraseFormat bool `json:"cryptoEraseFormat"`
	// Sanitize capabilities (SANICAP bits 0..2).
	SanitizeCrypto    bool `json:"sanitizeCrypto"`
	SanitizeBlock     bool `json:"sanitizeBlock"`
	SanitizeOverwrite bool `json:"sanitizeOverwrite"`
}

// NVMeNamespace is what disk.wipe reads of `nvme id-ns -o json`.
type NVMeNamespace struct {
	EUI64 string `json:"eui64,omitempty"`
	NGUID string `json:"nguid,omitempty"`
	// SizeBlocks is NSZE, the namespace's size in logical blocks.
	SizeBlocks uint64 `json:"sizeBlocks"`
}

// The sanitize status codes of SSTAT bits 2:0 (NVMe base spec, Sanitize
// Status log page).
const (
	SanitizeNever      = 0
	SanitizeSucceeded  = 1
	SanitizeInProgress = 2
	SanitizeFailed     = 3
	SanitizeSucceededN = 4 // completed successfully with No-Deallocate
)

// NVMeSanitizeLog is what disk.wipe reads of `nvme sanitize-log -o json`.
type NVMeSanitizeLog struct {
	// Status is SSTAT bits 2:0.
	Status int `json:"status"`
	// GlobalErased is SSTAT bit 8: no user data was written since the
	// sanitize (or the subsystem was never written).
	GlobalErased bool `json:"globalErased"`
	// Progress is SPROG: 65535 when done, else the fraction done of 65536.
	Progress int `json:"progress"`
}

// ErrMalformed is wrapped by every parser's error: the tool printed
// something this package cannot read.
var ErrMalformed = errors.New("tool output not understood")

// ParseNVMeIDCtrl parses `nvme id-ctrl -o json`.
func ParseNVMeIDCtrl(b []byte) (NVMeController, error) {
	var raw struct {
		SN      *string `json:"sn"`
		MN      *string `json:"mn"`
		FR      string  `json:"fr"`
		OACS    *uint64 `json:"oacs"`
		FNA     *uint64 `json:"fna"`
		SANICAP *uint64 `json:"sanicap"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return NVMeController{}, fmt.Errorf("%w: nvme id-ctrl: %w", ErrMalformed, err)
	}
	if raw.SN == nil || raw.MN == nil || raw.OACS == nil || raw.FNA == nil {
		return NVMeController{}, fmt.Errorf("%w: nvme id-ctrl: missing sn, mn, oacs or fna", ErrMalformed)
	}
	c := NVMeController{
		Model: strings.TrimSpace(*raw.MN), Serial: strings.TrimSpace(*raw.SN), Firmware: strings.TrimSpace(raw.FR),
		FormatSupported: *raw.OACS&(1<<1) != 0, CryptoEraseFormat: *raw.FNA&(1<<2) != 0,
	}
	if raw.SANICAP != nil {
		c.SanitizeCrypto = *raw.SANICAP&1 != 0
		c.SanitizeBlock = *raw.SANICAP&2 != 0
		c.SanitizeOverwrite = *raw.SANICAP&4 != 0
	}
	return c, nil
}

// ParseNVMeIDNs parses `nvme id-ns -o json`. An all-zero EUI-64 or NGUID
// means the namespace has none and is left empty.
func ParseNVMeIDNs(b []byte) (NVMeNamespace, error) {
	var raw struct {
		NSZE  *uint64 `json:"nsze"`
		EUI64 string  `json:"eui64"`
		NGUID string  `json:"nguid"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return NVMeNamespace{}, fmt.Errorf("%w: nvme id-ns: %w", ErrMalformed, err)
	}
	if raw.NSZE == nil {
		return NVMeNamespace{}, fmt.Errorf("%w: nvme id-ns: missing nsze", ErrMalformed)
	}
	zero := func(s string) string {
		if strings.Trim(s, "0") == "" {
			return ""
		}
		return s
	}
	return NVMeNamespace{EUI64: zero(raw.EUI64), NGUID: zero(raw.NGUID), SizeBlocks: *raw.NSZE}, nil
}

var sstatText = regexp.MustCompile(`^\((\d+)\)`)

// ParseNVMeSanitizeLog parses `nvme sanitize-log -o json`, in both shapes
// nvme-cli prints: 2.x nests the fields under the device name with sstat an
// object ({"status":"(1) …","global_erased":1}); 1.x prints sstat as the
// raw number.
func ParseNVMeSanitizeLog(b []byte) (NVMeSanitizeLog, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: %w", ErrMalformed, err)
	}
	body := top
	if _, ok := top["sstat"]; !ok {
		if len(top) != 1 {
			return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: no sstat", ErrMalformed)
		}
		for _, v := range top {
			body = nil
			if err := json.Unmarshal(v, &body); err != nil || body == nil {
				return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: no sstat under the device", ErrMalformed)
			}
		}
	}
	var out NVMeSanitizeLog
	if p, ok := body["sprog"]; ok {
		if err := json.Unmarshal(p, &out.Progress); err != nil {
			return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: sprog: %w", ErrMalformed, err)
		}
	}
	s, ok := body["sstat"]
	if !ok {
		return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: no sstat", ErrMalformed)
	}
	var n uint64
	if err := json.Unmarshal(s, &n); err == nil {
		out.Status, out.GlobalErased = int(n&7), n&(1<<8) != 0
		return out, nil
	}
	var obj struct {
		Status       string `json:"status"`
		GlobalErased *int   `json:"global_erased"`
	}
	if err := json.Unmarshal(s, &obj); err != nil {
		return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: sstat is neither a number nor an object", ErrMalformed)
	}
	m := sstatText.FindStringSubmatch(obj.Status)
	if m == nil || obj.GlobalErased == nil {
		return NVMeSanitizeLog{}, fmt.Errorf("%w: nvme sanitize-log: sstat status %q", ErrMalformed, obj.Status)
	}
	st, _ := strconv.Atoi(m[1])
	out.Status, out.GlobalErased = st&7, *obj.GlobalErased != 0
	return out, nil
}
