// Command bcdcore_plugin is a test-only plugin for bcd's core tests
// (bcd/daemon, bcd/cmd/bcd). Its kinds count their runs in a file and hold
// until the test releases them, so a test can kill bcd mid-command, prove a
// duplicate did not run again, or fill a lane.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

type holdPayload struct {
	// CountFile gets one line per run: the run counter.
	CountFile string `json:"countFile"`
	// StartedFile is written when the run starts.
	StartedFile string `json:"startedFile"`
	// ReleaseFile, once it exists, lets the run finish.
	ReleaseFile string `json:"releaseFile"`
}

const holdSchema = `{"type":"object","properties":{"countFile":{"type":"string"},"startedFile":{"type":"string"},"releaseFile":{"type":"string"}},"additionalProperties":false}`

func manifest(name string, lane kind.Lane, flags kind.Flags) kind.Manifest {
	return kind.Manifest{
		Kind: name, Lane: lane, Timeout: kind.Duration(2 * time.Minute), Roles: []string{"node"},
		Flags: flags, PayloadSchema: json.RawMessage(holdSchema), Version: "0.1.0",
		Description: "bcd core test kind: counts runs and holds until released",
	}
}

// e2eSchema is holdSchema with its keys sorted, as a control plane that
// reads the manifest from a YAML or JSON file re-encodes it, so that both
// sides compute the same manifest digest.
const e2eSchema = `{"additionalProperties":false,"properties":{"countFile":{"type":"string"},"releaseFile":{"type":"string"},"startedFile":{"type":"string"}},"type":"object"}`

// runnable marks a manifest API-runnable, for the e2e kinds.
func runnable(m kind.Manifest) kind.Manifest {
	m.APIRunnable = true
	m.PayloadSchema = json.RawMessage(e2eSchema)
	return m
}

// shortTimeout gives a manifest a 3-second timeout.
func shortTimeout(m kind.Manifest) kind.Manifest {
	m.Timeout = kind.Duration(3 * time.Second)
	return m
}

// hold counts the run, says it started, and waits for the release file or
// the cancel, reporting what happened.
func hold(ctx context.Context, req kind.Request) (any, error) {
	var p holdPayload
	if err := req.Command.Decode(&p); err != nil {
		return nil, err
	}
	runs := 0
	if p.CountFile != "" {
		f, err := os.OpenFile(p.CountFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		_, werr := f.WriteString(req.Command.ID + "\n")
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(p.CountFile)
		if err != nil {
			return nil, err
		}
		runs = strings.Count(string(b), "\n")
	}
	if p.StartedFile != "" {
		if err := os.WriteFile(p.StartedFile, []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
			return nil, err
		}
	}
	req.Progress.Report(0, "holding")
	if p.ReleaseFile != "" {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := os.Stat(p.ReleaseFile); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return map[string]any{"runs": runs, "released": false}, ctx.Err()
			case <-tick.C:
			}
		}
	}
	req.Progress.Report(100, "released")
	return map[string]any{"runs": runs, "released": true}, nil
}

// hang is hold for a handler that ignores its deadline and any cancel: it
// returns only once released, so only the control plane's sweeper can time
// the command out while bcd cannot report.
func hang(_ context.Context, req kind.Request) (any, error) {
	return hold(context.Background(), req)
}

// reboot stands in for node.reboot: it asks for the reboot and returns; the
// new boot completes it.
func reboot(context.Context, kind.Request) (any, error) {
	return map[string]any{"requested": true}, nil
}

func main() {
	kind.Serve(
		kind.Kind{Manifest: manifest("bcdcore.hold", kind.LaneControl, kind.Flags{RetrySafe: true}), Handler: kind.HandlerFunc(hold)},
		kind.Kind{Manifest: manifest("bcdcore.holdonce", kind.LaneControl, kind.Flags{}), Handler: kind.HandlerFunc(hold)},
		kind.Kind{Manifest: manifest("bcdcore.bulk", kind.LaneBulk, kind.Flags{RetrySafe: true}), Handler: kind.HandlerFunc(hold)},
		kind.Kind{Manifest: manifest("bcdcore.reboot", kind.LaneControl, kind.Flags{SelfTerminating: true, Destructive: true}), Handler: kind.HandlerFunc(reboot)},
		// bcdcore.attested is hold for an attested kind: bcd signs its
		// outcome with the node key.
		kind.Kind{Manifest: manifest("bcdcore.attested", kind.LaneControl, kind.Flags{RetrySafe: true, Attested: true}), Handler: kind.HandlerFunc(hold)},
		// bcdcore.destroy is hold for a destructive kind that is not
		// self-terminating: once approver keys are configured it runs only
		// in an approved batch (or on the break-glass allowance), and its
		// record shows whether it ran.
		kind.Kind{Manifest: manifest("bcdcore.destroy", kind.LaneControl, kind.Flags{Destructive: true}), Handler: kind.HandlerFunc(hold)},
		// The e2e kinds are the same, runnable through commands.run, so the
		// end-to-end tests (e2e/) can register them with the control plane.
		kind.Kind{Manifest: runnable(manifest("e2e.hold", kind.LaneControl, kind.Flags{RetrySafe: true})), Handler: kind.HandlerFunc(hold)},
		kind.Kind{Manifest: runnable(manifest("e2e.holdonce", kind.LaneControl, kind.Flags{})), Handler: kind.HandlerFunc(hold)},
		kind.Kind{Manifest: runnable(manifest("e2e.reboot", kind.LaneControl, kind.Flags{SelfTerminating: true, Destructive: true})), Handler: kind.HandlerFunc(reboot)},
		// e2e.hangshort has a short timeout (3s), so the sweeper's deadline,
		// not_after plus the timeout, comes within a test's time.
		kind.Kind{Manifest: shortTimeout(runnable(manifest("e2e.hangshort", kind.LaneControl, kind.Flags{}))), Handler: kind.HandlerFunc(hang)},
	)
}
