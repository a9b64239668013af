package upgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/mod/semver"

	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/internal/upgrade"
	"github.com/better-compute/commands/sdk/kind"
)

// Failure reasons daemon.upgrade reports before the handoff.
const (
	ReasonNotInstalled     = "not-installed"
	ReasonAlreadyCurrent   = "already-current"
	ReasonBadRelease       = "bad-release-signature"
	ReasonReleaseMismatch  = "release-mismatch"
	ReasonDowngradeRefused = "downgrade-refused"
	ReasonTargetSkipped    = "target-skipped"
	ReasonDiskFull         = "disk-full"
	ReasonDownload         = "download-failed"
	ReasonBadPackage       = "bad-package"
	ReasonSelfCheck        = "self-check-failed"
	ReasonHandoff          = "handoff-failed"
	ReasonBusy             = "upgrade-in-progress"
)

// Package is the payload's package: where it is and what it must be.
type Package struct {
	URL    string `json:"url"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Payload is daemon.upgrade's payload.
type Payload struct {
	TargetVersion string  `json:"targetVersion"`
	Package       Package `json:"package"`
	// Release is the signed release statement (trust.SignRelease).
	Release []byte `json:"release"`
	// AllowDowngrade asks for a downgrade; the release must be signed for
	// one too.
	AllowDowngrade bool `json:"allowDowngrade,omitempty"`
	// RetrySkipped installs a target that rolled back here before.
	RetrySkipped        bool `json:"retrySkipped,omitempty"`
	RejoinWindowSeconds int  `json:"rejoinWindowSeconds,omitempty"`
}

// Result is what the plugin reports once it handed off; the daemon that
// the restart brings up settles the command.
type Result struct {
	HandedOff bool      `json:"handedOff"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Unit      string    `json:"unit"`
	Deadline  time.Time `json:"deadline"`
}

// FailureResult is the result document of an upgrade refused or failed
// before the handoff: nothing was activated.
type FailureResult struct {
	From  string `json:"from,omitempty"`
	To    string `json:"to"`
	Error string `json:"error"`
	// Output is the tail of the self-check's output.
	Output string `json:"output,omitempty"`
}

// Handler runs daemon.upgrade with cfg.
func Handler(cfg Config) kind.Handler {
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		var p Payload
		if err := req.Command.Decode(&p); err != nil {
			return nil, err
		}
		logger := req.Logger
		if logger == nil {
			logger = hclog.NewNullLogger()
		}
		return run(ctx, cfg, req, p, logger)
	})
}

func fail(reason, from, to string, err error) error {
	return &kind.Failure{Reason: reason, Message: err.Error(), Result: FailureResult{From: from, To: to, Error: err.Error()}}
}

