package wipe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/better-compute/commands/plugins/disk/blockdev"
	"github.com/better-compute/commands/plugins/disk/internal/loopdev"
	"github.com/better-compute/commands/plugins/disk/tools"
)

const diskSize = 16 << 20

func fill(t *testing.T, dev string) []byte {
	t.Helper()
	data := make([]byte, diskSize)
	_, _ = rand.Read(data)
	require.NoError(t, os.WriteFile(dev, data, 0))
	return data
}

func readAll(t *testing.T, dev string) []byte {
	t.Helper()
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	// The test reads the medium, not what the page cache kept.
	require.NoError(t, unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0))
	b := make([]byte, diskSize)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	return b
}

func wipeErr(t *testing.T, err error, reason string) *Error {
	t.Helper()
	require.Error(t, err)
	var we *Error
	require.ErrorAs(t, err, &we)
	require.Equal(t, reason, we.Reason, err.Error())
	return we
}

// "modes metadata (reported as metadata, never as a wipe)": the
// signatures and both ends are gone, verified by readback, while user data
// in the middle is still there, and the record says metadata, not erased.
func TestWipe_MetadataOnALoopDeviceIsReportedAsMetadataNeverAWipe(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{PartScan: true})
	data := fill(t, dev)
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", "-E", "nodiscard", dev)
	require.Contains(t, loopdev.Run(t, "wipefs", dev), "ext4")

	res, err := Run(context.Background(), Deps{}, Request{Device: dev, Mode: ModeMetadata})
	require.NoError(t, err)
	require.Equal(t, "metadata", res.Scope)
	require.False(t, res.Erased, "a metadata erase is never reported as a wipe")
	require.True(t, res.Readback.Passed, res.Readback.Summary)
	require.Equal(t, "zeros", res.Readback.Expect)
	require.Equal(t, 2*MetadataRegion/BlockSize, res.Readback.Zero)
	require.Contains(t, strings.Join(res.PostState["signaturesErased"].([]string), "\n"), "ext4")
	require.Equal(t, "ok", res.PostState["partitionReread"])
	require.Empty(t, strings.TrimSpace(loopdev.Run(t, "wipefs", dev)), "no signature is left")
	require.Equal(t, []Tool{{Name: "wipefs", Version: "wipefs from util-linux " + strings.Fields(loopdev.Run(t, "wipefs", "--version"))[3]}}, res.Tools)

	got := readAll(t, dev)
	require.True(t, bytes.Equal(make([]byte, MetadataRegion), got[:MetadataRegion]), "the first MiB reads back zeros")
	require.True(t, bytes.Equal(make([]byte, MetadataRegion), got[diskSize-MetadataRegion:]), "the last MiB reads back zeros")
	// ext4 wrote its tables in the middle; a block past them still holds
	// the random data: nothing but metadata was erased.
	mid := diskSize - 2*MetadataRegion
	require.True(t, bytes.Equal(data[mid:mid+BlockSize], got[mid:mid+BlockSize]), "user data past the metadata is untouched")
	require.Equal(t, dev, res.Device.Path)
	require.EqualValues(t, diskSize, res.Device.SizeBytes)
	require.Equal(t, "loop", res.Device.Transport)
	require.False(t, res.Started.IsZero())
	require.False(t, res.Finished.Before(res.Started))
}

// "overwrite ... verified by readback": every byte reads back zero.
func TestWipe_OverwriteOnALoopDeviceReadsBackZeros(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	fill(t, dev)
	res, err := Run(context.Background(), Deps{}, Request{Device: dev, Mode: ModeOverwrite, Samples: 16})
	require.NoError(t, err)
	require.True(t, res.Erased)
	require.Equal(t, "device", res.Scope)
	require.True(t, res.Readback.Passed, res.Readback.Summary)
	require.Len(t, res.Readback.Samples, 18, "16 random blocks plus the first and the last")
	for _, s := range res.Readback.Samples {
		require.NotEqual(t, s.Before, s.After, "block %d held random data before", s.Offset)
	}
	require.EqualValues(t, diskSize, res.PostState["bytesWritten"])
	require.Equal(t, "BLKRRPART "+dev+": invalid argument", res.PostState["partitionReread"], "a loop device without -P has no partition scanning, and the record says so")
	require.True(t, bytes.Equal(make([]byte, diskSize), readAll(t, dev)), "the whole device reads back zeros")
}

