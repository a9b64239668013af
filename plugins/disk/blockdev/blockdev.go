// Package blockdev inspects a block device before disk.wipe or deploy touches
// it: who the device is (model, serial, WWN/EUI-64, size, from sysfs), and
// whether it is safe to write (not read-only, not mounted, not held by a
// RAID array, device-mapper or a partition's user, not open exclusively by
// anyone else). The checks read the kernel's own view (sysfs and
// /proc/self/mountinfo) and end with the kernel's own lock: an O_EXCL open
// of a block device fails with EBUSY while anything else has it mounted or
// claimed, so a race between the check and the write cannot slip through
// while the returned handle is held.
package blockdev

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrRefused is wrapped by every refusal: the device is not safe to write.
var ErrRefused = errors.New("device refused")

// Identity is who a device is, as the kernel reports it.
type Identity struct {
	// Path is the device node that was asked for (/dev/nvme0n1).
	Path string `json:"path"`
	// Name is the kernel's name (nvme0n1, sda, loop3).
	Name   string `json:"name"`
	Model  string `json:"model,omitempty"`
	Serial string `json:"serial,omitempty"`
	// WWN is the World Wide Name (ATA/SCSI) or, for NVMe, the namespace's
	// EUI-64 or NGUID as sysfs's wwid gives it.
	WWN string `json:"wwn,omitempty"`
	// SizeBytes is the device's size.
	SizeBytes int64 `json:"sizeBytes"`
	// LogicalBlockSize is the logical sector size in bytes.
	LogicalBlockSize int `json:"logicalBlockSize"`
	// Transport is nvme, ata/scsi (sd*), loop, or other.
	Transport string `json:"transport"`
	// Major and Minor are the device numbers.
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Sys is where the kernel's views are read from: the real /sys and
// /proc/self/mountinfo in production; a test never needs another, since it
// works on a real loop device.
type Sys struct {
	SysRoot   string
	MountInfo string
}

// Default reads the running kernel.
var Default = Sys{SysRoot: "/sys", MountInfo: "/proc/self/mountinfo"}

// Identify resolves path to its block device and reads its identity.
func (s Sys) Identify(path string) (Identity, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Identity{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Identity{}, fmt.Errorf("%w: %s is not a block device", ErrRefused, path)
	}
	maj, min := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
	link, err := os.Readlink(filepath.Join(s.SysRoot, "dev", "block", fmt.Sprintf("%d:%d", maj, min)))
	if err != nil {
		return Identity{}, fmt.Errorf("sysfs entry of %s (%d:%d): %w", path, maj, min, err)
	}
	name := filepath.Base(link)
	dir := s.dir(name)
	id := Identity{Path: path, Name: name, Major: maj, Minor: min}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		return id, fmt.Errorf("%w: %s is a partition (%s); name the whole disk", ErrRefused, path, name)
	}
	sectors, err := readInt(filepath.Join(dir, "size"))
	if err != nil {
		return id, err
	}
	id.SizeBytes = sectors * 512 // sysfs counts 512-byte sectors whatever the block size
	if lbs, err := readInt(filepath.Join(dir, "queue", "logical_block_size")); err == nil {
		id.LogicalBlockSize = int(lbs)
	}
	id.Model = readTrim(filepath.Join(dir, "device", "model"))
	id.Serial = readTrim(filepath.Join(dir, "device", "serial"))
	if id.Serial == "" {
		id.Serial = readTrim(filepath.Join(dir, "serial"))
	}
	id.WWN = readTrim(filepath.Join(dir, "wwid"))
	if id.WWN == "" {
		id.WWN = readTrim(filepath.Join(dir, "device", "wwid"))
	}
	switch {
	case strings.HasPrefix(name, "nvme"):
		id.Transport = "nvme"
	case strings.HasPrefix(name, "sd"):
		id.Transport = "ata/scsi"
	case strings.HasPrefix(name, "loop"):
		id.Transport = "loop"
	default:
		id.Transport = "other"
	}
	return id, nil
}

