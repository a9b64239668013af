package xid

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// XIDFallenOffBus is the XID of a GPU that fell off the bus; a "GPU has
// fallen off the bus" line without an Xid number is read as this XID.
const XIDFallenOffBus = 79

// XIDRecoveryAction is the XID the driver logs when a GPU's recovery action
// changes; its message says what the action now is.
const XIDRecoveryAction = 154

// EventKind says what a kernel line told.
type EventKind int

// The kinds of event a line may carry.
const (
	// EventXID is an "NVRM: Xid (PCI:…): N, …" line.
	EventXID EventKind = iota + 1
	// EventFallenOffBus is a "fallen off the bus" line without an Xid number.
	EventFallenOffBus
	// EventUUID is the driver's "NVRM: GPU at PCI:…: GPU-…" banner, which
	// maps a bus id to a UUID from the log itself.
	EventUUID
)

// Event is what one kernel message says about a GPU.
type Event struct {
	Kind EventKind
	// XID is the Xid number (XIDFallenOffBus for EventFallenOffBus).
	XID int
	// BusID is the normalised bus id.
	BusID string
	// UUID is set for EventUUID.
	UUID string
	// Message is the text after "N, " for an Xid, the whole line otherwise.
	Message string
}

var (
	// gpud's pattern, widened to accept a function and a missing comma.
	xidPattern = regexp.MustCompile(`NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\):\s*(\d+)(?:,\s*(.*))?`)
	// "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus."
	fallenPattern = regexp.MustCompile(`NVRM: GPU (?:at )?(?:PCI:)?([0-9a-fA-F:.]+): GPU has fallen off the bus`)
	// The multi-line record "NVRM: The NVIDIA GPU 0000:b3:00.0 / (PCI ID: …)
	// installed in this system has / fallen off the bus and is not responding".
	fallenLongPattern = regexp.MustCompile(`(?s)NVRM: The NVIDIA GPU ([0-9a-fA-F:.]+).*?fallen\s+off\s+the\s+bus`)
	uuidPattern       = regexp.MustCompile(`NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]+)`)
	// "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
	recoveryPattern = regexp.MustCompile(`recovery action changed from .*? to (0x[0-9a-fA-F]+)(?:\s*\(([^)]*)\))?`)
)

// ParseMessage reads one kernel message (the text after kmsg's ';', or a
// dmesg line with any timestamp prefix). It reports false for a message that
// says nothing about a GPU, or names a bus id that is not one.
func ParseMessage(msg string) (Event, bool) {
	i := strings.Index(msg, "NVRM: ")
	if i < 0 {
		return Event{}, false
	}
	msg = msg[i:]
	if m := xidPattern.FindStringSubmatch(msg); m != nil {
		bus := gpu.NormalizeBusID(m[1])
		n, err := strconv.Atoi(m[2])
		if bus == "" || err != nil || n <= 0 || n > 1<<16 {
			return Event{}, false
		}
		return Event{Kind: EventXID, XID: n, BusID: bus, Message: strings.TrimSpace(m[3])}, true
	}
	if m := fallenPattern.FindStringSubmatch(msg); m != nil {
		if bus := gpu.NormalizeBusID(m[1]); bus != "" {
			return Event{Kind: EventFallenOffBus, XID: XIDFallenOffBus, BusID: bus, Message: oneLine(msg)}, true
		}
		return Event{}, false
	}
	if m := fallenLongPattern.FindStringSubmatch(msg); m != nil {
		if bus := gpu.NormalizeBusID(m[1]); bus != "" {
			return Event{Kind: EventFallenOffBus, XID: XIDFallenOffBus, BusID: bus, Message: oneLine(msg)}, true
		}
		return Event{}, false
	}
	if m := uuidPattern.FindStringSubmatch(msg); m != nil {
		if bus := gpu.NormalizeBusID(m[1]); bus != "" {
			return Event{Kind: EventUUID, BusID: bus, UUID: m[2]}, true
		}
	}
	return Event{}, false
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.Join(strings.Fields(s), " ")
}

