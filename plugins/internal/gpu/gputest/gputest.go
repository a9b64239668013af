// Package gputest builds the fakes the GPU kinds' tests run against, the one
// library for all of them: fake tool executables (nvidia-smi, dcgmi) that
// answer scripted calls, record them and can hang until their process group
// is killed, a fake root with the kernel's /proc and /sys views of NVIDIA
// GPUs, and kmsg record files made from dmesg captures. Only tests import it.
package gputest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// SmiGPU is one GPU row of a fake nvidia-smi --query-gpu answer. Every
// field is the cell's text, so a test can write "[N/A]" anywhere; empty
// fields get healthy defaults.
type SmiGPU struct {
	Index, UUID, BusID, Name, Driver, Persistence    string
	MIG, MIGPending, ECC, ECCPending, ECCVol, ECCAgg string
	GenCurrent, GenMax, WidthCurrent, WidthMax       string
	RemapCorr, RemapUnc, RemapPending, RemapFailure  string
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Row renders the row in smi.QueryGPUFields order.
func (g SmiGPU) Row() string {
	return strings.Join([]string{
		g.Index, g.UUID, g.BusID, or(g.Name, "NVIDIA H100 80GB HBM3"), or(g.Driver, "550.54.15"),
		or(g.Persistence, "Enabled"), or(g.MIG, "Disabled"), or(g.MIGPending, or(g.MIG, "Disabled")),
		or(g.ECC, "Enabled"), or(g.ECCPending, or(g.ECC, "Enabled")), or(g.ECCVol, "0"), or(g.ECCAgg, "0"),
		or(g.GenCurrent, "5"), or(g.GenMax, "5"), or(g.WidthCurrent, "16"), or(g.WidthMax, "16"),
	}, ", ")
}

// RemapRow renders the row in smi.QueryRemappedRowsFields order.
func (g SmiGPU) RemapRow() string {
	return strings.Join([]string{g.UUID, or(g.RemapCorr, "0"), or(g.RemapUnc, "0"), or(g.RemapPending, "No"), or(g.RemapFailure, "No")}, ", ")
}

// HealthyGPUs returns n healthy rows at bus ids 0000:18:00, 0000:28:00, ...
func HealthyGPUs(n int) []SmiGPU {
	out := make([]SmiGPU, n)
	for i := range out {
		out[i] = SmiGPU{Index: strconv.Itoa(i), UUID: UUID(i), BusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10)}
	}
	return out
}

// UUID is the test UUID of GPU i.
func UUID(i int) string { return fmt.Sprintf("GPU-%08x-1111-2222-3333-%012x", i, i) }

// BusID is the normalised bus id HealthyGPUs gives GPU i.
func BusID(i int) string { return fmt.Sprintf("0000:%02x:00", 0x18+i*0x10) }

// Smi is a fake nvidia-smi for the inventory: a FakeTool that answers every
// --query-gpu and every --query-remapped-rows call, whatever fields it
// names. Script other calls on its FakeTool.
type Smi struct {
	*FakeTool
}

// SmiAnswer scripts the fake's answers.
type SmiAnswer struct {
	// GPUOut and GPUExit answer --query-gpu.
	GPUOut  string
	GPUExit int
	// RemapOut and RemapExit answer --query-remapped-rows.
	RemapOut  string
	RemapExit int
	// Hang makes every query start a child and wait forever, so only a
	// kill of the whole process group ends it (see HangChild).
	Hang bool
}

// The patterns a Smi answers.
const (
	queryGPUPattern   = "*--query-gpu=*"
	queryRemapPattern = "*--query-remapped-rows=*"
)

// NewSmi writes a fake nvidia-smi answering a. Write fakes before starting
// parallel work: exec of a file just written can fail with ETXTBSY while
// another goroutine forks.
func NewSmi(t testing.TB, a SmiAnswer) *Smi {
	t.Helper()
	s := &Smi{FakeTool: NewFakeTool(t, "nvidia-smi")}
	s.Set(a)
	return s
}

// Set changes the answers.
func (s *Smi) Set(a SmiAnswer) {
	s.t.Helper()
	s.OnMatching(queryGPUPattern, a.GPUOut, a.GPUExit)
	s.OnMatching(queryRemapPattern, a.RemapOut, a.RemapExit)
	if a.Hang {
		s.HangMatching(queryGPUPattern)
		s.HangMatching(queryRemapPattern)
	}
}

// Answer renders healthy-style answers for gpus.
func Answer(gpus []SmiGPU) SmiAnswer {
	var g, r strings.Builder
	for _, x := range gpus {
		g.WriteString(x.Row() + "\n")
		r.WriteString(x.RemapRow() + "\n")
	}
	return SmiAnswer{GPUOut: g.String(), RemapOut: r.String()}
}