func run(ctx context.Context, cfg Config, req kind.Request, p Payload, logger hclog.Logger) (any, error) {
	to := p.TargetVersion
	progress := func(pct int, msg string) {
		logger.Info(msg, "to", to)
		if req.Progress != nil {
			req.Progress.Report(pct, msg)
		}
	}
	if err := upgrade.ValidVersion(to); err != nil {
		return nil, fail(ReasonBadRelease, "", to, err)
	}
	if cfg.InstallDir == "" {
		return nil, fail(ReasonNotInstalled, "", to, errors.New("bcd has no installDir: it does not run from a versioned install directory, so it cannot be upgraded in place"))
	}
	l := upgrade.Layout{Root: cfg.InstallDir}
	from, err := l.CurrentVersion()
	if err != nil {
		return nil, fail(ReasonNotInstalled, "", to, fmt.Errorf("installDir %s: %w", cfg.InstallDir, err))
	}
	if from == to {
		return nil, fail(ReasonAlreadyCurrent, from, to, fmt.Errorf("%s is already the active version", to))
	}
	if st, err := l.ReadState(); err == nil && !st.Done() {
		return nil, fail(ReasonBusy, from, to, fmt.Errorf("upgrade %s from %s to %s has not finished", st.CommandID, st.From, st.To))
	}

	// 1. The release, against the node's own trust bundle.
	rel, err := verifyRelease(cfg, p)
	if err != nil {
		return nil, fail(ReasonBadRelease, from, to, err)
	}
	if err := matches(rel, p); err != nil {
		return nil, fail(ReasonReleaseMismatch, from, to, err)
	}
	if older(to, from) && !(p.AllowDowngrade && rel.AllowDowngrade) {
		why := "the payload does not ask for a downgrade (allowDowngrade)"
		if p.AllowDowngrade {
			why = "the release is not signed for a downgrade"
		}
		return nil, fail(ReasonDowngradeRefused, from, to, fmt.Errorf("%s is older than the running %s and %s", to, from, why))
	}
	skipped, err := l.Skipped()
	if err != nil {
		return nil, fail(ReasonNotInstalled, from, to, err)
	}
	if slices.Contains(skipped, to) && !p.RetrySkipped {
		return nil, fail(ReasonTargetSkipped, from, to, fmt.Errorf("%s rolled back on this node before and is skipped; set retrySkipped to try it again", to))
	}

	// 2. Free disk: the package, its unpacked copy and a reserve.
	if err := checkDisk(cfg.InstallDir, p.Package.Size, cfg.ReserveBytes); err != nil {
		return nil, fail(ReasonDiskFull, from, to, err)
	}

	// 3. Download with the cap and the streaming digest.
	if err := os.MkdirAll(l.Versions(), 0o755); err != nil { //nolint:gosec // an install directory: systemd and operators must read and run the staged bcd
		return nil, fail(ReasonNotInstalled, from, to, err)
	}
	progress(10, "downloading "+to)
	pkg := filepath.Join(l.Versions(), ".download-"+to)
	defer os.Remove(pkg)
	testhook.Hold("downloading")
	if err := fetch(ctx, p.Package.URL, p.Package.Size, p.Package.SHA256, pkg); err != nil {
		return nil, fail(ReasonDownload, from, to, err)
	}

	// 4. Stage beside the current version.
	progress(40, "staging "+to)
	staging := filepath.Join(l.Versions(), ".staging-"+to)
	_ = os.RemoveAll(staging)
	if err := unpack(pkg, staging, p.Package.Size); err != nil {
		_ = os.RemoveAll(staging)
		return nil, fail(ReasonBadPackage, from, to, err)
	}
	dir := l.VersionDir(to)
	_ = os.RemoveAll(dir) // a leftover of an earlier attempt, never the active one (from != to)
	if err := os.Rename(staging, dir); err != nil {
		_ = os.RemoveAll(staging)
		return nil, fail(ReasonBadPackage, from, to, err)
	}

	testhook.Hold("staged")
	// 5. The staged bcd checks itself against this node.
	progress(60, "self-check of "+to)
	if out, err := selfCheck(ctx, cfg, dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, &kind.Failure{Reason: ReasonSelfCheck, Message: fmt.Sprintf("the self-check of %s failed, so it was not activated: %v", to, err),
			Result: FailureResult{From: from, To: to, Error: err.Error(), Output: out}}
	}
	testhook.Hold("self-checked")
	if err := ctx.Err(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}

	// 6. Journal {command, from, to, deadline}, synced, then hand off.
	window := DefaultRejoinWindow
	if p.RejoinWindowSeconds > 0 {
		window = time.Duration(p.RejoinWindowSeconds) * time.Second
	}
	deadline := cfg.now().Add(window).UTC()
	if err := l.Begin(upgrade.State{CommandID: req.Command.ID, From: from, To: to, Deadline: deadline}); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fail(ReasonBusy, from, to, err)
	}
	testhook.Hold("journaled")
	progress(80, "handing off to bcd-upgrader")
	unit := HelperUnit(req.Command.ID)
	argv := []string{filepath.Join(l.VersionDir(from), upgrade.HelperBinary), "--install-dir", cfg.InstallDir, "--unit", cfg.unit()}
	if cfg.BusAddress != "" {
		argv = append(argv, "--bus", cfg.BusAddress)
	}
	if err := startHelper(ctx, cfg.BusAddress, unit, argv); err != nil {
		// Nothing is swapped until the helper runs; abort unless it did.
		_ = l.Transition(func(s *upgrade.State, _ bool) error {
			if s.CommandID != req.Command.ID || s.Step != upgrade.StepPrepared || s.Done() {
				return upgrade.NoChange
			}
			s.Step, s.Outcome, s.Reason, s.Message = upgrade.StepDone, upgrade.OutcomeAborted, ReasonHandoff, err.Error()
			return nil
		})
		return nil, fail(ReasonHandoff, from, to, err)
	}
	testhook.Hold("handed-off")
	return Result{HandedOff: true, From: from, To: to, Unit: unit, Deadline: deadline}, nil
}