// Classify returns what an XID asks of an operator: ActionInformation,
// ActionReset or ActionReboot (see the table in the research note; NVIDIA's
// Xid catalog is the source). XID 79 needs a reboot and never a reset: the
// GPU is gone from the bus and a reset cannot reach it. XID 154 says its own
// action in its message, which takes precedence.
func Classify(xid int, message string) string {
	switch {
	case xid == XIDRecoveryAction:
		return recoveryAction(message)
	case xid >= 144 && xid <= 150:
		// NVLink5 errors say in the message whether they are fatal.
		if strings.Contains(message, "Fatal") && !strings.Contains(message, "Nonfatal") {
			return gpu.ActionReset
		}
		return gpu.ActionInformation
	}
	if a, ok := table[xid]; ok {
		return a
	}
	return gpu.ActionInformation
}

// table is the action per XID; unlisted XIDs are information.
var table = map[int]string{
	// Application faults and contained errors: the application restarts.
	13: gpu.ActionInformation, 31: gpu.ActionInformation, 32: gpu.ActionInformation,
	43: gpu.ActionInformation, 45: gpu.ActionInformation, 68: gpu.ActionInformation,
	94: gpu.ActionInformation, 92: gpu.ActionInformation,
	// 63: a row was marked for remapping; row-remap.pending judges it.
	63: gpu.ActionInformation,
	// Uncontained or hardware errors that a reset clears.
	46: gpu.ActionReset, 48: gpu.ActionReset, 62: gpu.ActionReset, 64: gpu.ActionReset,
	74: gpu.ActionReset, 95: gpu.ActionReset, 109: gpu.ActionReset, 110: gpu.ActionReset,
	119: gpu.ActionReset, 120: gpu.ActionReset, 136: gpu.ActionReset, 140: gpu.ActionReset,
	143: gpu.ActionReset, 155: gpu.ActionReset, 156: gpu.ActionReset, 158: gpu.ActionReset,
	// The GPU fell off the bus: only a reboot (or a power cycle) brings it back.
	XIDFallenOffBus: gpu.ActionReboot,
}

// recoveryAction reads XID 154's "to 0xN (…)": 0 none, 1 GPU reset, 2 node
// reboot, 3 drain P2P and 4 drain and reset (both resets once drained).
func recoveryAction(message string) string {
	m := recoveryPattern.FindStringSubmatch(message)
	if m == nil {
		// An unreadable 154 still says the driver wants something done;
		// the cautious reading is a reset.
		return gpu.ActionReset
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(m[1]), "0x"), 16, 32)
	if err != nil {
		return gpu.ActionReset
	}
	switch v {
	case 0:
		return gpu.ActionInformation
	case 2:
		return gpu.ActionReboot
	default:
		return gpu.ActionReset
	}
}

// DefaultIgnore are the application XIDs that say nothing about the GPU's
// health (k8s-device-plugin's list): 13, 31, 43, 45, 68, 109.
var DefaultIgnore = []int{13, 31, 43, 45, 68, 109}

// Ignore is a set of XIDs that xid.recent does not fail on.
type Ignore map[int]bool

// NewIgnore builds an Ignore from XIDs.
func NewIgnore(xids ...int) Ignore {
	ig := Ignore{}
	for _, x := range xids {
		ig[x] = true
	}
	return ig
}

// ParseIgnore reads a comma-separated list ("13,31,43"); an empty string is
// the default list and "none" is the empty list.
func ParseIgnore(s string) (Ignore, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return NewIgnore(DefaultIgnore...), nil
	}
	if strings.EqualFold(s, "none") {
		return Ignore{}, nil
	}
	ig := Ignore{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, errBadIgnore(f)
		}
		ig[n] = true
	}
	return ig, nil
}

type errBadIgnore string

func (e errBadIgnore) Error() string {
	return "XID ignore list: " + strconv.Quote(string(e)) + " is not an XID number"
}