// "refuses devices mounted": the filesystem survives the attempt.
func TestWipe_RefusesAMountedDevice(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", dev)
	mnt := t.TempDir()
	if out, err := execOut("mount", dev, mnt); err != nil {
		t.Skipf("cannot mount a loop device here: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = execOut("umount", mnt) })
	for _, mode := range []Mode{ModeMetadata, ModeOverwrite} {
		_, err := Run(context.Background(), Deps{}, Request{Device: dev, Mode: mode})
		we := wipeErr(t, err, ReasonRefused)
		require.Contains(t, we.Error(), "is mounted: "+dev+" on "+mnt)
	}
	require.Contains(t, loopdev.Run(t, "wipefs", dev), "ext4", "the filesystem is untouched")
}

// "refuses devices ... read-only".
func TestWipe_RefusesAReadOnlyDevice(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{ReadOnly: true})
	_, err := Run(context.Background(), Deps{}, Request{Device: dev, Mode: ModeOverwrite})
	require.Contains(t, wipeErr(t, err, ReasonRefused).Error(), "read-only")
}

// "refuses devices ... in use (holders, open exclusive)": another process's
// exclusive open, and a device-mapper target stacked on the device.
func TestWipe_RefusesADeviceInUse(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_EXCL, 0)
	require.NoError(t, err)
	_, err = Run(context.Background(), Deps{}, Request{Device: dev, Mode: ModeOverwrite})
	require.Contains(t, wipeErr(t, err, ReasonRefused).Error(), "in use (the kernel refused an exclusive open")
	require.NoError(t, f.Close())
}

// "RAID members": a device that md holds (sysfs holders), read from a
// sysfs tree the test writes, since md cannot be assembled in every CI
// container.
func TestWipe_RefusesARAIDMemberAndAHeldPartition(t *testing.T) {
	root := t.TempDir()
	mountinfo := filepath.Join(root, "mountinfo")
	require.NoError(t, os.WriteFile(mountinfo, []byte("22 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"), 0o600))
	mk := func(path, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(content), 0o600))
	}
	mk("class/block/sdb/ro", "0\n")
	mk("class/block/sdb/dev", "8:16\n")
	mk("class/block/sdb/holders/md127", "")
	mk("class/block/sdc/ro", "0\n")
	mk("class/block/sdc/dev", "8:32\n")
	mk("class/block/sdc/sdc1/partition", "1\n")
	mk("class/block/sdc1/dev", "8:33\n")
	mk("class/block/sdc1/holders/dm-0", "")
	mk("class/block/sdd/ro", "0\n")
	mk("class/block/sdd/dev", "8:48\n")
	sys := blockdev.Sys{SysRoot: root, MountInfo: mountinfo}
	err := sys.Check(blockdev.Identity{Path: "/dev/sdb", Name: "sdb", Major: 8, Minor: 16})
	require.ErrorIs(t, err, blockdev.ErrRefused)
	require.Contains(t, err.Error(), "/dev/sdb is a RAID member of md127")
	err = sys.Check(blockdev.Identity{Path: "/dev/sdc", Name: "sdc", Major: 8, Minor: 32})
	require.Contains(t, err.Error(), "/dev/sdc is in use by dm-0 (sysfs holders of sdc1)")
	require.NoError(t, sys.Check(blockdev.Identity{Path: "/dev/sdd", Name: "sdd", Major: 8, Minor: 48}))
}