func write(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// Root is a fake root with proc/ and sys/.
type Root struct {
	t testing.TB
	// Dir is the root directory.
	Dir string
}

// NewRoot makes a fake root with a boot id.
func NewRoot(t testing.TB, bootID string) *Root {
	t.Helper()
	r := &Root{t: t, Dir: t.TempDir()}
	r.SetBootID(bootID)
	write(t, filepath.Join(r.Dir, "sys", "bus", "pci", "rescan"), "", 0o644)
	return r
}

// SetBootID writes proc/sys/kernel/random/boot_id.
func (r *Root) SetBootID(id string) {
	write(r.t, filepath.Join(r.Dir, "proc", "sys", "kernel", "random", "boot_id"), id+"\n", 0o644)
}

// KernelGPU is a GPU as the kernel sees it.
type KernelGPU struct {
	// Address is sysfs's "0000:18:00.0".
	Address string
	Model   string
	UUID    string
	// WidthCurrent and WidthMax are the sysfs link widths (0: no file).
	WidthCurrent, WidthMax int
	// NoProc leaves the GPU out of /proc/driver/nvidia/gpus (driver not loaded).
	NoProc bool
	// Class defaults to 0x030200 (3D controller).
	Class string
}

// AddGPU adds a GPU to sys/bus/pci/devices and proc/driver/nvidia/gpus.
func (r *Root) AddGPU(g KernelGPU) {
	dev := filepath.Join(r.Dir, "sys", "bus", "pci", "devices", g.Address)
	write(r.t, filepath.Join(dev, "vendor"), "0x10de\n", 0o644)
	write(r.t, filepath.Join(dev, "class"), or(g.Class, "0x030200")+"\n", 0o644)
	write(r.t, filepath.Join(dev, "device"), "0x2330\n", 0o644)
	if g.WidthMax > 0 {
		write(r.t, filepath.Join(dev, "current_link_width"), strconv.Itoa(g.WidthCurrent)+"\n", 0o644)
		write(r.t, filepath.Join(dev, "max_link_width"), strconv.Itoa(g.WidthMax)+"\n", 0o644)
		write(r.t, filepath.Join(dev, "current_link_speed"), "32.0 GT/s PCIe\n", 0o644)
		write(r.t, filepath.Join(dev, "max_link_speed"), "32.0 GT/s PCIe\n", 0o644)
	}
	if g.NoProc {
		return
	}
	info := fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t 123\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t 0\nGPU Excluded:\t No\n", g.Model, g.UUID, g.Address)
	write(r.t, filepath.Join(r.Dir, "proc", "driver", "nvidia", "gpus", g.Address, "information"), info, 0o644)
}

// AddPCIDevice adds a non-GPU NVIDIA function (an NVSwitch: class 0x068000).
func (r *Root) AddPCIDevice(address, class string) {
	dev := filepath.Join(r.Dir, "sys", "bus", "pci", "devices", address)
	write(r.t, filepath.Join(dev, "vendor"), "0x10de\n", 0o644)
	write(r.t, filepath.Join(dev, "class"), class+"\n", 0o644)
}

// SetDriverVersion writes proc/driver/nvidia/version.
func (r *Root) SetDriverVersion(v string) {
	write(r.t, filepath.Join(r.Dir, "proc", "driver", "nvidia", "version"),
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+v+"  Tue Apr  2 15:46:31 UTC 2024\nGCC version:  gcc version 12.2.0\n", 0o644)
}

// AddHealthyGPUs adds the kernel's view of HealthyGPUs(n).
func (r *Root) AddHealthyGPUs(n int) {
	for i := 0; i < n; i++ {
		r.AddGPU(KernelGPU{Address: BusID(i) + ".0", Model: "NVIDIA H100 80GB HBM3", UUID: UUID(i), WidthCurrent: 16, WidthMax: 16})
	}
}

var dmesgPrefix = regexp.MustCompile(`^(?:\[[^\]]*\]\s?|kern\s*:\s*\w+\s*:\s*|\d{4}-\d\d-\d\dT[0-9:,.]+[+-]\d\d:?\d\d\s)+`)

// KmsgFromDmesg turns dmesg text (any of the capture formats: "[secs]",
// --ctime, --time-format=iso, --decode) into /dev/kmsg records numbered
// from firstSeq, one microsecond apart. A line indented past its prefix
// continues the previous message, as a multi-line printk does; kmsg escapes
// the newline as \x0a.
func KmsgFromDmesg(text string, firstSeq uint64) string {
	var msgs []string
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		body := dmesgPrefix.ReplaceAllString(line, "")
		if body == "" {
			continue
		}
		if (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")) && len(msgs) > 0 {
			msgs[len(msgs)-1] += `\x0a` + strings.TrimSpace(body)
			continue
		}
		msgs = append(msgs, body)
	}
	return KmsgRecords(msgs, firstSeq)
}

// KmsgRecords renders messages as kmsg records numbered from firstSeq.
func KmsgRecords(msgs []string, firstSeq uint64) string {
	var b strings.Builder
	for i, m := range msgs {
		seq := firstSeq + uint64(i)
		fmt.Fprintf(&b, "4,%d,%d,-;%s\n", seq, 1000000+seq, m)
	}
	return b.String()
}

// WriteKmsg writes records to a file and returns its path.
func WriteKmsg(t testing.TB, dir, records string) string {
	t.Helper()
	p := filepath.Join(dir, "kmsg")
	write(t, p, records, 0o644)
	return p
}
