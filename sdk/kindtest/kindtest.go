//go:build linux

// Package kindtest is the conformance harness a module team or vendor runs
// against their own plugin binary, from a Go test:
//
//	func TestConformance(t *testing.T) {
//		kindtest.Run(t, "./bin/bc-kind-acme", kindtest.Options{
//			LongRunning: &kindtest.Case{Kind: "acme.flash", Payload: json.RawMessage(`{"image":"big"}`)},
//			InjectPanic: &kindtest.Case{Kind: "acme.flash", Payload: json.RawMessage(`{"image":"small"}`)},
//		})
//	}
//
// It starts the binary out of process through go-plugin exactly as bcd does
// and checks, each as a sub-test: the manifests are valid; a payload that
// violates a kind's schema is refused (failed, invalid-payload) and the
// plugin keeps serving; a long-running command stops within a bound once
// cancelled, reports its own outcome, and stops its work (no progress beyond
// the action under way at the cancel, none after its result); a panic
// becomes a failed result; nothing is written to stdout after the handshake.
// A plugin says how its cancellation and its panics are checked
// (Options.LongRunning, Options.InjectPanic) or why a check cannot apply
// (Options.CancelNotApplicable, Options.PanicNotApplicable); Run fails one
// that says neither.
package kindtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
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
	// than CancelWithin). Run fails a plugin that sets neither it nor
	// CancelNotApplicable.
	LongRunning *Case
	// CancelNotApplicable, when LongRunning is nil, says why no command of
	// the plugin can be cancelled part-way (every kind answers at once from
	// memory, say). Run logs it in place of the cancellation check.
	CancelNotApplicable string
	// CancelAfter is how long the long-running command runs before it is
	// cancelled, when it reports no progress first; 200 ms when 0. With
	// progress, it is cancelled at its first report.
	CancelAfter time.Duration
	// CancelWithin bounds the time from cancel to the plugin's result;
	// 5 s when 0.
	CancelWithin time.Duration
	// Panic is a command whose handler panics of its own accord (a test
	// plugin's kind). Most plugins have none: they set InjectPanic instead.
	Panic *Case
	// InjectPanic is a valid command of the plugin that the panic check runs
	// with its handler made to panic: the harness starts the plugin with
	// wire.EnvInjectPanic naming that one command's id, and the SDK's Server
	// panics in place of the kind's handler, under the same recover. It
	// checks that the binary serves through the SDK (a panic is a failed
	// result, logged, and the plugin keeps serving) without a kind that
	// panics in the binary. Run fails a plugin that sets none of Panic,
	// InjectPanic and PanicNotApplicable.
	InjectPanic *Case
	// PanicNotApplicable, when Panic and InjectPanic are nil, says why the
	// panic check cannot apply (a plugin not built on this SDK's Serve,
	// say). Run logs it in place of the check.
	PanicNotApplicable string
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
	// QuietWindow is how long, after a cancelled command's result, the
	// cancel check watches for work that goes on (progress the handler
	// reports after it returned); 250 ms when 0.
	QuietWindow time.Duration
}

// MaxProgressAfterCancel is how many progress reports a handler may make
// after its context ended: the one for the action already under way. A
// handler that reports more went on working after the cancel.
const MaxProgressAfterCancel = 1

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
	if o.QuietWindow <= 0 {
		o.QuietWindow = 250 * time.Millisecond
	}
	return o
}

