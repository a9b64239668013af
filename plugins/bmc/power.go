package bmc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// PowerResult is bmc.power's result.
type PowerResult struct {
	BMC     string `json:"bmc"`
	Machine string `json:"machine,omitempty"`
	Action  string `json:"action"`
	// Issued is what was sent to the BMC ("ForceRestart", "chassis power
	// cycle"), or "none" when the machine already was in the wanted state.
	Issued string `json:"issued,omitempty"`
	// Before is the state read before the action, After the last read.
	Before PowerState `json:"before,omitempty"`
	After  PowerState `json:"after,omitempty"`
	// Observed are the distinct states the verification read, in order.
	Observed []PowerState `json:"observed,omitempty"`
	// Verified is true once a later read agreed with the action.
	Verified bool `json:"verified"`
	// VerifiedAfterMillis is how long after the action the read agreed.
	VerifiedAfterMillis int64 `json:"verifiedAfterMillis,omitempty"`
	// Refused is the BMC's refusal, with the values it allows.
	Refused *NotAllowedError `json:"refused,omitempty"`
	Metadata
}

type powerPayload struct {
	BMC    string `json:"bmc"`
	Action string `json:"action"`
}

// wantState is the state a later read must show after action.
func wantState(action string) PowerState {
	if action == "off" || action == "soft" {
		return StateOff
	}
	return StateOn
}

func (p *Plugin) power(ctx context.Context, req kind.Request) (any, error) {
	var pl powerPayload
	if err := req.Command.Decode(&pl); err != nil {
		return nil, kind.Fail(ReasonBadPayload, "%v", err)
	}
	b, cred, err := p.target(ctx, req, pl.BMC)
	if err != nil {
		return nil, err
	}
	res := &PowerResult{BMC: b.ID, Machine: b.Machine, Action: pl.Action}
	want := wantState(pl.Action)
	// A cycle or reset of a machine that is off powers it on: the wanted
	// end state is the same, and a BMC refuses to cycle an off machine.
	action := pl.Action
	prov, md, closeProv, err := p.withProviders(ctx, b, cred, func(pctx context.Context, prov Provider) error {
		before, err := prov.PowerState(pctx)
		if err != nil {
			return fmt.Errorf("reading the power state: %w", err)
		}
		res.Before = before
		switch {
		case (action == "on" && before == StateOn) || ((action == "off" || action == "soft") && before == StateOff):
			res.Issued = "none"
			return nil
		case (action == "cycle" || action == "reset") && before == StateOff:
			action = "on"
		}
		issued, err := prov.Power(pctx, action)
		res.Issued = issued
		return err
	})
	defer closeProv()
	res.Metadata = md
	if err != nil {
		return p.providerFailure(res, &res.Refused, "power "+pl.Action, b.ID, err)
	}
	req.Progress.Report(-1, fmt.Sprintf("%s sent %s to %s; waiting for a read that shows %s", md.SuccessfulProvider, res.Issued, b.ID, want))
	// A cycle must be seen leaving On before it counts as done: a read that
	// still shows On right after the request proves nothing.
	needLeave := action == "cycle" && res.Issued != "none"
	start := time.Now()
	left := false
	err = p.poll(ctx, func(ctx context.Context) (bool, error) {
		st, err := prov.PowerState(ctx)
		if err != nil {
			return false, err
		}
		res.After = st
		if n := len(res.Observed); n == 0 || res.Observed[n-1] != st {
			res.Observed = append(res.Observed, st)
		}
		if st != StateOn {
			left = true
		}
		return st == want && (!needLeave || left), nil
	})
	if err != nil {
		msg := fmt.Sprintf("BMC %s (%s) last said %q after %s; wanted %s", b.ID, md.SuccessfulProvider, res.After, time.Since(start).Round(time.Millisecond), want)
		if needLeave && !left {
			msg += " after it first left On (a cycle that is never seen off is not proven)"
		}
		return nil, &kind.Failure{Reason: ReasonUnverified, Message: msg + ": " + err.Error(), Result: res}
	}
	res.Verified, res.VerifiedAfterMillis = true, time.Since(start).Milliseconds()
	req.Logger.Info("power action verified", "bmc", b.ID, "action", pl.Action, "issued", res.Issued, "provider", md.SuccessfulProvider, "after", res.After)
	return res, nil
}

// poll calls check every PollInterval until it returns true, the verify
// timeout passes or ctx ends. A read that fails is retried (a BMC that
// restarts its web server mid-cycle does that); the last error is kept.
func (p *Plugin) poll(ctx context.Context, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, p.Config.VerifyTimeout)
	defer cancel()
	t := time.NewTicker(p.Config.PollInterval)
	defer t.Stop()
	var lastErr error
	for {
		rctx, rcancel := context.WithTimeout(ctx, p.Config.ProviderTimeout)
		ok, err := check(rctx)
		rcancel()
		if ok {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("no agreeing read within %s (last read error: %w)", p.Config.VerifyTimeout, lastErr)
			}
			return fmt.Errorf("no agreeing read within %s", p.Config.VerifyTimeout)
		case <-t.C:
		}
	}
}

// providerFailure turns the providers' failure into the kind's: a BMC's
// refusal is bmc-not-allowed with its allowable values, anything else
// bmc-unreachable.
func (p *Plugin) providerFailure(res any, refused **NotAllowedError, what, id string, err error) (any, error) {
	var na *NotAllowedError
	if errors.As(err, &na) {
		*refused = na
		return nil, &kind.Failure{Reason: ReasonNotAllowed, Message: fmt.Sprintf("BMC %s refuses %s: %v", id, what, err), Result: res}
	}
	return nil, &kind.Failure{Reason: ReasonUnreachable, Message: fmt.Sprintf("BMC %s: %s: %v", id, what, err), Result: res}
}