func verifyRelease(cfg Config, p Payload) (trust.Release, error) {
	b, err := os.ReadFile(filepath.Join(cfg.StateDir, "trust.json"))
	if err != nil {
		return trust.Release{}, fmt.Errorf("reading the node's trust bundle: %w (a node takes its bundle at join)", err)
	}
	// bcd's truststore wrote this file after verifying it.
	bundle, _, err := trust.DecodeBundle(b)
	if err != nil {
		return trust.Release{}, err
	}
	if len(p.Release) == 0 {
		return trust.Release{}, errors.New("the payload carries no release signature")
	}
	return trust.VerifyRelease(&bundle, p.Release, cfg.now())
}

func matches(rel trust.Release, p Payload) error {
	var diffs []string
	if rel.Version != p.TargetVersion {
		diffs = append(diffs, fmt.Sprintf("version %s (payload %s)", rel.Version, p.TargetVersion))
	}
	if rel.SHA256 != p.Package.SHA256 {
		diffs = append(diffs, fmt.Sprintf("sha256 %s (payload %s)", rel.SHA256, p.Package.SHA256))
	}
	if rel.Size != p.Package.Size {
		diffs = append(diffs, fmt.Sprintf("size %d (payload %d)", rel.Size, p.Package.Size))
	}
	if p.Package.Size > MaxPackageBytes {
		diffs = append(diffs, fmt.Sprintf("size %d is over the %d-byte cap", p.Package.Size, MaxPackageBytes))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the signed release says %s", strings.Join(diffs, ", "))
	}
	return nil
}

// older reports whether a is an older version than b; versions that are
// not semantic versions are never called older (and never newer).
func older(a, b string) bool {
	va, vb := "v"+strings.TrimPrefix(a, "v"), "v"+strings.TrimPrefix(b, "v")
	if !semver.IsValid(va) || !semver.IsValid(vb) {
		return false
	}
	return semver.Compare(va, vb) < 0
}

// checkDisk needs room for the package, up to maxExpansion times it
// unpacked, and the reserve.
func checkDisk(dir string, size, reserve int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("checking free space on %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	need := size + size*maxExpansion + reserve
	if free < need {
		return fmt.Errorf("%s has %d bytes free; the upgrade needs %d (the package, its unpacked copy and a %d-byte reserve)", dir, free, need, reserve)
	}
	return nil
}

// selfCheck runs the staged bcd's self-check against this node's config,
// with the staged plugins and their pins.
func selfCheck(ctx context.Context, cfg Config, dir string) (string, error) {
	t := cfg.SelfCheckTimeout
	if t <= 0 {
		t = DefaultSelfCheckTime
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	args := []string{"self-check", "--plugins", filepath.Join(dir, upgrade.PluginsDir)}
	if cfg.ConfigFile != "" {
		args = append(args, "--config", cfg.ConfigFile)
	}
	if cfg.StateDir != "" {
		args = append(args, "--state-dir", cfg.StateDir)
	}
	if _, err := os.Stat(filepath.Join(dir, upgrade.PinsFile)); err == nil {
		args = append(args, "--plugin-pins-file", filepath.Join(dir, upgrade.PinsFile))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, upgrade.DaemonBinary), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	tail := out.String()
	if len(tail) > 4096 {
		tail = tail[len(tail)-4096:]
	}
	if err != nil {
		return tail, fmt.Errorf("%s self-check: %w: %s", filepath.Join(dir, upgrade.DaemonBinary), err, strings.TrimSpace(lastLine(tail)))
	}
	return tail, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
