// Package sysview reads the kernel's view of the NVIDIA GPUs under a root
// directory ("/" in production, a fake tree in tests): the driver's
// /proc/driver/nvidia/gpus/*/information, the PCI devices of vendor 0x10de in
// /sys/bus/pci/devices with their link widths and bound driver, and the boot
// id. The kernel naming a GPU proves the hardware and the kernel module are
// there; it does not prove that the management interface answers.
package sysview

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// NVIDIAVendor is NVIDIA's PCI vendor id.
const NVIDIAVendor = "0x10de"

// View reads under Root.
type View struct {
	// Root is the directory holding proc/ and sys/; "/" when empty.
	Root string
}

func (v View) path(parts ...string) string {
	root := v.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

// BootID returns the kernel's boot id.
func (v View) BootID() (string, error) {
	b, err := os.ReadFile(v.path("proc", "sys", "kernel", "random", "boot_id"))
	if err != nil {
		return "", fmt.Errorf("reading boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("reading boot id: empty")
	}
	return id, nil
}

// DriverVersion returns the kernel module's version from
// /proc/driver/nvidia/version, or "".
func (v View) DriverVersion() string {
	b, err := os.ReadFile(v.path("proc", "driver", "nvidia", "version"))
	if err != nil {
		return ""
	}
	if m := driverVersionPattern.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

var driverVersionPattern = regexp.MustCompile(`Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)`)

// PCIDevice is one NVIDIA display-class PCI function in sysfs.
type PCIDevice struct {
	// Address is sysfs's name, "0000:3b:00.0".
	Address string
	// BusID is its normalised bus id.
	BusID string
	// Class is the PCI class ("0x030200").
	Class string
	// DeviceID is the PCI device id ("0x2330").
	DeviceID string
	// Driver is the bound driver ("nvidia", "vfio-pci"), "" when unbound.
	Driver string
	// WidthCurrent and WidthMax are current_link_width and max_link_width.
	WidthCurrent, WidthMax int
	// SpeedCurrent and SpeedMax are current_link_speed and max_link_speed.
	SpeedCurrent, SpeedMax string
}

// PCIDevices lists the NVIDIA GPUs on the PCI bus: vendor 0x10de and class
// 0x03 (display: VGA 0x0300 or 3D 0x0302). NVSwitches (0x0680) and the
// GPUs' audio functions (0x0403) are left out.
func (v View) PCIDevices() ([]PCIDevice, error) {
	dir := v.path("sys", "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	var out []PCIDevice
	for _, e := range entries {
		d := filepath.Join(dir, e.Name())
		if readTrim(filepath.Join(d, "vendor")) != NVIDIAVendor {
			continue
		}
		class := readTrim(filepath.Join(d, "class"))
		if !strings.HasPrefix(class, "0x03") {
			continue
		}
		bus := gpu.NormalizeBusID(e.Name())
		if bus == "" {
			continue
		}
		pd := PCIDevice{Address: e.Name(), BusID: bus, Class: class, DeviceID: readTrim(filepath.Join(d, "device"))}
		if link, err := os.Readlink(filepath.Join(d, "driver")); err == nil {
			pd.Driver = filepath.Base(link)
		}
		pd.WidthCurrent = readInt(filepath.Join(d, "current_link_width"))
		pd.WidthMax = readInt(filepath.Join(d, "max_link_width"))
		pd.SpeedCurrent = readTrim(filepath.Join(d, "current_link_speed"))
		pd.SpeedMax = readTrim(filepath.Join(d, "max_link_speed"))
		out = append(out, pd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BusID < out[j].BusID })
	return out, nil
}

// DriverGPU is one GPU in /proc/driver/nvidia/gpus.
type DriverGPU struct {
	BusID string
	Model string
	UUID  string
	Minor int
}

// DriverGPUs lists the GPUs the kernel module registered.
func (v View) DriverGPUs() ([]DriverGPU, error) {
	dir := v.path("proc", "driver", "nvidia", "gpus")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var out []DriverGPU
	for _, e := range entries {
		bus := gpu.NormalizeBusID(e.Name())
		if bus == "" {
			continue
		}
		g := DriverGPU{BusID: bus, Minor: -1}
		f, err := os.Open(filepath.Join(dir, e.Name(), "information"))
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				k, val, ok := strings.Cut(sc.Text(), ":")
				if !ok {
					continue
				}
				val = strings.TrimSpace(val)
				switch strings.TrimSpace(k) {
				case "Model":
					g.Model = val
				case "GPU UUID":
					if strings.HasPrefix(val, "GPU-") {
						g.UUID = val
					}
				case "Device Minor":
					if n, err := strconv.Atoi(val); err == nil {
						g.Minor = n
					}
				case "Bus Location":
					if b := gpu.NormalizeBusID(val); b != "" {
						g.BusID = b
					}
				}
			}
			f.Close()
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BusID < out[j].BusID })
	return out, nil
}

// GPUs merges the driver's list and the PCI bus into partial inventory
// entries, with the sysfs link widths. The status answers when either names
// a GPU.
func (v View) GPUs() ([]gpu.GPU, gpu.SourceStatus) {
	var st gpu.SourceStatus
	drv, derr := v.DriverGPUs()
	pci, perr := v.PCIDevices()
	byBus := map[string]*gpu.GPU{}
	var order []string
	get := func(bus string) *gpu.GPU {
		if g, ok := byBus[bus]; ok {
			return g
		}
		g := &gpu.GPU{BusID: bus, Index: -1}
		g.Seen(gpu.SourceKernel)
		byBus[bus] = g
		order = append(order, bus)
		return g
	}
	for _, d := range drv {
		g := get(d.BusID)
		g.Name, g.UUID = d.Model, d.UUID
	}
	for _, p := range pci {
		g := get(p.BusID)
		if p.WidthCurrent > 0 || p.WidthMax > 0 {
			g.PCIe = &gpu.PCIe{SysfsWidthCurrent: p.WidthCurrent, SysfsWidthMax: p.WidthMax, SpeedCurrent: p.SpeedCurrent, SpeedMax: p.SpeedMax}
		}
	}
	sort.Strings(order)
	out := make([]gpu.GPU, 0, len(order))
	for i, bus := range order {
		g := byBus[bus]
		// The kernel has no NVML index; bus order is what NVML uses by
		// default (CUDA_DEVICE_ORDER aside), so it is the best guess.
		g.Index = i
		out = append(out, *g)
	}
	st.GPUs = len(out)
	st.Answered = len(out) > 0
	if !st.Answered {
		switch {
		case derr != nil:
			st.Reason = derr.Error()
		case perr != nil:
			st.Reason = perr.Error()
		default:
			st.Reason = "no NVIDIA GPU in /proc/driver/nvidia/gpus or among the PCI devices"
		}
	}
	return out, st
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(p string) int {
	n, err := strconv.Atoi(readTrim(p))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
