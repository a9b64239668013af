package dcgm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/internal/gpu/gpuenv"
	"github.com/better-compute/commands/plugins/internal/gpu/inuse"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
	"github.com/better-compute/commands/sdk/kind"
)

// Failure reasons of diag.dcgm besides inuse.ReasonGPUBusy.
const (
	// ReasonUnavailable: dcgmi or the host engine does not answer.
	ReasonUnavailable = "dcgm-unavailable"
	// ReasonDiagFailed: the diagnostic ran and a test failed, or dcgmi
	// exited non-zero.
	ReasonDiagFailed = "diag-failed"
	// ReasonUnknownGPU: a listed UUID names no GPU of the node.
	ReasonUnknownGPU = "unknown-gpu"
	// ReasonNodeSpec and ReasonSmiFailed are the in-use check's (the same
	// as gpu.reset's): the check could not be made.
	ReasonNodeSpec  = inuse.ReasonNodeSpec
	ReasonSmiFailed = inuse.ReasonSmiFailed
)

// ignoredHolders hold GPU device nodes by design and are no workload: the
// DCGM host engine (which runs the diagnostic), its tools, the persistence
// daemon and the exporter.
var ignoredHolders = []string{"nv-hostengine", "dcgmi", "nvvs", "dcgm-exporter", "nvidia-persistenced"}

// Config is what diag.dcgm runs with.
type Config struct {
	// DCGMI runs dcgmi; its Timeout bounds level 1's calls.
	DCGMI toolexec.Tool
	// SMI runs nvidia-smi for the GPU list and the compute processes.
	SMI smi.Tool
	// ProcRoot is where /proc is.
	ProcRoot string
	// DiagTimeouts bound `dcgmi diag -r N` per level (index 2..4); the
	// command's deadline bounds them too.
	DiagTimeouts map[int]time.Duration
}

// Environment variables read by ConfigFromEnv; those from gpuenv mean the
// same in every GPU plugin.
const (
	// EnvDcgmi is dcgmi's path ("dcgmi" on PATH by default).
	EnvDcgmi       = "BCD_DCGMI"
	EnvNvidiaSmi   = gpuenv.NvidiaSmi
	EnvSysRoot     = gpuenv.SysRoot
	EnvProcRoot    = gpuenv.ProcRoot
	EnvExecTimeout = gpuenv.ExecTimeout
)

// EnvVars lists every variable the plugin reads, for bcd's allowlist.
var EnvVars = []string{EnvDcgmi, EnvNvidiaSmi, EnvSysRoot, EnvProcRoot, EnvExecTimeout}

// ConfigFromEnv builds a Config from the environment with production
// defaults (dcgmi and nvidia-smi on PATH, /proc or $BCD_SYSFS_ROOT/proc).
func ConfigFromEnv() (Config, error) {
	c := Config{
		DCGMI:    toolexec.Tool{Path: envOr(EnvDcgmi, "dcgmi")},
		SMI:      smi.Tool{Path: envOr(EnvNvidiaSmi, smi.DefaultPath)},
		ProcRoot: envOr(EnvProcRoot, filepath.Join(envOr(EnvSysRoot, "/"), "proc")),
	}
	if v := os.Getenv(EnvExecTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvExecTimeout, v, err)
		}
		c.DCGMI.Timeout, c.SMI.Timeout = d, d
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var defaultDiagTimeouts = map[int]time.Duration{2: 30 * time.Minute, 3: 2 * time.Hour, 4: 4 * time.Hour}

// Payload is diag.dcgm's payload.
type Payload struct {
	// Level is 1 to 4.
	Level int `json:"level"`
	// GPUs are the UUIDs to diagnose; empty means every GPU.
	GPUs []string `json:"gpus,omitempty"`
}

// Result is diag.dcgm's result document.
type Result struct {
	Level int `json:"level"`
	// Overall is pass, warn or fail.
	Overall string `json:"overall"`
	// Deployment is level 1's check; the higher levels report it too.
	Deployment *Deployment `json:"deployment,omitempty"`
	// SpecGeneration is the node spec generation the in-use check read.
	SpecGeneration int64 `json:"specGeneration,omitempty"`
	// Busy lists why the command was refused (gpu-busy).
	Busy []string `json:"busy,omitempty"`
	// GPUs are the GPUs the diagnostic ran on.
	GPUs []smi.GPU `json:"gpus,omitempty"`
	// ExitCode is dcgmi diag's exit status.
	ExitCode *int `json:"exitCode,omitempty"`
	// Diag is the parsed diagnostic: per test per GPU status with warnings.
	Diag *Report `json:"diag,omitempty"`
}

// Deployment says whether DCGM is deployed and answering.
type Deployment struct {
	Dcgmi      Check `json:"dcgmi"`
	HostEngine Check `json:"hostEngine"`
}