// A device-mapper target stacked on a real loop device, where the kernel
// has device-mapper.
func TestWipe_RefusesALoopDeviceUnderDeviceMapper(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	if _, err := execOut("dmsetup", "--version"); err != nil {
		t.Skip("dmsetup is not installed: the holders half is not run")
	}
	name := "bcwipetest" + filepath.Base(dev)
	if out, err := execOut("dmsetup", "create", name, "--table", "0 8192 linear "+dev+" 0"); err != nil {
		t.Skipf("device-mapper is not available here: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = execOut("dmsetup", "remove", name) })
	_, err := Run(context.Background(), Deps{}, Request{Device: dev, Mode: ModeOverwrite})
	require.Contains(t, wipeErr(t, err, ReasonRefused).Error(), "is in use by dm-")
}

func TestWipe_RefusesAnUnknownModeAndAFile(t *testing.T) {
	_, err := Run(context.Background(), Deps{}, Request{Device: "/dev/null", Mode: "shred"})
	require.Contains(t, wipeErr(t, err, ReasonUnsupported).Error(), `mode "shred"`)
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	_, err = Run(context.Background(), Deps{}, Request{Device: p, Mode: ModeOverwrite})
	require.Contains(t, wipeErr(t, err, ReasonRefused).Error(), "is not a block device")
}

// A partition is refused: disk.wipe takes the whole disk.
func TestWipe_RefusesAPartition(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{PartScan: true})
	writeMBR(t, dev)
	part := dev + "p1"
	if _, err := os.Stat(part); err != nil {
		// A container's /dev gets no node for a new partition (no udev):
		// make one from the numbers sysfs gives.
		nums, rerr := os.ReadFile("/sys/class/block/" + filepath.Base(dev) + "p1/dev")
		if rerr != nil {
			t.Skipf("the kernel made no partition of %s: %v", dev, rerr)
		}
		var maj, min uint32
		_, serr := fmt.Sscanf(strings.TrimSpace(string(nums)), "%d:%d", &maj, &min)
		require.NoError(t, serr)
		part = filepath.Join(t.TempDir(), "part1")
		require.NoError(t, unix.Mknod(part, unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))))
	}
	_, err := Run(context.Background(), Deps{}, Request{Device: part, Mode: ModeOverwrite})
	require.Contains(t, wipeErr(t, err, ReasonRefused).Error(), "is a partition")
}

func execOut(name string, args ...string) (string, error) {
	out, err := execCommand(name, args...)
	return out, err
}

// scramble overwrites the device with random bytes: what a crypto erase
// leaves (the old key is gone, the data decrypts to noise).
func scramble(t *testing.T, dev string) func() {
	return func() { fill(t, dev) }
}

var testTools = "../tools/testdata/"

func nvmeRunner(t *testing.T, dev string, ctrl string, sanitize func()) *tools.Recorded {
	r := tools.NewRecorded().
		OnFile("nvme --version", testTools+"nvme-version.txt").
		OnFile("nvme id-ctrl -o json "+dev, testTools+ctrl).
		OnFile("nvme id-ns -o json "+dev, testTools+"nvme-id-ns-pm9a3.json").
		OnFile("nvme sanitize-log -o json "+dev, testTools+"nvme-sanitize-log-idle.json").
		OnFile("nvme sanitize-log -o json "+dev, testTools+"nvme-sanitize-log-running.json").
		OnFile("nvme sanitize-log -o json "+dev, testTools+"nvme-sanitize-log-done.json")
	r.OnDo("nvme sanitize "+dev+" --sanact=4", tools.Output{Stdout: []byte("Sanitize Command is Success\n")}, sanitize)
	return r
}

// "NVMe format/sanitize (crypto erase where supported)", through recorded
// nvme-cli output: the record carries the drive's identity, SANACT, the
// tool version, the sanitize log's success with the global-erased bit, and
// a readback where every block that held data changed.
func TestWipe_NVMeSanitizeCryptoEraseThroughRecordedOutput(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	fill(t, dev)
	r := nvmeRunner(t, dev, "nvme-id-ctrl-pm9a3.json", scramble(t, dev))
	res, err := Run(context.Background(), Deps{Runner: r, SanitizePoll: time.Millisecond}, Request{Device: dev, Mode: ModeNVMeSanitize})
	require.NoError(t, err)
	require.True(t, res.Erased)
	require.Equal(t, "SAMSUNG MZQL23T8HCLS-00A07", res.Device.Model)
	require.Equal(t, "S64GNE0R801234", res.Device.Serial)
	require.Equal(t, "eui.0025384581b0a1c2", res.Device.WWN)
	require.EqualValues(t, 7501476528, res.NVMe.Namespace.SizeBlocks)
	require.Equal(t, 4, res.Method.Parameters["sanact"])
	require.Equal(t, "crypto-erase", res.Method.Parameters["action"])
	require.Equal(t, []Tool{{Name: "nvme", Version: "nvme version 2.3 (git 2.3)"}}, res.Tools)
	require.Equal(t, tools.NVMeSanitizeLog{Status: 1, GlobalErased: true, Progress: 65535}, res.PostState["sanitizeLog"])
	require.Equal(t, "changed", res.Readback.Expect)
	require.True(t, res.Readback.Passed, res.Readback.Summary)
	require.Contains(t, res.Method.Commands, "nvme sanitize "+dev+" --sanact=4")
}