// ErrNoCancelCase and ErrNoPanicCase are Run's failures for a plugin that
// does not say how its cancellation and its panics are checked: a check
// that was skipped in silence proved nothing.
var (
	ErrNoCancelCase = errors.New("kindtest: Options.LongRunning and Options.CancelNotApplicable are both unset: set LongRunning to a command that runs until cancelled (a fake tool that hangs, a server that never answers), or CancelNotApplicable to why no command of this plugin can be cancelled part-way")
	ErrNoPanicCase  = errors.New("kindtest: Options.Panic, Options.InjectPanic and Options.PanicNotApplicable are all unset: set InjectPanic to a valid command of the plugin (the SDK makes its handler panic), Panic to a command that panics of its own accord, or PanicNotApplicable to why the check cannot apply")
)

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
	// Neither check is skipped: a plugin says how it is checked, or why
	// the check cannot apply, and the harness says exactly what to set.
	t.Run("cancellation honoured", func(t *testing.T) {
		switch {
		case opts.LongRunning != nil:
			if err := p.CheckCancel(*opts.LongRunning, opts.CancelAfter, opts.CancelWithin); err != nil {
				t.Fatal(err)
			}
		case opts.CancelNotApplicable != "":
			t.Logf("not applicable: %s", opts.CancelNotApplicable)
		default:
			t.Fatal(ErrNoCancelCase)
		}
	})
	t.Run("panic becomes a failed result", func(t *testing.T) {
		if opts.Panic == nil && opts.InjectPanic == nil {
			if opts.PanicNotApplicable == "" {
				t.Fatal(ErrNoPanicCase)
			}
			t.Logf("not applicable: %s", opts.PanicNotApplicable)
			return
		}
		if opts.Panic != nil {
			if err := p.CheckPanic(*opts.Panic); err != nil {
				t.Fatal(err)
			}
		}
		if opts.InjectPanic != nil {
			if err := p.CheckInjectedPanic(*opts.InjectPanic); err != nil {
				t.Fatal(err)
			}
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
// cancelAfter, and requires the plugin's own cancelled result within within,
// and proof that the handler stopped its work: at most
// MaxProgressAfterCancel progress reports made after its context ended, and
// none after its result (watched for the Options.QuietWindow). A handler
// that reports progress and ignores the cancel fails here even when it ends
// within the bound and returns ctx.Err(). The proof needs a plugin of
// protocol 2 (this SDK on); for an older one only the outcome is checked.
func (p *Plugin) CheckCancel(c Case, cancelAfter, within time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progressed := make(chan struct{}, 1)
	type outcome struct {
		res kind.Result
		err error
		at  time.Time
	}
	// afterLock guards after, the reports the plugin marked as made after
	// the command's context ended.
	var afterLock sync.Mutex
	var after []string
	id := newCommandID()
	done := make(chan outcome, 1)
	go func() {
		res, err := p.execute(ctx, id, c.Kind, c.Payload, func(pr *pluginv1.Progress) {
			if pr.GetAfterCancel() {
				afterLock.Lock()
				after = append(after, fmt.Sprintf("[%d%%] %s", pr.GetPercent(), pr.GetMessage()))
				afterLock.Unlock()
			}
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
	afterLock.Lock()
	late := append([]string(nil), after...)
	afterLock.Unlock()
	if len(late) > MaxProgressAfterCancel {
		return fmt.Errorf("%s: the handler reported %d progress steps after the cancel (%s): it went on working; stop between actions when ctx is done",
			c.Kind, len(late), strings.Join(late, ", "))
	}
	if err := p.checkQuiet(id); err != nil {
		return fmt.Errorf("%s: %w", c.Kind, err)
	}
	return p.checkServing()
}

// checkQuiet watches the plugin's log for the quiet window for a progress
// report on command id made after its handler returned: work that goes on
// after its result (a goroutine the handler left running).
func (p *Plugin) checkQuiet(id string) error {
	deadline := time.NewTimer(p.quiet)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, line := range strings.Split(p.Logs(), "\n") {
			if strings.Contains(line, wire.LateProgressMessage) && strings.Contains(line, id) {
				return fmt.Errorf("the handler reported progress after its result, so its work goes on after it returned (%s): wait for what it started before returning", strings.TrimSpace(line))
			}
		}
		select {
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
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

// CheckInjectedPanic runs c with its handler made to panic (the plugin was
// started with Options.InjectPanic, so wire.EnvInjectPanic names the
// command's id): the result must be failed with reason panic, and the
// plugin must keep serving.
func (p *Plugin) CheckInjectedPanic(c Case) error {
	if p.injectPanicID == "" {
		return errors.New("the plugin was started without Options.InjectPanic: the harness injects a panic only into a plugin it started with it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := p.proc.Kind.Manifests(ctx, &pluginv1.ManifestsRequest{HostBrokerId: p.brokerID})
	if err != nil {
		return fmt.Errorf("Manifests: %w", err)
	}
	if !slices.Contains(resp.GetCapabilities(), wire.CapabilityInjectedPanic) {
		return fmt.Errorf("%s: the plugin's SDK (%s) cannot inject a panic (capabilities %v): build it on a newer SDK, or name a command that panics in Options.Panic", c.Kind, resp.GetSdkVersion(), resp.GetCapabilities())
	}
	res, err := p.execute(ctx, p.injectPanicID, c.Kind, c.Payload, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Kind, err)
	}
	if res.Status != kind.StatusFailed || res.Reason != kind.ReasonPanic {
		return fmt.Errorf("%s with an injected panic: got %s (reason %q: %s), want failed with reason %s; Options.InjectPanic must be a payload the kind's schema accepts",
			c.Kind, res.Status, res.Reason, res.Message, kind.ReasonPanic)
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
