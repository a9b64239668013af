//go:build linux

// Package kindtest is the conformance harness a module team or vendor runs
// against their own plugin binary, from a Go test:
//
//	func TestConformance(t *testing.T) {
//		kindtest.Run(t, "./bin/bc-kind-acme", kindtest.Options{
//			LongRunning: &kindtest.Case{Kind: "acme.flash", Payload: json.RawMessage(`{"image":"big"}`)},
//		})
//	}
//
// It starts the binary out of process through go-plugin exactly as bcd does
// and checks, each as a sub-test: the manifests are valid; a payload that
// violates a kind's schema is refused (failed, invalid-payload) and the
// plugin keeps serving; a long-running command stops within a bound once
// cancelled and reports its own outcome; a panic becomes a failed result;
// nothing is written to stdout after the handshake.
package kindtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/wire"
)

// Case is one command the harness runs.
type Case struct {
	Kind    string
	Payload json.RawMessage
}

// Options configures Run.
type Options struct {
	// Kinds, when set, are kinds the binary must serve.
	Kinds []string
	// BadPayloads maps a kind to a payload its schema must refuse. A kind
	// not listed is sent [] (a JSON array, which an object schema refuses);
	// a kind listed with a nil payload is not checked.
	BadPayloads map[string]json.RawMessage
	// LongRunning is a command that runs until cancelled (or for much longer
	// than CancelWithin). The cancellation check is skipped when nil.
	LongRunning *Case
	// CancelAfter is how long the long-running command runs before it is
	// cancelled, when it reports no progress first; 200 ms when 0. With
	// progress, it is cancelled at its first report.
	CancelAfter time.Duration
	// CancelWithin bounds the time from cancel to the plugin's result;
	// 5 s when 0.
	CancelWithin time.Duration
	// Panic is a command whose handler panics. The check is skipped when nil.
	Panic *Case
	// Host, when set, is served to the plugin as bcd's Host service;
	// otherwise Host calls fail with kind.ErrNoHost's message.
	Host kind.Host
	// Env is extra environment for the plugin; like bcd, the harness passes
	// only PATH, LANG, LC_ALL, TZ and TMPDIR of its own.
	Env []string
	// StartTimeout bounds the plugin's start; 10 s when 0.
	StartTimeout time.Duration
	// StdoutWindow is how long the stdout check waits for stray output that
	// is still in flight; 250 ms when 0.
	StdoutWindow time.Duration
}

func (o Options) withDefaults() Options {
	if o.CancelAfter <= 0 {
		o.CancelAfter = 200 * time.Millisecond
	}
	if o.CancelWithin <= 0 {
		o.CancelWithin = 5 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = wire.DefaultStartTimeout
	}
	if o.StdoutWindow <= 0 {
		o.StdoutWindow = 250 * time.Millisecond
	}
	return o
}

// callTimeout bounds one harness call that should be quick.
const callTimeout = 30 * time.Second