// A drive that reports a successful sanitize but still holds its data is
// caught by the readback: the record never claims an erase it cannot show.
func TestWipe_NVMeSanitizeThatErasedNothingFailsTheReadback(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	fill(t, dev)
	r := nvmeRunner(t, dev, "nvme-id-ctrl-pm9a3.json", nil)
	res, err := Run(context.Background(), Deps{Runner: r, SanitizePoll: time.Millisecond}, Request{Device: dev, Mode: ModeNVMeSanitize})
	wipeErr(t, err, ReasonReadbackFaled)
	require.False(t, res.Erased)
	require.False(t, res.Readback.Passed)
}

// Format NVM uses SES=2 (crypto) only where FNA bit 2 says so; a drive
// without it gets SES=1, and a drive without sanitize support is refused
// sanitize with what to use instead.
func TestWipe_NVMeFormatPicksTheSecureEraseSettingFromFNA(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	for _, tc := range []struct {
		ctrl string
		ses  int
	}{{"nvme-id-ctrl-pm9a3.json", 2}, {"nvme-id-ctrl-nocrypto.json", 1}} {
		fill(t, dev)
		r := nvmeRunner(t, dev, tc.ctrl, nil)
		r.OnDo("nvme format "+dev+" --ses="+string(rune('0'+tc.ses))+" --force", tools.Output{Stdout: []byte("Success formatting namespace:1\n")}, scramble(t, dev))
		res, err := Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeNVMeFormat})
		require.NoError(t, err, tc.ctrl)
		require.Equal(t, tc.ses, res.Method.Parameters["ses"])
		require.Equal(t, tc.ses == 2, res.Method.Parameters["cryptoErase"])
		require.True(t, res.Readback.Passed)
	}
	r := nvmeRunner(t, dev, "nvme-id-ctrl-nocrypto.json", nil)
	_, err := Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeNVMeSanitize})
	require.Contains(t, wipeErr(t, err, ReasonUnsupported).Error(), "use nvme-format or overwrite")
}

func TestWipe_NVMeSanitizeThatFailsIsUnconfirmed(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	r := tools.NewRecorded().
		OnFile("nvme --version", testTools+"nvme-version.txt").
		OnFile("nvme id-ctrl -o json "+dev, testTools+"nvme-id-ctrl-pm9a3.json").
		OnFile("nvme id-ns -o json "+dev, testTools+"nvme-id-ns-pm9a3.json").
		OnFile("nvme sanitize-log -o json "+dev, testTools+"nvme-sanitize-log-idle.json").
		OnFile("nvme sanitize-log -o json "+dev, testTools+"nvme-sanitize-log-failed-v1.json").
		On("nvme sanitize "+dev+" --sanact=4", tools.Output{})
	res, err := Run(context.Background(), Deps{Runner: r, SanitizePoll: time.Millisecond}, Request{Device: dev, Mode: ModeNVMeSanitize})
	require.Contains(t, wipeErr(t, err, ReasonUnconfirmed).Error(), "status 3")
	require.False(t, res.Erased)
}

func ataRunner(dev string, states ...string) *tools.Recorded {
	r := tools.NewRecorded().OnFile("hdparm --version", testTools+"hdparm-version.txt")
	for _, s := range states {
		r.OnFile("hdparm -I "+dev, testTools+"hdparm-I-"+s+".txt")
	}
	return r
}

// "ATA secure erase (frozen/locked rules)": a frozen drive is refused with
// what to do; a ready one gets the password, the enhanced erase, and must
// say "not enabled" afterwards.
func TestWipe_ATASecureEraseStateMachine(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	fill(t, dev)

	_, err := Run(context.Background(), Deps{Runner: ataRunner(dev, "frozen")}, Request{Device: dev, Mode: ModeATASecureErase})
	require.Contains(t, wipeErr(t, err, ReasonFrozen).Error(), "suspend and resume")

	r := ataRunner(dev, "ready", "enabled", "ready").
		On("hdparm --user-master u --security-set-pass NULL "+dev, tools.Output{Stdout: []byte("security_password: \"NULL\"\n")})
	r.OnDo("hdparm --user-master u --security-erase-enhanced NULL "+dev, tools.Output{}, scramble(t, dev))
	res, err := Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeATASecureErase})
	require.NoError(t, err)
	require.Equal(t, "Samsung SSD 860 EVO 500GB", res.Device.Model)
	require.Equal(t, "S3Z2NB0K812345A", res.Device.Serial)
	require.Equal(t, "naa.5002538e40a1b2c3", res.Device.WWN)
	require.Equal(t, "security-erase-enhanced", res.Method.Parameters["erase"])
	require.False(t, res.PostState["ataSecurity"].(tools.ATASecurity).Enabled)
	require.Equal(t, []Tool{{Name: "hdparm", Version: "hdparm v9.65"}}, res.Tools)

	// Locked by an interrupted erase: unlocked with the erase's password;
	// still locked afterwards means another password, refused.
	r = ataRunner(dev, "locked", "locked").On("hdparm --user-master u --security-unlock NULL "+dev, tools.Output{})
	_, err = Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeATASecureErase})
	require.Contains(t, wipeErr(t, err, ReasonLocked).Error(), "holds another password")

	// An erase after which the drive still reports security enabled.
	r = ataRunner(dev, "enabled", "enabled")
	r.OnDo("hdparm --user-master u --security-erase-enhanced NULL "+dev, tools.Output{}, scramble(t, dev))
	_, err = Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeATASecureErase})
	require.Contains(t, wipeErr(t, err, ReasonUnconfirmed).Error(), "still reports security enabled")
}

