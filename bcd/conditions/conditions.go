// Package conditions detects the node conditions bcd reports to the control
// plane. Today that is RebootRequired: a host setting waits for a boot, and
// since bcd never reboots on its own, an operator (or the health reconciler,
// within the pool's disruption budget) must run node.reboot.
package conditions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/nodespec"
)

// TypeRebootRequired is the condition type of a node that waits for a boot.
const TypeRebootRequired = "RebootRequired"

// Reasons a RebootRequired condition carries.
const (
	// ReasonPackages: the Debian convention file exists (a package's
	// postinst asked for a boot: a kernel, a driver, a microcode update).
	ReasonPackages = "reboot-required-file"
	// ReasonDesiredState: the applied node spec sets rebootRequired (huge
	// pages, isolated CPUs, the IOMMU, an ECC mode, a new driver).
	ReasonDesiredState = "desired-state"
	// ReasonBoth: both say so.
	ReasonBoth = "reboot-required-file+desired-state"
)

// DefaultRebootRequiredFile is the Debian convention's flag file.
const DefaultRebootRequiredFile = "/var/run/reboot-required"

// maxPackages bounds the packages named in the message.
const maxPackages = 20

// Config configures a Detector.
type Config struct {
	// RebootRequiredFile is the flag file; "" means DefaultRebootRequiredFile.
	// Its sibling with ".pkgs" appended lists the packages that asked.
	RebootRequiredFile string
	// Logger logs unreadable files; nil discards.
	Logger hclog.Logger
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
}

// Detector computes the node's conditions. It remembers when each condition
// became true, so Since stays put across calls while the condition holds.
type Detector struct {
	cfg Config

	// sinceLock guards since.
	sinceLock sync.Mutex
	since     map[string]time.Time
}

// New returns a Detector.
func New(cfg Config) *Detector {
	if cfg.RebootRequiredFile == "" {
		cfg.RebootRequiredFile = DefaultRebootRequiredFile
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Detector{cfg: cfg, since: map[string]time.Time{}}
}

// Current returns the node's conditions given the applied spec. Every known
// condition type is listed, true or false, so the control plane can clear
// one that no longer holds.
func (d *Detector) Current(ctx context.Context, spec nodespec.Spec) []kind.Condition {
	return []kind.Condition{d.rebootRequired(ctx, spec)}
}

func (d *Detector) rebootRequired(_ context.Context, spec nodespec.Spec) kind.Condition {
	file, pkgs, err := d.readFlagFile()
	if err != nil {
		d.cfg.Logger.Warn("cannot read the reboot-required file", "path", d.cfg.RebootRequiredFile, "error", err)
	}
	c := kind.Condition{Type: TypeRebootRequired}
	var why []string
	switch {
	case file && spec.RebootRequired:
		c.Reason = ReasonBoth
	case file:
		c.Reason = ReasonPackages
	case spec.RebootRequired:
		c.Reason = ReasonDesiredState
	}
	if file {
		msg := "the host asks for a reboot (" + d.cfg.RebootRequiredFile + " exists)"
		if len(pkgs) > 0 {
			msg = "packages wait for a reboot: " + strings.Join(pkgs, ", ")
		}
		why = append(why, msg)
	}
	if spec.RebootRequired {
		why = append(why, "the node's desired state sets a host setting that waits for a boot")
	}
	c.Status = file || spec.RebootRequired
	if c.Status {
		c.Message = strings.Join(why, "; ") + "; bcd never reboots on its own: run node.reboot within the pool's disruption budget"
	}
	c.Since = d.track(c.Type, c.Status)
	return c
}

// track returns when typ last became true, or the zero time when it is false.
func (d *Detector) track(typ string, status bool) time.Time {
	d.sinceLock.Lock()
	defer d.sinceLock.Unlock()
	if !status {
		delete(d.since, typ)
		return time.Time{}
	}
	t, ok := d.since[typ]
	if !ok {
		t = d.cfg.Now().UTC()
		d.since[typ] = t
	}
	return t
}

// readFlagFile reports whether the flag file exists and the packages its
// .pkgs sibling lists, sorted, deduplicated and capped.
func (d *Detector) readFlagFile() (bool, []string, error) {
	if _, err := os.Stat(d.cfg.RebootRequiredFile); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil, nil
		}
		// A flag file we cannot stat may exist: say so rather than hide it.
		return true, nil, fmt.Errorf("stat %s: %w", d.cfg.RebootRequiredFile, err)
	}
	b, err := os.ReadFile(d.cfg.RebootRequiredFile + ".pkgs")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil, nil
		}
		return true, nil, fmt.Errorf("reading %s.pkgs: %w", d.cfg.RebootRequiredFile, err)
	}
	return true, packages(string(b)), nil
}

// packages parses a .pkgs file: one package name a line.
func packages(s string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	sort.Strings(out)
	if len(out) > maxPackages {
		n := len(out) - maxPackages
		out = append(out[:maxPackages], fmt.Sprintf("and %d more", n))
	}
	return out
}