// Check refuses a device that is read-only, mounted (itself or a
// partition), held by another block device (a RAID array, device-mapper,
// bcache: sysfs holders), or a RAID member by its superblock. Each refusal
// wraps ErrRefused and says what holds the device.
func (s Sys) Check(id Identity) error {
	dir := s.dir(id.Name)
	if ro, _ := readInt(filepath.Join(dir, "ro")); ro != 0 {
		return fmt.Errorf("%w: %s is read-only (sysfs ro=1)", ErrRefused, id.Path)
	}
	names := []string{id.Name}
	parts, _ := filepath.Glob(filepath.Join(dir, id.Name+"*", "partition"))
	for _, p := range parts {
		names = append(names, filepath.Base(filepath.Dir(p)))
	}
	for _, n := range names {
		holders, _ := os.ReadDir(filepath.Join(s.dir(n), "holders"))
		if len(holders) > 0 {
			var hs []string
			for _, h := range holders {
				hs = append(hs, h.Name())
			}
			what := "in use by"
			if strings.HasPrefix(hs[0], "md") {
				what = "a RAID member of"
			}
			return fmt.Errorf("%w: %s is %s %s (sysfs holders of %s); stop that first", ErrRefused, id.Path, what, strings.Join(hs, ", "), n)
		}
	}
	mounted, err := s.mounted(names, id)
	if err != nil {
		return err
	}
	if mounted != "" {
		return fmt.Errorf("%w: %s is mounted: %s; unmount it first", ErrRefused, id.Path, mounted)
	}
	return nil
}

// mounted returns the first mount of the device or one of its partitions,
// as "<source> on <mount point>", or "".
func (s Sys) mounted(names []string, id Identity) (string, error) {
	devs := map[string]bool{}
	for _, n := range names {
		if v := readTrim(filepath.Join(s.dir(n), "dev")); v != "" {
			devs[v] = true
		}
	}
	devs[fmt.Sprintf("%d:%d", id.Major, id.Minor)] = true
	f, err := os.Open(s.MountInfo)
	if err != nil {
		return "", fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if devs[fields[2]] {
			src := ""
			for i, f := range fields {
				if f == "-" && i+2 < len(fields) {
					src = fields[i+2]
				}
			}
			return src + " on " + fields[4], nil
		}
	}
	return "", sc.Err()
}

// OpenExclusive opens the device read-write with O_EXCL, which the kernel
// refuses (EBUSY) while the device or a partition of it is mounted, swapped
// on, or claimed by md, dm or another exclusive opener. Hold the file for
// the whole write: nothing else can claim the device meanwhile.
func OpenExclusive(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EBUSY) {
		return nil, fmt.Errorf("%w: %s is in use (the kernel refused an exclusive open: mounted, swap, or claimed by RAID/dm)", ErrRefused, path)
	}
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) {
		return nil, fmt.Errorf("%w: %s cannot be opened for writing: %w", ErrRefused, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return f, nil
}

// Size reads the device's size in bytes from the open handle: a block
// device's end is its size.
func Size(f *os.File) (int64, error) {
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", f.Name(), err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("rewinding %s: %w", f.Name(), err)
	}
	return n, nil
}

// RereadPartitions asks the kernel to re-read the partition table
// (BLKRRPART). A device without partition scanning (a loop device set up
// without -P) answers EINVAL, which is reported as such.
func RereadPartitions(f *os.File) error {
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err != nil {
		return fmt.Errorf("BLKRRPART %s: %w", f.Name(), err)
	}
	return nil
}

func (s Sys) dir(name string) string { return filepath.Join(s.SysRoot, "class", "block", name) }

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(path string) (int64, error) {
	v := readTrim(path)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %q is not a number", path, v)
	}
	return n, nil
}

// DropCache writes back and drops the kernel's cached pages of the device
// (BLKFLSBUF), so that a readback reads the medium, not the page cache
// that still holds what was there before a drive erased itself.
func DropCache(f *os.File) error {
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
		return fmt.Errorf("BLKFLSBUF %s: %w", f.Name(), err)
	}
	return nil
}
