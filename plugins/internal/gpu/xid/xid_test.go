package xid

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// storeFrom reads the records into a fresh in-memory store.
func storeFrom(t *testing.T, records string) *Store {
	t.Helper()
	s, err := OpenStore("", "boot-1")
	require.NoError(t, err)
	_, err = s.ReadKmsg(gputest.WriteKmsg(t, t.TempDir(), records))
	require.NoError(t, err)
	return s
}

func TestParseKmsgRecordReadsTheRealCapture(t *testing.T) {
	var recs []Record
	st, err := ReadKmsg(filepath.Join("testdata", "kmsg-nvswitch-open-no-xid.kmsg"), func(r Record) { recs = append(recs, r) })
	require.NoError(t, err)
	require.Zero(t, st.Bad)
	require.Equal(t, len(recs), st.Records)
	require.Equal(t, Record{Priority: 6, Facility: 0, Seq: 3964, Timestamp: 206764307 * time.Microsecond, Flags: "-", Message: "nvidia-nvswitch2: open (major=510)"}, recs[0])
	// The capture has no trailing newline: the last record still counts.
	last := recs[len(recs)-1]
	require.NotEmpty(t, last.Message)
	for _, r := range recs {
		_, ok := ParseMessage(r.Message)
		require.False(t, ok, "no Xid in this capture: %q", r.Message)
	}
}

func TestParseKmsgRecordHeaderAndEscapes(t *testing.T) {
	r, err := ParseKmsgRecord(`12,7,1500,c,more;NVRM: a\x0ab\x5cx41`)
	require.NoError(t, err)
	require.Equal(t, 4, r.Priority)
	require.Equal(t, 1, r.Facility)
	require.Equal(t, uint64(7), r.Seq)
	require.Equal(t, 1500*time.Microsecond, r.Timestamp)
	require.Equal(t, "c", r.Flags)
	require.Equal(t, "NVRM: a\nb\\x41", r.Message, "an escaped backslash is not unescaped twice")
	for _, bad := range []string{"", "no header", "6,1,2;x", "a,1,2,-;x", "6,b,2,-;x", "6,1,c,-;x", "6,1,99999999999999999999,-;x"} {
		_, err := ParseKmsgRecord(bad)
		require.ErrorIs(t, err, ErrBadRecord, bad)
	}
}

func TestReadKmsgAttachesContinuationLines(t *testing.T) {
	recs := "6,1,10,-;NVRM: GPU at PCI:0000:3b:00: GPU-aaaa\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\nnot a record\n6,2,11,-;next\n"
	var got []Record
	st, err := ReadKmsg(gputest.WriteKmsg(t, t.TempDir(), recs), func(r Record) { got = append(got, r) })
	require.NoError(t, err)
	require.Equal(t, ReadStats{Records: 2, Bad: 1}, st)
	require.Equal(t, []string{"SUBSYSTEM=pci", "DEVICE=+pci:0000:3b:00.0"}, got[0].Dict)
	require.Equal(t, "next", got[1].Message)
}

func TestReadKmsgOfAMissingPath(t *testing.T) {
	_, err := ReadKmsg(filepath.Join(t.TempDir(), "kmsg"), func(Record) {})
	require.ErrorContains(t, err, "opening kernel log")
}

