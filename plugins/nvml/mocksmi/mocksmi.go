// Package mocksmi is a mock nvidia-smi over the nvml plugin's mock GPUs
// (nvmldriver's mock sources), for the demo and the tests: a real
// executable (internal/tools/mocknvidiasmi) that the GPU kinds run where
// they run nvidia-smi (BCD_NVIDIA_SMI), through the same code
// (plugins/internal/gpu/smi), and that answers the queries and actions
// they use with nvidia-smi's CSV, messages and exit codes.
//
// It reads the mock source from the environment bcd gives every plugin and
// a plugin passes on to the tools it runs: BCD_NVML (mock:dgxh200, ...),
// BCD_NVML_FAULTS and BCD_NVML_MOCK_STATE, the file that keeps the mock
// GPUs between runs (nvmldriver.MockFile). Its actions (-pm, --gpu-reset)
// change that file, and need it: a reset clears the GPU's pending row remap
// and volatile ECC errors there, and the nvml plugin's next inventory reads
// them cleared. Without the file an action fails rather than claim a
// change it could not keep.
package mocksmi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/nvml"
	"github.com/better-compute/commands/plugins/nvml/nvmldriver"
)

// Exit codes, as nvidia-smi(1) documents them (plugins/internal/gpu/smi
// reads them).
const (
	exitInvalidArgument = 2
	exitNotFound        = 6
	exitOther           = 255
)

// Main runs one command line and returns the exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	inv, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "mock nvidia-smi: %v. Please run 'nvidia-smi -h' for help.\n", err)
		return exitInvalidArgument
	}
	source := strings.TrimSpace(getenv(nvml.EnvNVML))
	model, ok := strings.CutPrefix(source, "mock:")
	if !ok {
		fmt.Fprintf(stderr, "mock nvidia-smi: %s is %q, not a mock source such as mock:dgxh200: it answers for mock GPUs only\n", nvml.EnvNVML, source)
		return exitOther
	}
	state := strings.TrimSpace(getenv(nvml.EnvNVMLMockState))
	if inv.Action != "" && state == "" {
		fmt.Fprintf(stderr, "mock nvidia-smi: %s needs %s, the file that keeps the mock GPUs between runs: without it the change would be lost\n", strings.Join(args, " "), nvml.EnvNVMLMockState)
		return exitOther
	}
	d, err := nvmldriver.OpenState(source, getenv(nvml.EnvNVMLFaults), state)
	if err != nil {
		fmt.Fprintf(stderr, "mock nvidia-smi: %v\n", err)
		return exitOther
	}
	defer d.Close()
	gpus, st, _ := d.Snapshot(ctx)
	if !st.Answered {
		fmt.Fprintf(stderr, "mock nvidia-smi: the mock NVML source did not answer: %s\n", st.Reason)
		return exitOther
	}
	m := mock{srv: d.MockServer(), gpus: gpus}
	targets := gpus
	if inv.Target != "" {
		g, ok := m.find(inv.Target)
		if !ok {
			fmt.Fprintln(stdout, "No devices were found")
			return exitNotFound
		}
		targets = []gpu.GPU{g}
	}
	if inv.Query != "" {
		return m.query(inv, targets, stdout, stderr)
	}
	file := nvmldriver.MockFile{Path: state, Model: model}
	return m.act(inv, file, targets[0], stdout, stderr)
}

// mock is the GPUs of one run.
type mock struct {
	srv  *server.Server
	gpus []gpu.GPU
}

// busID is the GPU's PCI bus id as nvidia-smi prints it (00000000:48:00.0).
func (m mock) busID(g gpu.GPU) string {
	dev := m.srv.Devices[g.Index].(*server.Device)
	dev.RLock()
	defer dev.RUnlock()
	return dev.PciBusID
}

// find resolves -i: an index, a UUID, or a PCI bus id in any of its forms.
func (m mock) find(target string) (gpu.GPU, bool) {
	for _, g := range m.gpus {
		switch {
		case strconv.Itoa(g.Index) == target, strings.EqualFold(g.UUID, target),
			gpu.NormalizeBusID(target) != "" && gpu.NormalizeBusID(target) == gpu.NormalizeBusID(m.busID(g)):
			return g, true
		}
	}
	return gpu.GPU{}, false
}

// query prints the CSV rows of a --query-*.
func (m mock) query(inv Invocation, targets []gpu.GPU, stdout, stderr io.Writer) int {
	table := map[string]map[string]func(gpu.GPU) string{QueryGPU: m.gpuFields(), QueryRemappedRows: m.remapFields(), QueryComputeApps: computeAppFields}[inv.Query]
	for _, f := range inv.Fields {
		if table[f] == nil {
			fmt.Fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", f)
			return exitInvalidArgument
		}
	}
	if inv.Header {
		fmt.Fprintln(stdout, strings.Join(inv.Fields, ", "))
	}
	if inv.Query == QueryComputeApps {
		// A mock GPU runs no process.
		return 0
	}
	for _, g := range targets {
		cells := make([]string, len(inv.Fields))
		for i, f := range inv.Fields {
			cells[i] = table[f](g)
		}
		fmt.Fprintln(stdout, strings.Join(cells, ", "))
	}
	return 0
}

// act runs -pm or --gpu-reset on g in the state file.
func (m mock) act(inv Invocation, file nvmldriver.MockFile, g gpu.GPU, stdout, stderr io.Writer) int {
	dev := m.srv.Devices[g.Index]
	bus := m.busID(g)
	var change func() error
	if inv.Action == ActionPersistence {
		change = func() error { return nvmldriver.SetMockPersistence(dev, inv.Persistence) }
	} else {
		change = func() error { return nvmldriver.ResetMock(dev) }
	}
	err := file.Update(m.srv, change)
	switch {
	case errors.Is(err, nvmldriver.ErrMockInUse):
		fmt.Fprintf(stdout, "The following GPUs could not be reset:\n  GPU %s: In use by another client\n", bus)
		return exitOther
	case err != nil:
		fmt.Fprintf(stderr, "mock nvidia-smi: %v\n", err)
		return exitOther
	case inv.Action == ActionPersistence:
		fmt.Fprintf(stdout, "%s persistence mode for GPU %s.\nAll done.\n", map[bool]string{true: "Enabled", false: "Disabled"}[inv.Persistence], bus)
	default:
		fmt.Fprintf(stdout, "GPU %s was successfully reset.\nAll done.\n", bus)
	}
	return 0
}
