// Package wipe is disk.wipe: it erases a whole disk by one of five methods
// and returns a record of what was done that the node signs (the kind is
// attested), so the control plane's nodeSignedResults() can check a wipe
// before it acts on it, and a forged or altered record is refused.
//
// "metadata" removes the signatures that make a disk look used (partition
// tables, filesystem and RAID superblocks) and is reported as metadata,
// never as a wipe: Result.Erased is false and Result.Scope "metadata". The
// others erase user data: "overwrite" writes zeros over every byte,
// "scsi-sanitize" runs SANITIZE on a SAS/SCSI drive (sg3_utils),
// "nvme-format" and "nvme-sanitize" ask an NVMe drive to erase itself
// (cryptographically where the drive supports it), "ata-secure-erase" runs
// the ATA security state machine (refused while the drive is frozen, and
// left "not enabled" afterwards). Every mode ends with a sampled readback.
package wipe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/disk/blockdev"
	"github.com/better-compute/commands/plugins/disk/tools"
)

// Mode is a wipe method.
type Mode string

// The six modes.
const (
	ModeMetadata       Mode = "metadata"
	ModeOverwrite      Mode = "overwrite"
	ModeNVMeFormat     Mode = "nvme-format"
	ModeNVMeSanitize   Mode = "nvme-sanitize"
	ModeATASecureErase Mode = "ata-secure-erase"
	ModeSCSISanitize   Mode = "scsi-sanitize"
)

// Failure reasons disk.wipe reports.
const (
	ReasonRefused       = "device-refused"
	ReasonUnsupported   = "method-unsupported"
	ReasonFrozen        = "drive-frozen"
	ReasonLocked        = "drive-locked"
	ReasonToolFailed    = "tool-failed"
	ReasonUnconfirmed   = "erase-unconfirmed"
	ReasonReadbackFaled = "readback-failed"
	ReasonIO            = "io-error"
)

// Error is a wipe failure with its reason and the record so far.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(reason string, format string, args ...any) *Error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Request is one wipe.
type Request struct {
	Device string `json:"device"`
	Mode   Mode   `json:"mode"`
	// Samples is how many random blocks the readback reads (default 32).
	Samples int `json:"samples,omitempty"`
}

// Tool names a tool the wipe ran and its version.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Method is the method and its parameters as run.
type Method struct {
	Mode Mode `json:"mode"`
	// Parameters are the method's settings (SES, SANACT, the erase
	// variant, the regions zeroed), as passed to the drive or written.
	Parameters map[string]any `json:"parameters,omitempty"`
	// Commands are the tool command lines run, in order.
	Commands []string `json:"commands,omitempty"`
}

// Result is the wipe record the node signs.
type Result struct {
	// Scope is "device" for a wipe of user data, "metadata" for a
	// metadata-only erase, which is never a wipe.
	Scope string `json:"scope"`
	// Erased is true only when user data was erased (never for metadata).
	Erased   bool              `json:"erased"`
	Device   blockdev.Identity `json:"device"`
	NVMe     *NVMeIdentity     `json:"nvme,omitempty"`
	ATA      *tools.ATADrive   `json:"ata,omitempty"`
	SCSI     *tools.SCSIDrive  `json:"scsi,omitempty"`
	Method   Method            `json:"method"`
	Tools    []Tool            `json:"tools,omitempty"`
	Started  time.Time         `json:"startedAt"`
	Finished time.Time         `json:"finishedAt"`
	// PostState is what the drive reports after the erase: the NVMe
	// sanitize log, the ATA security state, or the bytes zeroed.
	PostState map[string]any `json:"postState,omitempty"`
	Readback  Readback       `json:"readback"`
}

// NVMeIdentity is the drive's own identity of an NVMe wipe.
type NVMeIdentity struct {
	Controller tools.NVMeController `json:"controller"`
	Namespace  tools.NVMeNamespace  `json:"namespace"`
}

// Deps are what a wipe runs on.
type Deps struct {
	Sys    blockdev.Sys
	Runner tools.Runner
	Logger hclog.Logger
	// Progress reports percent done, may be nil.
	Progress func(percent int, message string)
	// SanitizePoll is how often the sanitize log is read (default 5s).
	SanitizePoll time.Duration
	// Now is the clock (time.Now by default).
	Now func() time.Time
}

