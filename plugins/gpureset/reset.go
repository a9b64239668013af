package gpureset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/internal/gpu/gpuenv"
	"github.com/better-compute/commands/plugins/internal/gpu/inuse"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
	"github.com/better-compute/commands/sdk/kind"
)

// Failure reasons of gpu.reset besides inuse.ReasonGPUBusy.
const (
	// ReasonNodeSpec: the applied node spec could not be read, so holds
	// cannot be ruled out.
	ReasonNodeSpec = inuse.ReasonNodeSpec
	// ReasonSmiFailed: nvidia-smi did not answer the in-use queries.
	ReasonSmiFailed = inuse.ReasonSmiFailed
	// ReasonResetFailed: nvidia-smi --gpu-reset failed or hung for a GPU.
	ReasonResetFailed = "reset-failed"
	// ReasonUnhealthy: every reset ran, but a fresh query shows a GPU unhealthy.
	ReasonUnhealthy = "gpu-unhealthy"
	// ReasonUnknownGPU: a listed UUID names no GPU nvidia-smi sees.
	ReasonUnknownGPU = "unknown-gpu"
)

// The outcomes of one GPU's reset, as GPUResult.Reset reports them.
const (
	ResetOK           = "ok"
	ResetFailed       = "failed"
	ResetNotAttempted = "not-attempted"
)

// XIDClearer forgets the XID conditions of a GPU that a reset left healthy,
// so that diag.nvml's xid.recent stops failing for errors the reset cured.
type XIDClearer interface {
	ClearGPU(ctx context.Context, uuid, busID string) error
}

// Config is what gpu.reset runs with.
type Config struct {
	// SMI runs nvidia-smi for queries and persistence mode.
	SMI smi.Tool
	// ResetTimeout bounds one `nvidia-smi --gpu-reset`; 0 means 2 minutes.
	ResetTimeout time.Duration
	// ProcRoot is where /proc is ("/proc"); processes with a GPU's device
	// node open there make it busy.
	ProcRoot string
	// XIDs clears XID conditions; nil leaves them alone (and says so).
	XIDs XIDClearer
}

// Environment variables read by ConfigFromEnv; bcd passes them to the
// plugin. Those from gpuenv mean the same in every GPU plugin.
const (
	EnvNvidiaSmi   = gpuenv.NvidiaSmi
	EnvSysRoot     = gpuenv.SysRoot
	EnvProcRoot    = gpuenv.ProcRoot
	EnvStateDir    = gpuenv.StateDir
	EnvXIDStore    = gpuenv.XIDStore
	EnvExecTimeout = gpuenv.ExecTimeout
	// EnvResetTimeout bounds one `nvidia-smi --gpu-reset` ("2m").
	EnvResetTimeout = "BCD_GPU_RESET_TIMEOUT"
)

// EnvVars lists every variable the plugin reads, for bcd's allowlist.
var EnvVars = []string{EnvNvidiaSmi, EnvSysRoot, EnvProcRoot, EnvStateDir, EnvXIDStore, EnvExecTimeout, EnvResetTimeout}