// Check is one part of the deployment.
type Check struct {
	Answered bool   `json:"answered"`
	Version  string `json:"version,omitempty"`
	// GPUs is how many GPUs the host engine found.
	GPUs  *int   `json:"gpus,omitempty"`
	Error string `json:"error,omitempty"`
}

// Handler returns diag.dcgm's handler.
func Handler(cfg Config) kind.Handler {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.DiagTimeouts == nil {
		cfg.DiagTimeouts = defaultDiagTimeouts
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
	if p.Level < 1 || p.Level > 4 {
		return nil, kind.Fail(kind.ReasonInvalidPayload, "level %d: must be 1 to 4", p.Level)
	}
	res := &Result{Level: p.Level}

	if p.Level == 1 {
		progress.Report(-1, "checking the DCGM deployment")
		dep := CheckDeployment(ctx, cfg.DCGMI)
		res.Deployment = &dep
		if !dep.Dcgmi.Answered || !dep.HostEngine.Answered {
			res.Overall = StatusFail
			return nil, &kind.Failure{Reason: ReasonUnavailable, Message: dep.problem(), Result: res}
		}
		res.Overall = StatusPass
		return res, nil
	}

	// From level 2 DCGM loads the GPUs: the same refusal as gpu.reset's.
	spec, gen, err := inuse.AppliedSpec(ctx, req.Host)
	if err != nil {
		return nil, kind.Fail(ReasonNodeSpec, "cannot rule out a live assignment: %v", err)
	}
	res.SpecGeneration = gen
	all, err := nodeGPUs(ctx, cfg.SMI, req.Host, logger)
	if err != nil {
		return nil, kind.Fail(ReasonSmiFailed, "listing GPUs: %v", err)
	}
	targets, err := pick(all, p.GPUs)
	if err != nil {
		return nil, err
	}
	res.GPUs = targets
	uuids := make([]string, len(targets))
	byIndex := map[int]string{}
	for i, g := range targets {
		uuids[i] = g.UUID
	}
	for _, g := range all {
		byIndex[g.Index] = g.UUID
	}
	busy := inuse.Reasons(inuse.Input{Spec: spec}, uuids)
	if len(busy) == 0 {
		if busy, err = inuse.Processes(ctx, cfg.SMI, cfg.ProcRoot, byIndex, ignoredHolders, uuids); err != nil {
			return nil, kind.Fail(ReasonSmiFailed, "cannot rule out a process on the GPUs: %v", err)
		}
	}
	if len(busy) > 0 {
		res.Busy = busy
		res.Overall = StatusFail
		return nil, &kind.Failure{Reason: inuse.ReasonGPUBusy, Message: strings.Join(busy, "; "), Result: res}
	}

	args := []string{"diag", "-r", strconv.Itoa(p.Level), "-j"}
	if len(p.GPUs) > 0 {
		ids := make([]string, len(targets))
		for i, g := range targets {
			ids[i] = strconv.Itoa(g.Index)
		}
		args = append(args, "-i", strings.Join(ids, ","))
	}
	progress.Report(-1, fmt.Sprintf("running dcgmi %s", strings.Join(args, " ")))
	runner := cfg.DCGMI
	runner.Timeout = cfg.DiagTimeouts[p.Level]
	out, runErr := runner.Run(ctx, args...)
	if runErr != nil && ctx.Err() != nil {
		return res, runErr
	}
	timedOut := errors.Is(runErr, toolexec.ErrTimeout)
	if runErr != nil && !timedOut {
		return nil, &kind.Failure{Reason: ReasonUnavailable, Message: runErr.Error(), Result: res}
	}
	if !timedOut {
		res.ExitCode = &out.ExitCode
	}
	// A non-zero exit is a failure, but the JSON still says which test failed.
	rep, perr := ParseDiag(out.Stdout)
	if perr == nil {
		for i := range rep.Results {
			if g := rep.Results[i].GPU; g != nil {
				rep.Results[i].UUID = byIndex[*g]
			}
		}
		res.Diag = &rep
		res.Overall = rep.Overall()
	} else {
		res.Overall = StatusFail
	}
	progress.Report(100, "diagnostic finished: "+res.Overall)
	switch {
	case runErr != nil:
		return nil, &kind.Failure{Reason: ReasonDiagFailed, Message: runErr.Error(), Result: res}
	case perr != nil:
		msg := fmt.Sprintf("dcgmi diag exited %d without a readable report (%v)", out.ExitCode, perr)
		if t := out.Text(); t != "" {
			msg += ": " + firstLine(t)
		}
		return nil, &kind.Failure{Reason: ReasonDiagFailed, Message: msg, Result: res}
	case res.Overall == StatusFail || out.ExitCode != 0:
		res.Overall = StatusFail
		return nil, &kind.Failure{Reason: ReasonDiagFailed, Message: failures(rep, out.ExitCode), Result: res}
	}
	return res, nil
}

// failures says which tests failed on which GPU, for the failure message.
func failures(rep Report, exit int) string {
	var parts []string
	for _, t := range rep.Results {
		if t.Status != StatusFail {
			continue
		}
		where := "the node"
		if t.GPU != nil {
			where = fmt.Sprintf("GPU %d", *t.GPU)
			if t.UUID != "" {
				where += " (" + t.UUID + ")"
			}
		}
		s := fmt.Sprintf("%s failed on %s", t.Test, where)
		if msgs := append(append([]string(nil), t.Errors...), t.Warnings...); len(msgs) > 0 {
			s += ": " + strings.Join(msgs, "; ")
		}
		parts = append(parts, s)
	}
	parts = append(parts, rep.Errors...)
	if len(parts) == 0 {
		return fmt.Sprintf("dcgmi diag exited %d", exit)
	}
	return strings.Join(parts, "; ")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var (
	versionRe = regexp.MustCompile(`\d+\.\d+(\.\d+)?`)
	foundRe   = regexp.MustCompile(`(?m)^\s*(\d+)\s+GPUs?\s+found`)
)

// CheckDeployment is level 1: `dcgmi --version` answers, and `dcgmi
// discovery -l` reaches the host engine and names the GPUs it found.
func CheckDeployment(ctx context.Context, dcgmi toolexec.Tool) Deployment {
	var d Deployment
	out, err := dcgmi.Run(ctx, "--version")
	switch {
	case err != nil:
		d.Dcgmi.Error = err.Error()
	case out.ExitCode != 0:
		d.Dcgmi.Error = fmt.Sprintf("dcgmi --version exited %d: %s", out.ExitCode, firstLine(out.Text()))
	default:
		d.Dcgmi.Answered = true
		d.Dcgmi.Version = string(versionRe.Find(out.Stdout))
	}
	out, err = dcgmi.Run(ctx, "discovery", "-l")
	switch {
	case err != nil:
		d.HostEngine.Error = err.Error()
	case out.ExitCode != 0:
		d.HostEngine.Error = fmt.Sprintf("dcgmi discovery -l exited %d: %s", out.ExitCode, strings.ReplaceAll(out.Text(), "\n", " / "))
	default:
		m := foundRe.FindSubmatch(out.Stdout)
		if m == nil {
			d.HostEngine.Error = "dcgmi discovery -l answered without a GPU count: " + firstLine(out.Text())
			break
		}
		n, _ := strconv.Atoi(string(m[1]))
		d.HostEngine.Answered, d.HostEngine.GPUs = true, &n
	}
	return d
}

func (d Deployment) problem() string {
	var parts []string
	if !d.Dcgmi.Answered {
		parts = append(parts, "dcgmi does not answer: "+d.Dcgmi.Error)
	}
	if !d.HostEngine.Answered {
		parts = append(parts, "the DCGM host engine does not answer: "+d.HostEngine.Error)
	}
	return strings.Join(parts, "; ")
}

// nodeGPUs lists the node's GPUs from bcd's inventory, or from nvidia-smi
// when bcd has none.
func nodeGPUs(ctx context.Context, r smi.Tool, host kind.Host, logger hclog.Logger) ([]smi.GPU, error) {
	if host != nil {
		raw, _, err := host.Inventory(ctx)
		switch {
		case err != nil:
			logger.Debug("no inventory from bcd, asking nvidia-smi", "error", err)
		case len(raw) > 0:
			var inv struct {
				GPUs []smi.GPU `json:"gpus"`
			}
			if err := json.Unmarshal(raw, &inv); err != nil {
				logger.Warn("unreadable inventory from bcd, asking nvidia-smi", "error", err)
			} else if gpus := withUUID(inv.GPUs); len(gpus) > 0 {
				return gpus, nil
			}
		}
	}
	return r.QueryGPUs(ctx)
}

func withUUID(in []smi.GPU) []smi.GPU {
	var out []smi.GPU
	for _, g := range in {
		if g.UUID != "" {
			out = append(out, g)
		}
	}
	return out
}

// pick returns the listed GPUs, or all when none is listed.
func pick(all []smi.GPU, listed []string) ([]smi.GPU, error) {
	if len(listed) == 0 {
		return all, nil
	}
	var out []smi.GPU
	var unknown []string
	for _, u := range listed {
		found := false
		for _, g := range all {
			if strings.EqualFold(g.UUID, u) {
				out, found = append(out, g), true
				break
			}
		}
		if !found {
			unknown = append(unknown, u)
		}
	}
	if len(unknown) > 0 {
		return nil, kind.Fail(ReasonUnknownGPU, "no GPU %s on this node", strings.Join(unknown, ", "))
	}
	return out, nil
}
