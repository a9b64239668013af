// Command bc-kind-test is a test-only plugin whose kinds misbehave on request.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

func manifest(name, schema string) kind.Manifest {
	return kind.Manifest{
		Kind:          name,
		Lane:          kind.LaneControl,
		Timeout:       kind.Duration(time.Minute),
		Roles:         []string{"node"},
		Flags:         kind.Flags{RetrySafe: true},
		PayloadSchema: json.RawMessage(schema),
		Version:       "0.1.0",
	}
}

// writeFile writes atomically, so a test polling for it never reads half.
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

type sleepPayload struct {
	PidFile      string `json:"pidFile"`
	Steps        int    `json:"steps"`
	StepMs       int    `json:"stepMs"`
	IgnoreCancel bool   `json:"ignoreCancel"`
	// ReturnCtxErr, with IgnoreCancel, works through every step regardless
	// of the cancel and then returns ctx.Err(), so the SDK reports it
	// cancelled: a handler that looks as if it honoured the cancel.
	ReturnCtxErr bool `json:"returnCtxErr"`
	// Detach returns at once on the cancel but leaves the steps running in
	// a goroutine, still reporting progress: work that outlives its result.
	Detach bool `json:"detach"`
}

// sleep runs steps of stepMs each, reporting progress after each, and stops
// between steps when cancelled (unless told to misbehave), returning how
// many steps ran: the real outcome.
func sleep(ctx context.Context, req kind.Request) (any, error) {
	var p sleepPayload
	if err := req.Command.Decode(&p); err != nil {
		return nil, err
	}
	if p.PidFile != "" {
		if err := writeFile(p.PidFile, strconv.Itoa(os.Getpid())); err != nil {
			return nil, err
		}
	}
	step := time.Duration(p.StepMs) * time.Millisecond
	req.Progress.Report(0, "started")
	if p.Detach {
		go func() {
			for i := 1; i <= p.Steps; i++ {
				time.Sleep(step)
				req.Progress.Report(i*100/max(p.Steps, 1), fmt.Sprintf("detached step %d", i))
			}
		}()
		<-ctx.Done()
		return map[string]int{"steps": 0}, ctx.Err()
	}
	done := 0
	for done < p.Steps {
		if p.IgnoreCancel {
			time.Sleep(step)
		} else {
			select {
			case <-ctx.Done():
				return map[string]int{"steps": done}, ctx.Err()
			case <-time.After(step):
			}
		}
		done++
		req.Progress.Report(done*100/p.Steps, fmt.Sprintf("step %d", done))
	}
	if p.ReturnCtxErr {
		return map[string]int{"steps": done}, ctx.Err()
	}
	return map[string]int{"steps": done}, nil
}

// child starts a long sleep as a child process, writes "<child> <plugin>"
// pids to pidFile and waits for the cancel: killing the plugin must not
// orphan the child.
func child(ctx context.Context, req kind.Request) (any, error) {
	var p struct {
		PidFile string `json:"pidFile"`
	}
	if err := req.Command.Decode(&p); err != nil {
		return nil, err
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting child: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	if err := writeFile(p.PidFile, fmt.Sprintf("%d %d", cmd.Process.Pid, os.Getpid())); err != nil {
		return nil, err
	}
	req.Progress.Report(-1, "child started")
	<-ctx.Done()
	_ = cmd.Process.Kill()
	return nil, ctx.Err()
}

func panicky(context.Context, kind.Request) (any, error) {
	panic("test.panic was asked to panic")
}

// host reads everything bcd's Host service offers and returns it.
func host(ctx context.Context, req kind.Request) (any, error) {
	inv, at, err := req.Host.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	gen, spec, err := req.Host.NodeSpec(ctx)
	if err != nil {
		return nil, err
	}
	conds, err := req.Host.Conditions(ctx)
	if err != nil {
		return nil, err
	}
	if err := req.Host.PutInventory(ctx, json.RawMessage(`{"gpus":["put-by-plugin"]}`)); err != nil {
		return nil, err
	}
	return map[string]any{
		"inventory":   inv,
		"collectedAt": at,
		"generation":  gen,
		"spec":        spec,
		"conditions":  conds,
	}, nil
}

func env(context.Context, kind.Request) (any, error) {
	return map[string]any{"env": os.Environ(), "exe": filepath.Base(os.Args[0])}, nil
}

func noop(context.Context, kind.Request) (any, error) { return struct{}{}, nil }

func main() {
	kind.Serve(
		kind.Kind{Manifest: manifest("test.sleep", `{"type":"object","properties":{"pidFile":{"type":"string"},"steps":{"type":"integer","minimum":0},"stepMs":{"type":"integer","minimum":0},"ignoreCancel":{"type":"boolean"},"returnCtxErr":{"type":"boolean"},"detach":{"type":"boolean"}},"required":["steps"]}`), Handler: kind.HandlerFunc(sleep)},
		kind.Kind{Manifest: manifest("test.child", `{"type":"object","properties":{"pidFile":{"type":"string"}},"required":["pidFile"]}`), Handler: kind.HandlerFunc(child)},
		kind.Kind{Manifest: manifest("test.panic", `{"type":"object"}`), Handler: kind.HandlerFunc(panicky)},
		kind.Kind{Manifest: manifest("test.host", `{"type":"object"}`), Handler: kind.HandlerFunc(host)},
		kind.Kind{Manifest: manifest("test.env", `{"type":"object"}`), Handler: kind.HandlerFunc(env)},
		kind.Kind{Manifest: manifest("test.noop", `{"type":"object"}`), Handler: kind.HandlerFunc(noop)},
	)
}
