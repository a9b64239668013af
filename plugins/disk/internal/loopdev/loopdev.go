// Package loopdev gives tests a real block device: a loop device over a
// file in the test's temp dir, detached at cleanup. It needs root and loop
// support; without them the test is skipped with a message saying which
// is missing (CI runs as root, so there they run).
package loopdev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Options shape the device.
type Options struct {
	// PartScan sets up the device with -P, so that the kernel scans its
	// partition table (BLKRRPART works).
	PartScan bool
	// ReadOnly sets it up with -r.
	ReadOnly bool
}

// New returns the path of a fresh loop device of size bytes (zeros).
func New(t testing.TB, size int64, o Options) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to set up a loop device (losetup); CI runs these as root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("needs losetup (util-linux) to set up a loop device")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("needs loop device support (/dev/loop-control): " + err.Error())
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	args := []string{"-f", "--show"}
	if o.PartScan {
		args = append(args, "-P")
	}
	if o.ReadOnly {
		args = append(args, "-r")
	}
	out, err := exec.Command("losetup", append(args, img)...).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device could be set up (losetup %s): %v: %s", strings.Join(args, " "), err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// Run runs a command the test needs (mkfs, mount) and fails the test with
// its output when it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