// XID 79 and its companion line on the real capture: one condition, a reboot.
func TestXID79FallenOffTheBusNeedsARebootNeverAReset(t *testing.T) {
	s := storeFrom(t, gputest.KmsgFromDmesg(fixture(t, "xid-79-fallen-off-bus-sxid-20034.dmesg"), 100))
	conds := s.Conditions(NewIgnore(DefaultIgnore...))
	require.Len(t, conds, 1, "SXid lines name NVSwitches, not GPUs")
	c := conds[0]
	require.Equal(t, 79, c.XID)
	require.Equal(t, "0000:91:00", c.BusID)
	require.Equal(t, gpu.ActionReboot, c.Action)
	require.Equal(t, 2, c.Count, "the Xid line and the 'GPU has fallen off the bus' line")
	require.Equal(t, map[string]string{"0000:91:00": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"}, s.UUIDs())
	require.Equal(t, gpu.ActionReboot, Classify(79, "GPU has fallen off the bus."))
	require.NotEqual(t, gpu.ActionReset, Classify(79, ""))
}

func TestFallenOffTheBusMultiLineRecordWithoutAnXid(t *testing.T) {
	s := storeFrom(t, gputest.KmsgFromDmesg(fixture(t, "fallen-off-bus-multiline-record.dmesg"), 1))
	conds := s.Conditions(nil)
	require.Len(t, conds, 1)
	require.Equal(t, 79, conds[0].XID)
	require.Equal(t, "0000:b3:00", conds[0].BusID)
	require.Equal(t, gpu.ActionReboot, conds[0].Action)
	require.Equal(t, "NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: (PCI ID: 10de:26b5) installed in this system has NVRM: fallen off the bus and is not responding to commands.", conds[0].Message)
}

func TestDBEAndRowRemapCapture(t *testing.T) {
	s := storeFrom(t, gputest.KmsgFromDmesg(fixture(t, "xid-48-63-94-dbe-row-remap-iso.dmesg"), 1))
	byXID := map[int]gpu.XIDCondition{}
	for _, c := range s.Conditions(NewIgnore(DefaultIgnore...)) {
		require.Equal(t, "0000:19:00", c.BusID)
		byXID[c.XID] = c
	}
	require.Equal(t, gpu.ActionReset, byXID[48].Action)
	require.Equal(t, 1, byXID[48].Count)
	require.Equal(t, gpu.ActionInformation, byXID[63].Action, "row-remap.pending judges a remap")
	require.Equal(t, "pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.", byXID[63].Message)
	require.Equal(t, gpu.ActionInformation, byXID[94].Action)
	require.Greater(t, byXID[94].Count, 1)
}

func TestGSPTimeoutXID119(t *testing.T) {
	s := storeFrom(t, gputest.KmsgFromDmesg(fixture(t, "xid-119-gsp-rpc-timeout-ctime.dmesg"), 1))
	conds := s.Conditions(nil)
	require.NotEmpty(t, conds)
	require.Equal(t, 119, conds[0].XID)
	require.Equal(t, "0000:9b:00", conds[0].BusID)
	require.Equal(t, gpu.ActionReset, conds[0].Action)
	require.Equal(t, "GPU-509665ad-b600-ac93-3616-d754b23d636d", s.UUIDs()["0000:9b:00"])
}

// The configurable ignore list marks application XIDs (13, 31, 43, 45, 68,
// 109 by default).
func TestApplicationXIDsAreIgnoredByDefault(t *testing.T) {
	for _, name := range []string{"xid-13-109-ctime.dmesg", "xid-31-109-ctime.dmesg", "xid-13-43-decode-iso.dmesg"} {
		s := storeFrom(t, gputest.KmsgFromDmesg(fixture(t, name), 1))
		conds := s.Conditions(NewIgnore(DefaultIgnore...))
		require.NotEmpty(t, conds, name)
		for _, c := range conds {
			require.True(t, c.Ignored, "%s: XID %d", name, c.XID)
		}
		for _, c := range s.Conditions(Ignore{}) {
			require.False(t, c.Ignored)
		}
	}
	s := storeFrom(t, gputest.KmsgFromDmesg(fixture(t, "xid-13-43-decode-iso.dmesg"), 1))
	counts := map[int]int{}
	for _, c := range s.Conditions(nil) {
		require.Equal(t, "0000:38:00", c.BusID)
		counts[c.XID] = c.Count
	}
	require.Equal(t, map[int]int{13: 629, 43: 7}, counts)
}

// XID 154: parse the recovery action; the latest change holds.
func TestXID154RecoveryAction(t *testing.T) {
	require.Equal(t, gpu.ActionReset, Classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"))
	require.Equal(t, gpu.ActionReboot, Classify(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"))
	require.Equal(t, gpu.ActionInformation, Classify(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"))
	require.Equal(t, gpu.ActionReset, Classify(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"))

	msgs := strings.Split(strings.TrimSpace(fixture(t, "xid-13-32-74-149-154-messages.msg")), "\n")
	s := storeFrom(t, gputest.KmsgRecords(msgs, 1))
	byXID := map[int]gpu.XIDCondition{}
	for _, c := range s.Conditions(nil) {
		byXID[c.XID] = c
	}
	require.Equal(t, 2, byXID[154].Count)
	require.Equal(t, "0008:01:00", byXID[154].BusID)
	require.Equal(t, gpu.ActionInformation, byXID[154].Action, "the action went back to None")
	require.Equal(t, gpu.ActionReset, byXID[74].Action)
	require.Equal(t, "0003:00:00", byXID[74].BusID)
	require.Equal(t, gpu.ActionInformation, byXID[32].Action)
	require.Equal(t, gpu.ActionReset, byXID[149].Action, "NETIR_LINK_EVT Fatal")

	// Only the first change: a reset is needed.
	s = storeFrom(t, gputest.KmsgRecords(msgs[5:6], 1))
	require.Equal(t, gpu.ActionReset, s.Conditions(nil)[0].Action)
}

func TestNVLink5NonfatalIsInformation(t *testing.T) {
	msgs := strings.Split(strings.TrimSpace(fixture(t, "xid-145-149-nvlink5-gb200-messages.msg")), "\n")
	s := storeFrom(t, gputest.KmsgRecords(msgs, 1))
	conds := s.Conditions(nil)
	require.NotEmpty(t, conds)
	buses := map[string]bool{}
	for _, c := range conds {
		buses[c.BusID] = true
		require.Contains(t, []int{145, 149}, c.XID)
	}
	require.True(t, buses["0018:01:00"])
	require.Equal(t, gpu.ActionInformation, Classify(145, "pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)"))
}

// "the XID store persisted in a file keyed by boot id so nothing is lost
// when the kernel ring drops lines"
func TestStoreSurvivesARingThatDroppedLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", StoreFile)
	first := gputest.KmsgRecords([]string{
		"NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected",
		"NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics SM Warp Exception",
	}, 10)
	s, err := OpenStore(path, "boot-1")
	require.NoError(t, err)
	_, err = s.ReadKmsg(gputest.WriteKmsg(t, t.TempDir(), first))
	require.NoError(t, err)

	// Later the ring has overwritten seq 10 and 11; it holds 11 again (read
	// before) and a new record.
	later := gputest.KmsgRecords([]string{
		"NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics SM Warp Exception",
		"NVRM: Xid (PCI:0000:5e:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
	}, 11)
	s2, err := OpenStore(path, "boot-1")
	require.NoError(t, err)
	_, err = s2.ReadKmsg(gputest.WriteKmsg(t, t.TempDir(), later))
	require.NoError(t, err)
	conds := s2.Conditions(NewIgnore(DefaultIgnore...))
	require.Len(t, conds, 3)
	require.Equal(t, 48, conds[0].XID, "the DBE the ring dropped is still there")
	require.Equal(t, 1, conds[1].Count, "seq 11 was read once, not twice")
	require.Equal(t, 79, conds[2].XID)
	require.Equal(t, gpu.ActionReboot, conds[2].Action)

	// A new boot starts afresh.
	s3, err := OpenStore(path, "boot-2")
	require.NoError(t, err)
	require.Empty(t, s3.Conditions(nil))
	require.Equal(t, "boot-2", s3.BootID())
}

func TestStoreClearForgetsOneGPU(t *testing.T) {
	s := storeFrom(t, gputest.KmsgRecords([]string{
		"NVRM: Xid (PCI:0000:3b:00): 48, DBE",
		"NVRM: Xid (PCI:0000:5e:00): 95, uncontained",
	}, 1))
	s.Clear("00000000:3B:00.0")
	conds := s.Conditions(nil)
	require.Len(t, conds, 1)
	require.Equal(t, "0000:5e:00", conds[0].BusID)
	// Reading the same ring again does not bring the cleared XID back.
	_, err := s.ReadKmsg(gputest.WriteKmsg(t, t.TempDir(), gputest.KmsgRecords([]string{"NVRM: Xid (PCI:0000:3b:00): 48, DBE"}, 1)))
	require.NoError(t, err)
	require.Len(t, s.Conditions(nil), 1)
}

func TestCorruptStoreStartsAfresh(t *testing.T) {
	p := filepath.Join(t.TempDir(), StoreFile)
	require.NoError(t, os.WriteFile(p, []byte("{not json"), 0o644))
	s, err := OpenStore(p, "boot-1")
	require.NoError(t, err)
	require.Empty(t, s.Conditions(nil))
}

func TestParseIgnore(t *testing.T) {
	ig, err := ParseIgnore("")
	require.NoError(t, err)
	require.Equal(t, NewIgnore(13, 31, 43, 45, 68, 109), ig)
	ig, err = ParseIgnore(" 13, 48 ")
	require.NoError(t, err)
	require.Equal(t, NewIgnore(13, 48), ig)
	ig, err = ParseIgnore("none")
	require.NoError(t, err)
	require.Empty(t, ig)
	_, err = ParseIgnore("13,x")
	require.EqualError(t, err, `XID ignore list: "x" is not an XID number`)
}

func TestParseMessageRefusesWhatIsNotAGPU(t *testing.T) {
	for _, m := range []string{
		"nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
		"NVRM: Xid (PCI:zz:00): 48, x",
		"NVRM: GPU Board Serial Number: 1653723052734",
		"IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
	} {
		_, ok := ParseMessage(m)
		require.False(t, ok, m)
	}
}

// gpu.reset clears a GPU's XIDs while inventory.refresh, in another process
// with its own Store on the same file, reads the kernel log: neither undoes
// the other's change.
func TestStoreSharedByTwoProcessesKeepsBothChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), StoreFile)
	ring := gputest.WriteKmsg(t, t.TempDir(), gputest.KmsgRecords([]string{
		"NVRM: Xid (PCI:0000:3b:00): 48, DBE",
		"NVRM: Xid (PCI:0000:5e:00): 95, uncontained",
	}, 1))
	first, err := OpenStore(path, "boot-1")
	require.NoError(t, err)
	_, err = first.ReadKmsg(ring)
	require.NoError(t, err)

	refresh, err := OpenStore(path, "boot-1") // inventory.refresh opens...
	require.NoError(t, err)
	reset, err := OpenStore(path, "boot-1") // ...while gpu.reset clears and saves
	require.NoError(t, err)
	reset.Clear("0000:3b:00")
	require.NoError(t, reset.Save())

	// The refresh reads a ring with one new record and saves its stale view.
	ring2 := gputest.WriteKmsg(t, t.TempDir(), gputest.KmsgRecords([]string{
		"NVRM: Xid (PCI:0000:3b:00): 48, DBE",
		"NVRM: Xid (PCI:0000:5e:00): 95, uncontained",
		"NVRM: Xid (PCI:0000:86:00): 119, GSP RPC timeout",
	}, 1))
	_, err = refresh.ReadKmsg(ring2)
	require.NoError(t, err)
	var buses []string
	for _, c := range refresh.Conditions(nil) {
		buses = append(buses, c.BusID)
	}
	require.Equal(t, []string{"0000:5e:00", "0000:86:00"}, buses, "the clear stuck and the new XID was kept")

	// And a later save by the resetting process keeps the refresh's XID.
	require.NoError(t, reset.Save())
	again, err := OpenStore(path, "boot-1")
	require.NoError(t, err)
	require.Len(t, again.Conditions(nil), 2)
}