// ConfigFromEnv builds a Config from the environment, with production
// defaults: nvidia-smi on PATH, /proc (or $BCD_SYSFS_ROOT/proc), the
// default exec timeout, a 2 minute reset timeout, and the XID store at
// $BCD_XID_STORE or $BCD_STATE_DIR/gpu-xids.json (none without either).
func ConfigFromEnv() (Config, error) {
	sysRoot := envOr(EnvSysRoot, "/")
	c := Config{
		SMI:      smi.Tool{Path: envOr(EnvNvidiaSmi, smi.DefaultPath)},
		ProcRoot: envOr(EnvProcRoot, filepath.Join(sysRoot, "proc")),
	}
	store := os.Getenv(EnvXIDStore)
	if store == "" && os.Getenv(EnvStateDir) != "" {
		store = filepath.Join(os.Getenv(EnvStateDir), xid.StoreFile)
	}
	if store != "" {
		c.XIDs = StoreXIDs{Path: store, SysRoot: sysRoot}
	}
	var err error
	if c.SMI.Timeout, err = envDuration(EnvExecTimeout); err != nil {
		return c, err
	}
	if c.ResetTimeout, err = envDuration(EnvResetTimeout); err != nil {
		return c, err
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envDuration(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return d, nil
}

// Payload is gpu.reset's payload.
type Payload struct {
	// GPUs are the UUIDs of the GPUs to reset.
	GPUs []string `json:"gpus"`
}

// Result is gpu.reset's result document.
type Result struct {
	// SpecGeneration is the node spec generation the in-use check read.
	SpecGeneration int64 `json:"specGeneration"`
	// Busy lists why the command was refused (gpu-busy), one line per finding.
	Busy []string `json:"busy,omitempty"`
	// GPUs report each listed GPU, in the payload's order.
	GPUs []GPUResult `json:"gpus,omitempty"`
}

// GPUResult is one GPU's reset.
type GPUResult struct {
	UUID  string `json:"uuid"`
	BusID string `json:"busId,omitempty"`
	// PersistenceMode is the mode before the reset: enabled, disabled or unknown.
	PersistenceMode string `json:"persistenceMode"`
	// PersistenceRestored says the mode was put back after the reset.
	PersistenceRestored bool `json:"persistenceRestored"`
	// Reset is ok, failed or not-attempted.
	Reset string `json:"reset"`
	// Error says why the reset failed or was not attempted.
	Error string `json:"error,omitempty"`
	// Healthy says a fresh query after the reset shows the GPU healthy.
	Healthy bool `json:"healthy"`
	// Problems say why it is not.
	Problems []string `json:"problems,omitempty"`
	// XIDsCleared says its XID conditions were cleared (only when healthy).
	XIDsCleared bool `json:"xidsCleared"`
	// XIDError says why they were not, when the reset left it healthy.
	XIDError string `json:"xidError,omitempty"`
	// Notes are what else an operator should know (a persistence mode left off).
	Notes []string `json:"notes,omitempty"`
}

// Handler returns gpu.reset's handler.
func Handler(cfg Config) kind.Handler {
	if cfg.ResetTimeout <= 0 {
		cfg.ResetTimeout = 2 * time.Minute
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	// A failure after a cancel (a tool killed mid-run) is reported
	// cancelled by the SDK (kind.ResultOf).
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		return run(ctx, cfg, req)
	})
}

// run does the work; kind.Run hands it a request whose Logger and Progress
// are never nil.
func run(ctx context.Context, cfg Config, req kind.Request) (any, error) {
	logger, progress := req.Logger, req.Progress
	var p Payload
	if err := req.Command.Decode(&p); err != nil {
		return nil, err
	}
	gpus := dedupe(p.GPUs)
	if len(gpus) == 0 {
		return nil, kind.Fail(kind.ReasonInvalidPayload, "gpus: list at least one GPU UUID")
	}
	res := &Result{}

	// The spec first: a live hold or a passthrough refuses without touching
	// the GPUs, not even with a query.
	spec, gen, err := inuse.AppliedSpec(ctx, req.Host)
	if err != nil {
		return nil, kind.Fail(ReasonNodeSpec, "cannot rule out a live assignment: %v", err)
	}
	res.SpecGeneration = gen
	if busy := inuse.Reasons(inuse.Input{Spec: spec}, gpus); len(busy) > 0 {
		res.Busy = busy
		return nil, &kind.Failure{Reason: inuse.ReasonGPUBusy, Message: strings.Join(busy, "; "), Result: res}
	}

	seen, err := cfg.SMI.QueryGPUs(ctx)
	if err != nil {
		return nil, kind.Fail(ReasonSmiFailed, "listing GPUs: %v", err)
	}
	byUUID := map[string]smi.GPU{}
	byIndex := map[int]string{}
	for _, g := range seen {
		byUUID[strings.ToLower(g.UUID)] = g
		byIndex[g.Index] = g.UUID
	}
	var unknown []string
	for _, g := range gpus {
		if _, ok := byUUID[strings.ToLower(g)]; !ok {
			unknown = append(unknown, g)
		}
	}
	if len(unknown) > 0 {
		return nil, kind.Fail(ReasonUnknownGPU, "nvidia-smi lists no GPU %s", strings.Join(unknown, ", "))
	}
	busy, err := inuse.Processes(ctx, cfg.SMI, cfg.ProcRoot, byIndex, nil, gpus)
	if err != nil {
		return nil, kind.Fail(ReasonSmiFailed, "cannot rule out a process on the GPUs: %v", err)
	}
	if len(busy) > 0 {
		res.Busy = busy
		return nil, &kind.Failure{Reason: inuse.ReasonGPUBusy, Message: strings.Join(busy, "; "), Result: res}
	}

	for i, uuid := range gpus {
		if ctx.Err() != nil {
			for _, rest := range gpus[i:] {
				res.GPUs = append(res.GPUs, GPUResult{UUID: rest, PersistenceMode: "unknown", Reset: ResetNotAttempted, Error: "cancelled before its turn"})
			}
			return res, ctx.Err()
		}
		progress.Report(100*i/len(gpus), "resetting "+uuid)
		r := resetOne(ctx, cfg, logger, uuid, byUUID[strings.ToLower(uuid)].BusID)
		res.GPUs = append(res.GPUs, r)
	}
	if ctx.Err() != nil {
		// Cancelled during the last GPU: the result says what happened to it.
		return res, ctx.Err()
	}
	progress.Report(100, "done")
	return res, verdict(res)
}

// verdict is the command's outcome: a failed reset outweighs an unhealthy GPU.
func verdict(res *Result) error {
	var failed, unhealthy []string
	for _, g := range res.GPUs {
		switch {
		case g.Reset != ResetOK:
			failed = append(failed, g.UUID+": "+g.Error)
		case !g.Healthy:
			unhealthy = append(unhealthy, g.UUID+": "+strings.Join(g.Problems, ", "))
		}
	}
	if len(failed) > 0 {
		return &kind.Failure{Reason: ReasonResetFailed, Message: strings.Join(failed, "; "), Result: res}
	}
	if len(unhealthy) > 0 {
		return &kind.Failure{Reason: ReasonUnhealthy, Message: "reset, but still unhealthy (power-cycle the node or replace the GPU): " + strings.Join(unhealthy, "; "), Result: res}
	}
	return nil
}

// resetOne records persistence mode, turns it off, resets, restores it,
// then queries the GPU again. A cancel is honoured between the actions, and
// what was changed before it is undone and reported.
func resetOne(ctx context.Context, cfg Config, logger hclog.Logger, uuid, busID string) GPUResult {
	r := GPUResult{UUID: uuid, BusID: busID, PersistenceMode: "unknown", Reset: ResetFailed}
	logger = logger.With("gpu", uuid)

	wasOn, perr := cfg.SMI.QueryPersistence(ctx, uuid)
	if ctx.Err() != nil {
		r.Reset, r.Error, r.PersistenceRestored = ResetNotAttempted, "cancelled before the reset", true
		return r
	}
	if perr == nil {
		r.PersistenceMode = map[bool]string{true: "enabled", false: "disabled"}[wasOn]
	} else {
		logger.Warn("persistence mode unknown", "error", perr)
		r.Notes = append(r.Notes, "persistence mode could not be read: "+perr.Error())
	}
	// Persistence mode blocks the reset ("In use by another client").
	turnedOff := false
	if perr != nil || wasOn {
		if err := cfg.SMI.SetPersistence(ctx, uuid, false); err != nil {
			logger.Warn("turning persistence mode off failed", "error", err)
			r.Notes = append(r.Notes, "turning persistence mode off failed: "+err.Error())
		} else {
			turnedOff = true
		}
	}

	attempted := ctx.Err() == nil
	if !attempted {
		r.Reset, r.Error = ResetNotAttempted, "cancelled before the reset"
	} else {
		resetter := cfg.SMI
		resetter.Timeout = cfg.ResetTimeout
		if err := resetter.ResetGPU(ctx, uuid); err != nil {
			r.Error = err.Error()
			logger.Error("gpu reset failed", "error", err)
		} else {
			r.Reset = ResetOK
			logger.Info("gpu reset")
		}
	}

	// Restore even when ctx ended mid-reset: persistence left off is a side
	// effect an operator would not expect.
	restoreCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	switch {
	case !turnedOff:
		r.PersistenceRestored = perr == nil // never changed, when it was known
	case perr == nil:
		if err := cfg.SMI.SetPersistence(restoreCtx, uuid, true); err != nil {
			r.Notes = append(r.Notes, "restoring persistence mode failed: "+err.Error())
			logger.Error("restoring persistence mode failed", "error", err)
		} else {
			r.PersistenceRestored = true
		}
	default:
		r.Notes = append(r.Notes, "persistence mode was unknown before the reset and is left off")
	}
	if !attempted {
		return r
	}

	h, err := cfg.SMI.QueryHealth(restoreCtx, uuid)
	r.Healthy, r.Problems = h.Healthy && r.Reset == ResetOK, h.Problems
	r.Notes = append(r.Notes, h.Notes...)
	if err != nil && len(r.Problems) == 0 {
		r.Problems = []string{err.Error()}
	}
	if h.BusID != "" {
		r.BusID = h.BusID
	}
	if r.Reset == ResetOK && !h.Healthy {
		logger.Warn("gpu unhealthy after reset", "problems", strings.Join(h.Problems, "; "))
	}
	if !r.Healthy {
		return r
	}
	if cfg.XIDs == nil {
		r.XIDError = "no XID store configured"
		return r
	}
	if err := cfg.XIDs.ClearGPU(restoreCtx, uuid, r.BusID); err != nil {
		r.XIDError = err.Error()
		logger.Warn("clearing xid conditions failed", "error", err)
		return r
	}
	r.XIDsCleared = true
	return r
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s == "" || seen[strings.ToLower(s)] {
			continue
		}
		seen[strings.ToLower(s)] = true
		out = append(out, s)
	}
	return out
}
