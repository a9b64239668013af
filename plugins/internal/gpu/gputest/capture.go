package gputest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// gpuSection opens one GPU's section of `nvidia-smi -q`: "GPU 00000000:83:00.0".
var gpuSection = regexp.MustCompile(`^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$`)

// FromQ reads an `nvidia-smi -q` capture into the rows a fake nvidia-smi
// answers --query-gpu and --query-remapped-rows with, so that a test runs the
// real code against what a real GPU reported: both query modes read the same
// NVML fields as -q. A field the capture gives as N/A becomes "[N/A]", as the
// CSV modes print it. It fails on a capture without a GPU section.
func FromQ(text string) ([]SmiGPU, error) {
	var (
		gpus   []map[string]string
		buses  []string
		top    = map[string]string{}
		fields map[string]string
		stack  []string
	)
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		depth := (len(line) - len(strings.TrimLeft(line, " "))) / 4
		if depth == 0 {
			if m := gpuSection.FindStringSubmatch(trimmed); m != nil {
				fields, stack = map[string]string{}, nil
				gpus, buses = append(gpus, fields), append(buses, m[1])
			} else if k, v, ok := strings.Cut(trimmed, ":"); ok {
				top[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
			continue
		}
		if fields == nil {
			continue
		}
		if len(stack) > depth-1 {
			stack = stack[:depth-1]
		}
		k, v, leaf := strings.Cut(trimmed, ":")
		k = strings.TrimSpace(k)
		if !leaf {
			stack = append(stack, k)
			continue
		}
		fields[strings.Join(append(append([]string(nil), stack...), k), "/")] = strings.TrimSpace(v)
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("no GPU section in the capture")
	}
	out := make([]SmiGPU, len(gpus))
	for i, f := range gpus {
		cell := func(path string) string { return csvCell(f[path]) }
		g := SmiGPU{
			Index: strconv.Itoa(i), UUID: f["GPU UUID"], BusID: buses[i],
			Name: cell("Product Name"), Driver: csvCell(top["Driver Version"]),
			Persistence: cell("Persistence Mode"),
			MIG:         cell("MIG Mode/Current"), MIGPending: cell("MIG Mode/Pending"),
			ECC: cell("ECC Mode/Current"), ECCPending: cell("ECC Mode/Pending"),
			ECCVol: uncorrectable(f, "ECC Errors/Volatile/"), ECCAgg: uncorrectable(f, "ECC Errors/Aggregate/"),
			GenCurrent: cell("PCI/GPU Link Info/PCIe Generation/Current"), GenMax: cell("PCI/GPU Link Info/PCIe Generation/Max"),
			WidthCurrent: strings.TrimSuffix(cell("PCI/GPU Link Info/Link Width/Current"), "x"),
			WidthMax:     strings.TrimSuffix(cell("PCI/GPU Link Info/Link Width/Max"), "x"),
		}
		if rr, ok := f["Remapped Rows"]; ok {
			// "Remapped Rows : N/A": no counters at all.
			na := csvCell(rr)
			g.RemapCorr, g.RemapUnc, g.RemapPending, g.RemapFailure = na, na, na, na
		} else {
			g.RemapCorr, g.RemapUnc = cell("Remapped Rows/Correctable Error"), cell("Remapped Rows/Uncorrectable Error")
			g.RemapPending, g.RemapFailure = cell("Remapped Rows/Pending"), cell("Remapped Rows/Remapping Failure Occurred")
		}
		out[i] = g
	}
	return out, nil
}

// csvCell writes a -q value as the CSV modes do: N/A in brackets.
func csvCell(v string) string {
	if v == "N/A" || v == "" {
		return "[N/A]"
	}
	return v
}

// uncorrectable sums the uncorrectable ECC counters under prefix, as
// ecc.errors.uncorrected.*.total does; "[N/A]" when the capture has none.
func uncorrectable(f map[string]string, prefix string) string {
	total, seen := 0, false
	for k, v := range f {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || strings.Contains(rest, "/") || !strings.Contains(rest, "Uncorrectable") {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil {
			total, seen = total+n, true
		}
	}
	if !seen {
		return "[N/A]"
	}
	return strconv.Itoa(total)
}