func (d *Deps) defaults() {
	if d.Logger == nil {
		d.Logger = hclog.NewNullLogger()
	}
	if d.Progress == nil {
		d.Progress = func(int, string) {}
	}
	if d.SanitizePoll <= 0 {
		d.SanitizePoll = 5 * time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Runner == nil {
		d.Runner = tools.Exec{}
	}
	if d.Sys.SysRoot == "" {
		d.Sys = blockdev.Default
	}
}

// Run wipes req.Device. On failure the returned Result holds what is known
// (identity, the method tried, the post-state read) and the error is an
// *Error with the reason.
func Run(ctx context.Context, d Deps, req Request) (Result, error) {
	d.defaults()
	res := Result{Scope: "device", Method: Method{Mode: req.Mode, Parameters: map[string]any{}}, Started: d.Now().UTC(), PostState: map[string]any{}}
	err := run(ctx, d, req, &res)
	res.Finished = d.Now().UTC()
	return res, err
}

func run(ctx context.Context, d Deps, req Request, rp *Result) error {
	res := *rp
	defer func() { *rp = res }()
	switch req.Mode {
	case ModeMetadata, ModeOverwrite, ModeNVMeFormat, ModeNVMeSanitize, ModeATASecureErase, ModeSCSISanitize:
	default:
		return fail(ReasonUnsupported, "mode %q: must be metadata, overwrite, nvme-format, nvme-sanitize, ata-secure-erase or scsi-sanitize", req.Mode)
	}
	if req.Mode == ModeMetadata {
		res.Scope = "metadata"
	}
	id, err := d.Sys.Identify(req.Device)
	res.Device = id
	if err != nil {
		return refusedOr(err)
	}
	if err := d.Sys.Check(id); err != nil {
		return refusedOr(err)
	}
	f, err := blockdev.OpenExclusive(req.Device)
	if err != nil {
		return refusedOr(err)
	}
	defer f.Close()
	if size, err := blockdev.Size(f); err == nil {
		res.Device.SizeBytes = size
	}
	samples := req.Samples
	if samples <= 0 {
		samples = 32
	}
	plan, err := planReadback(res.Device.SizeBytes, samples, req.Mode)
	if err != nil {
		return fail(ReasonIO, "planning the readback: %w", err)
	}
	before, err := plan.read(f)
	if err != nil {
		return fail(ReasonIO, "reading %s before the wipe: %w", req.Device, err)
	}
	w := &wiper{d: d, f: f, req: req, res: &res}
	switch req.Mode {
	case ModeMetadata:
		err = w.metadata(ctx)
	case ModeOverwrite:
		err = w.overwrite(ctx)
	case ModeNVMeFormat:
		err = w.nvmeFormat(ctx)
	case ModeNVMeSanitize:
		err = w.nvmeSanitize(ctx)
	case ModeATASecureErase:
		err = w.ataErase(ctx)
	case ModeSCSISanitize:
		err = w.scsiSanitize(ctx)
	}
	if err != nil {
		return err
	}
	if err := blockdev.RereadPartitions(f); err != nil {
		res.PostState["partitionReread"] = err.Error()
	} else {
		res.PostState["partitionReread"] = "ok"
	}
	if err := blockdev.DropCache(f); err != nil {
		return fail(ReasonIO, "dropping the cache before the readback: %w", err)
	}
	after, err := plan.read(f)
	if err != nil {
		return fail(ReasonIO, "reading %s back after the wipe: %w", req.Device, err)
	}
	res.Readback = plan.verdict(before, after)
	if !res.Readback.Passed {
		return fail(ReasonReadbackFaled, "%s", res.Readback.Summary)
	}
	res.Erased = req.Mode != ModeMetadata
	return nil
}

func refusedOr(err error) error {
	if errors.Is(err, blockdev.ErrRefused) {
		return &Error{Reason: ReasonRefused, Err: err}
	}
	return &Error{Reason: ReasonIO, Err: err}
}

// wiper carries one run's state across the mode's steps.
type wiper struct {
	d   Deps
	f   *os.File
	req Request
	res *Result
}

// tool runs a checked tool call and records its command line.
func (w *wiper) tool(ctx context.Context, timeout time.Duration, name string, args ...string) ([]byte, error) {
	w.res.Method.Commands = append(w.res.Method.Commands, cmdline(name, args))
	out, err := tools.Checked(ctx, w.d.Runner, timeout, name, args...)
	if err != nil {
		return out, &Error{Reason: ReasonToolFailed, Err: err}
	}
	return out, nil
}

func (w *wiper) version(ctx context.Context, name string) {
	for _, t := range w.res.Tools {
		if t.Name == name {
			return
		}
	}
	w.res.Tools = append(w.res.Tools, Tool{Name: name, Version: tools.Version(ctx, w.d.Runner, name)})
}

func cmdline(name string, args []string) string {
	s := name
	for _, a := range args {
		s += " " + a
	}
	return s
}
