package xid

import (
	"os"
	"strings"
	"testing"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// FuzzParseKmsgRecord: no input panics the record or message parsers; a
// parsed event names a normalised bus id and a known action.
func FuzzParseKmsgRecord(f *testing.F) {
	if b, err := os.ReadFile("testdata/kmsg-nvswitch-open-no-xid.kmsg"); err == nil {
		for _, l := range strings.Split(string(b), "\n")[:3] {
			f.Add(l)
		}
	}
	if b, err := os.ReadFile("testdata/xid-13-32-74-149-154-messages.msg"); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f.Add("4,1,1000,-;" + l)
		}
	}
	f.Add(`4,9,12,-;NVRM: The NVIDIA GPU 0000:b3:00.0\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\x0aNVRM: fallen off the bus and is not responding to commands.`)
	f.Add("4,2,3,-;NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
	f.Add("4,2,3,-;NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.")
	f.Add("4,2,3,-;NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b")
	f.Add(`6,1,2,-;\x`)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseKmsgRecord(line)
		if err != nil {
			return
		}
		ev, ok := ParseMessage(r.Message)
		if !ok {
			return
		}
		if gpu.NormalizeBusID(ev.BusID) != ev.BusID {
			t.Fatalf("bus id %q is not normalised", ev.BusID)
		}
		switch Classify(ev.XID, ev.Message) {
		case gpu.ActionInformation, gpu.ActionReset, gpu.ActionReboot:
		default:
			t.Fatalf("unknown action for XID %d", ev.XID)
		}
		if ev.XID == XIDFallenOffBus && Classify(ev.XID, ev.Message) != gpu.ActionReboot {
			t.Fatal("XID 79 must need a reboot")
		}
	})
}