// Run starts binary and runs every conformance check as a sub-test of t.
func Run(t *testing.T, binary string, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	p := Start(t, binary, opts)

	var manifests []kind.Manifest
	t.Run("manifest valid", func(t *testing.T) {
		var err error
		manifests, err = p.CheckManifests(opts.Kinds)
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bad payload refused", func(t *testing.T) {
		if len(manifests) == 0 {
			t.Skip("no valid manifests")
		}
		for _, m := range manifests {
			payload, listed := opts.BadPayloads[m.Kind]
			if listed && payload == nil {
				continue
			}
			if !listed {
				payload = json.RawMessage(`[]`)
			}
			t.Run(m.Kind, func(t *testing.T) {
				if err := p.CheckBadPayload(m.Kind, payload); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
	t.Run("cancellation honoured", func(t *testing.T) {
		if opts.LongRunning == nil {
			t.Skip("Options.LongRunning names no long-running command")
		}
		if err := p.CheckCancel(*opts.LongRunning, opts.CancelAfter, opts.CancelWithin); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("panic becomes a failed result", func(t *testing.T) {
		if opts.Panic == nil {
			t.Skip("Options.Panic names no panicking command")
		}
		if err := p.CheckPanic(*opts.Panic); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("nothing written to stdout after the handshake", func(t *testing.T) {
		if err := p.CheckStdout(opts.StdoutWindow); err != nil {
			t.Fatal(err)
		}
	})
}

// CheckManifests checks that the plugin serves at least one kind, every
// manifest validates, no kind is served twice, and each of want is served.
// It returns the manifests sorted by kind.
func (p *Plugin) CheckManifests(want []string) ([]kind.Manifest, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ms, err := p.Manifests(ctx)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, errors.New("the plugin serves no kinds")
	}
	var errs []error
	seen := map[string]bool{}
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[m.Kind] {
			errs = append(errs, fmt.Errorf("kind %s is served twice", m.Kind))
		}
		seen[m.Kind] = true
	}
	for _, k := range want {
		if !seen[k] {
			errs = append(errs, fmt.Errorf("kind %s is not served", k))
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Kind < ms[j].Kind })
	return ms, errors.Join(errs...)
}

// CheckBadPayload sends a payload the kind's schema must refuse: the result
// must be failed with reason invalid-payload and a message, and the plugin
// must keep serving.
func (p *Plugin) CheckBadPayload(kindName string, payload json.RawMessage) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := p.Execute(ctx, kindName, payload, nil)
	if err != nil {
		return fmt.Errorf("%s with payload %s: %w", kindName, payload, err)
	}
	if res.Status != kind.StatusFailed || res.Reason != kind.ReasonInvalidPayload {
		return fmt.Errorf("%s with payload %s: got %s (reason %q), want failed with reason %s; if the schema accepts it, name a payload it refuses in Options.BadPayloads",
			kindName, payload, res.Status, res.Reason, kind.ReasonInvalidPayload)
	}
	if res.Message == "" {
		return fmt.Errorf("%s: the refusal says nothing about what is wrong", kindName)
	}
	return p.checkServing()
}

// CheckCancel runs c, cancels it at its first progress report or after
// cancelAfter, and requires the plugin's own cancelled result within within.
func (p *Plugin) CheckCancel(c Case, cancelAfter, within time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progressed := make(chan struct{}, 1)
	type outcome struct {
		res kind.Result
		err error
		at  time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.Execute(ctx, c.Kind, c.Payload, func(int, string) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		})
		done <- outcome{res, err, time.Now()}
	}()
	timer := time.NewTimer(cancelAfter)
	defer timer.Stop()
	select {
	case <-progressed:
	case <-timer.C:
	case o := <-done:
		return fmt.Errorf("%s ended before it was cancelled (%s, reason %q: %s): name a longer-running payload in Options.LongRunning", c.Kind, o.res.Status, o.res.Reason, o.res.Message)
	}
	cancelledAt := time.Now()
	cancel()
	bound := time.NewTimer(within + time.Second)
	defer bound.Stop()
	var o outcome
	select {
	case o = <-done:
	case <-bound.C:
		return fmt.Errorf("%s: no outcome within %s of the cancel", c.Kind, within)
	}
	if errors.Is(o.err, wire.ErrNoOutcome) {
		return fmt.Errorf("%s: the plugin reported no outcome within %s of the cancel: stop between actions when ctx is done", c.Kind, within)
	}
	if o.err != nil {
		return fmt.Errorf("%s: %w", c.Kind, o.err)
	}
	if took := o.at.Sub(cancelledAt); took > within {
		return fmt.Errorf("%s: the outcome came %s after the cancel, more than %s", c.Kind, took, within)
	}
	if o.res.Status != kind.StatusCancelled {
		return fmt.Errorf("%s: got %s (reason %q: %s) after the cancel, want cancelled", c.Kind, o.res.Status, o.res.Reason, o.res.Message)
	}
	return p.checkServing()
}

// CheckPanic runs c, whose handler panics: the result must be failed with
// reason panic, and the plugin must keep serving.
func (p *Plugin) CheckPanic(c Case) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := p.Execute(ctx, c.Kind, c.Payload, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Kind, err)
	}
	if res.Status != kind.StatusFailed || res.Reason != kind.ReasonPanic {
		return fmt.Errorf("%s: got %s (reason %q), want failed with reason %s", c.Kind, res.Status, res.Reason, kind.ReasonPanic)
	}
	return p.checkServing()
}

// CheckStdout requires that the plugin wrote nothing to stdout since the
// handshake, waiting up to window for output still in flight: stdout
// belongs to go-plugin, and a stray line there is lost or, before the
// handshake, breaks it.
func (p *Plugin) CheckStdout(window time.Duration) error {
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if out := p.Stdout(); out != "" {
			return fmt.Errorf("the plugin wrote to stdout after the handshake (log to stderr through req.Logger instead): %q", out)
		}
		select {
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}

// checkServing requires the process alive and answering.
func (p *Plugin) checkServing() error {
	if p.Exited() {
		return errors.New("the plugin process exited")
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := p.Manifests(ctx); err != nil {
		return fmt.Errorf("the plugin stopped serving: %w", err)
	}
	return nil
}