// writeMBR writes a DOS partition table with one Linux partition from
// sector 2048 to the end, and has the kernel re-read it.
func writeMBR(t *testing.T, dev string) {
	t.Helper()
	mbr := make([]byte, 512)
	e := mbr[446:462]
	e[4] = 0x83
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], diskSize/512-2048)
	mbr[510], mbr[511] = 0x55, 0xaa
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(mbr, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0))
}

// SCSI/SAS drives through the sg_ tools (recorded sg3_utils output):
// a crypto erase SANITIZE, then no pending sense; a drive that refuses the
// crypto erase gets a block erase.
func TestWipe_SCSISanitizeThroughRecordedSgOutput(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	fill(t, dev)
	r := tools.NewRecorded().
		OnFile("sg_sanitize --version", testTools+"sg_sanitize-version.txt").
		OnFile("sg_inq "+dev, testTools+"sg_inq-st4000nm0025.txt").
		OnFile("sg_requests "+dev, testTools+"sg_requests-clean.txt")
	r.OnDo("sg_sanitize --quick --crypto "+dev, tools.Output{Stdout: mustRead(t, testTools+"sg_sanitize-crypto-done.txt")}, scramble(t, dev))
	res, err := Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeSCSISanitize})
	require.NoError(t, err)
	require.True(t, res.Erased)
	require.Equal(t, "SEAGATE ST4000NM0025", res.Device.Model)
	require.Equal(t, "ZC1234560000C7260ABC", res.Device.Serial)
	require.Equal(t, "crypto", res.Method.Parameters["action"])
	require.Equal(t, "No Sense", res.PostState["senseKey"])
	require.Equal(t, []Tool{{Name: "sg_sanitize", Version: "version: 1.55 20220126"}}, res.Tools)
	require.True(t, res.Readback.Passed)

	fill(t, dev)
	r = tools.NewRecorded().
		OnFile("sg_sanitize --version", testTools+"sg_sanitize-version.txt").
		OnFile("sg_inq "+dev, testTools+"sg_inq-st4000nm0025.txt").
		OnFile("sg_requests "+dev, testTools+"sg_requests-clean.txt").
		On("sg_sanitize --quick --crypto "+dev, tools.Output{ExitCode: 5, Stderr: mustRead(t, testTools+"sg_sanitize-crypto-illegal.txt")})
	r.OnDo("sg_sanitize --quick --block "+dev, tools.Output{Stdout: mustRead(t, testTools+"sg_sanitize-crypto-done.txt")}, scramble(t, dev))
	res, err = Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeSCSISanitize})
	require.NoError(t, err)
	require.Equal(t, "block", res.Method.Parameters["action"])

	r = tools.NewRecorded().
		OnFile("sg_sanitize --version", testTools+"sg_sanitize-version.txt").
		OnFile("sg_inq "+dev, testTools+"sg_inq-st4000nm0025.txt").
		On("sg_sanitize --quick --crypto "+dev, tools.Output{ExitCode: 5, Stderr: []byte("Illegal request")}).
		On("sg_sanitize --quick --block "+dev, tools.Output{ExitCode: 5, Stderr: []byte("Illegal request")})
	_, err = Run(context.Background(), Deps{Runner: r}, Request{Device: dev, Mode: ModeSCSISanitize})
	require.Contains(t, wipeErr(t, err, ReasonUnsupported).Error(), "use overwrite")
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
