package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/collect"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/sysview"
	"github.com/better-compute/commands/plugins/nvml/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// Plugin serves inventory.refresh and diag.nvml.
type Plugin struct {
	// Config is the plugin's settings.
	Config Config
	// NVML is the NVML source (nvmldriver in the binary); nil skips NVML.
	NVML collect.NVML
	// Logger logs; a null logger when nil.
	Logger hclog.Logger
}

// Kinds returns both kinds with their handlers, for kind.Serve.
func (p *Plugin) Kinds() []kind.Kind {
	return []kind.Kind{
		{Manifest: manifest.InventoryRefreshManifest, Handler: kind.HandlerFunc(p.InventoryRefresh)},
		{Manifest: manifest.DiagNVMLManifest, Handler: kind.HandlerFunc(p.DiagNVML)},
	}
}

// Collector builds the collector from the settings.
func (p *Plugin) Collector() *collect.Collector {
	c := &collect.Collector{
		Kernel:    sysview.View{Root: p.Config.SysRoot},
		NVML:      p.NVML,
		KmsgPath:  p.Config.KmsgPath,
		StorePath: p.Config.XIDStore,
		Ignore:    p.Config.Ignore,
		Logger:    p.logger(),
	}
	if p.Config.NvidiaSmi == MockSmi {
		if p.NVML != nil {
			c.SMI = NewMockSMI(p.NVML)
		}
	} else {
		c.SMI = smi.Tool{Path: p.Config.NvidiaSmi, Timeout: p.Config.ExecTimeout}
	}
	return c
}

func (p *Plugin) logger() hclog.Logger {
	if p.Logger == nil {
		return hclog.NewNullLogger()
	}
	return p.Logger
}

// RefreshPayload is inventory.refresh's payload.
type RefreshPayload struct {
	Sections []string `json:"sections,omitempty"`
	Rescan   bool     `json:"rescan,omitempty"`
}

// InventoryRefresh collects the inventory again, stores it in bcd through
// the host service, and returns it.
func (p *Plugin) InventoryRefresh(ctx context.Context, req kind.Request) (any, error) {
	var pl RefreshPayload
	if err := req.Command.Decode(&pl); err != nil {
		return nil, err
	}
	prev := p.previous(ctx, req)
	inv, err := p.collect(ctx, req, collect.Options{Sections: pl.Sections, Rescan: pl.Rescan, Previous: prev})
	if err != nil {
		return nil, err
	}
	if err := p.put(ctx, req, inv); err != nil {
		return inv, err
	}
	return inv, nil
}

// DiagPayload is diag.nvml's payload.
type DiagPayload struct {
	ExpectedCount *int `json:"expectedCount,omitempty"`
	Refresh       bool `json:"refresh,omitempty"`
}

// DiagNVML judges the inventory bcd holds (collecting one when there is
// none, or when the payload asks) and fails with checks-failed, the report
// attached, when a check fails.
func (p *Plugin) DiagNVML(ctx context.Context, req kind.Request) (any, error) {
	var pl DiagPayload
	if err := req.Command.Decode(&pl); err != nil {
		return nil, err
	}
	var inv *gpu.Inventory
	if !pl.Refresh {
		inv = p.previous(ctx, req)
	}
	if inv == nil {
		fresh, err := p.collect(ctx, req, collect.Options{})
		if err != nil {
			return nil, err
		}
		// Keep bcd's copy current; the diagnosis stands without it.
		if err := p.put(ctx, req, fresh); err != nil {
			p.logger().Warn("could not store the fresh inventory in bcd", "error", err)
		}
		inv = fresh
	}
	expected := p.Config.ExpectedGPUs
	if pl.ExpectedCount != nil {
		expected = *pl.ExpectedCount
	}
	rep := Diagnose(inv, DiagOptions{ExpectedCount: expected})
	if rep.Status == StatusFail {
		failed := rep.Failed()
		msg := fmt.Sprintf("%d of %d checks failed; first: %s: %s", len(failed), len(rep.Checks), failed[0].Check, failed[0].Reason)
		return rep, &kind.Failure{Reason: ReasonChecksFailed, Message: msg, Result: rep}
	}
	return rep, nil
}

func (p *Plugin) collect(ctx context.Context, req kind.Request, opts collect.Options) (*gpu.Inventory, error) {
	if req.Progress != nil {
		req.Progress.Report(-1, "collecting the GPU inventory")
	}
	c := p.Collector()
	if req.Logger != nil {
		c.Logger = req.Logger
	}
	return c.Collect(ctx, opts)
}

// previous returns bcd's inventory, or nil when it has none or cannot say.
func (p *Plugin) previous(ctx context.Context, req kind.Request) *gpu.Inventory {
	if req.Host == nil {
		return nil
	}
	raw, _, err := req.Host.Inventory(ctx)
	if err != nil {
		if !errors.Is(err, kind.ErrNoHost) {
			p.logger().Warn("could not read bcd's inventory", "error", err)
		}
		return nil
	}
	if len(raw) == 0 {
		return nil
	}
	inv, err := gpu.Decode(raw)
	if err != nil || inv.SchemaVersion != gpu.SchemaVersion {
		return nil
	}
	return inv
}

// put stores the inventory in bcd. Running without bcd (a harness with no
// host) is not an error: there is nothing to update.
func (p *Plugin) put(ctx context.Context, req kind.Request, inv *gpu.Inventory) error {
	if req.Host == nil {
		return nil
	}
	raw, err := json.Marshal(inv)
	if err != nil {
		return fmt.Errorf("encoding the GPU inventory: %w", err)
	}
	if err := req.Host.PutInventory(ctx, raw); err != nil {
		if errors.Is(err, kind.ErrNoHost) {
			return nil
		}
		return fmt.Errorf("updating bcd's GPU inventory: %w", err)
	}
	return nil
}

// NewMockSMI answers as nvidia-smi would, from a mock NVML source, so that
// a demo on a machine without GPUs passes nvml.init (EnvNvidiaSmi=mock).
// Never use it with the real library: nvml.init would then prove nothing.
func NewMockSMI(src collect.NVML) collect.SMI { return mockSMI{nvml: src} }

type mockSMI struct{ nvml collect.NVML }

func (m mockSMI) Query(ctx context.Context) smi.Answer {
	gs, st, _ := m.nvml.Snapshot(ctx)
	if !st.Answered {
		return smi.Answer{Status: gpu.SourceStatus{Reason: "mock nvidia-smi: the mock NVML source did not answer: " + st.Reason}}
	}
	out := make([]gpu.GPU, len(gs))
	for i, g := range gs {
		g.SeenBy = []string{gpu.SourceNvidiaSmi}
		if g.PCIe != nil {
			pc := *g.PCIe
			pc.WidthSamples = []int{pc.WidthCurrent}
			g.PCIe = &pc
		}
		out[i] = g
	}
	return smi.Answer{Status: gpu.SourceStatus{Answered: true, GPUs: len(out), ExitCode: gpu.Ptr(0)}, GPUs: out}
}
