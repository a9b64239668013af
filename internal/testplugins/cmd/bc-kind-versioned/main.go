// Command bc-kind-versioned is a test-only plugin built in several versions
// (-ldflags "-X main.version=2.0.0"), for upgrades: its kind versioned.hold
// writes the plugin's pid to startedFile, holds until releaseFile exists (or
// the cancel), and returns the version and pid that ran it, so a test can
// tell which process of which version ran a command across a reload.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// version is the plugin's version, set at build time.
var version = "1.0.0"

type payload struct {
	StartedFile string `json:"startedFile"`
	ReleaseFile string `json:"releaseFile"`
}

func hold(ctx context.Context, req kind.Request) (any, error) {
	var p payload
	if err := req.Command.Decode(&p); err != nil {
		return nil, err
	}
	if p.StartedFile != "" {
		tmp := p.StartedFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, p.StartedFile); err != nil {
			return nil, err
		}
	}
	out := map[string]any{"version": version, "pid": os.Getpid()}
	req.Progress.Report(0, "holding on "+version)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for p.ReleaseFile != "" {
		if _, err := os.Stat(p.ReleaseFile); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C:
		}
	}
	return out, nil
}

func main() {
	kind.Serve(kind.Kind{
		Manifest: kind.Manifest{
			Kind:          "versioned.hold",
			Lane:          kind.LaneControl,
			Timeout:       kind.Duration(2 * time.Minute),
			Roles:         []string{"node"},
			Flags:         kind.Flags{RetrySafe: true},
			APIRunnable:   true,
			PayloadSchema: json.RawMessage(`{"additionalProperties":false,"properties":{"releaseFile":{"type":"string"},"startedFile":{"type":"string"}},"type":"object"}`),
			Version:       version,
			Description:   "Hold until released and say which plugin version ran the command.",
			// Every version takes the others of its major version: the
			// control plane dispatches to a node upgraded before it.
			CompatibleVersions: "^" + strings.SplitN(version, ".", 2)[0],
		},
		Handler: kind.HandlerFunc(hold),
	})
}
