package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/version"
)

// cmdSelfCheck is what daemon.upgrade runs on a staged version before it
// activates it: the new binary loads the node's config, reads the running
// daemon's journal (a copy, since the running bcd holds the file lock) and
// starts its own plugins with their pins. Any failure exits 1 naming what
// failed, and the version is never activated.
func cmdSelfCheck(args []string, stdout, stderr io.Writer) error {
	fs, cf := flags("self-check", "[flags]", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if testhook.Is(testhook.FailSelfCheck) {
		return &exitError{code: 1, err: fmt.Errorf("self-check of %s failed: test hook %s", version.Version, testhook.FailSelfCheck)}
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("self-check: config: %w", err)}
	}
	if cfg.NodeID == "" {
		// The node id comes from the certificate at bcd run; the check
		// does not need it.
		cfg.NodeID = localNodeID
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("self-check: config: %w", err)}
	}
	if err := checkPluginDir(cfg.PluginDir); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("self-check: %w", err)}
	}
	records, err := checkJournal(cfg.StateDir)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("self-check: journal: %w", err)}
	}
	logger := newLogger(cfg, stderr)
	host := startPlugins(context.Background(), logger, cfg, nil, nil)
	defer host.Close()
	refused := host.Refused()
	for _, r := range refused {
		fmt.Fprintf(stderr, "bcd self-check: refused plugin %s: %v\n", orDir(r.Plugin), r.Err)
	}
	if len(refused) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("self-check: %d plugin(s) refused (their pins or their handshake)", len(refused))}
	}
	fmt.Fprintf(stdout, "self-check passed: bcd %s, %d kinds, %d unfinished journal records\n", version.Version, len(host.Manifests()), records)
	return nil
}

// checkJournal opens a copy of the journal in stateDir (its bbolt file and
// its write-ahead log) and reads its unfinished records, the ones this
// version's Recover will settle.
func checkJournal(stateDir string) (int, error) {
	src := filepath.Join(stateDir, journal.FileName)
	dir, err := os.MkdirTemp("", "bcd-self-check-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	// The write-ahead log holds the newest writes: the copy replays it.
	if found, err := journal.CopyFiles(stateDir, dir); err != nil || !found {
		return 0, err
	}
	j, err := journal.Open(hclog.NewNullLogger(), dir, journal.Options{})
	if err != nil {
		return 0, err
	}
	defer j.Close()
	if j.CorruptPath() != "" {
		return 0, fmt.Errorf("%s does not open in this version", src)
	}
	recs, err := j.Unfinished()
	if err != nil {
		return 0, err
	}
	return len(recs), nil
}
