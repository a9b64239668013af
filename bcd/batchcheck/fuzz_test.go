package batchcheck

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/truststore"
)

// FuzzDecodeLedger feeds arbitrary bytes as batches.json. decodeLedger
// never panics; what it takes re-encodes to a ledger it reads back the
// same; and Open on any file comes back with a checker that either holds
// the ledger or, when it does not decode, refuses every destructive
// command, never one that forgot what was consumed.
func FuzzDecodeLedger(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := &ledger{clock: at, leaves: map[leafKey]consumedLeaf{
		{"batch_1", 0}: {BatchID: "batch_1", LeafIndex: 0, CommandID: "cmd_1", NotAfter: at.Add(time.Hour)},
		{"batch_1", 7}: {BatchID: "batch_1", LeafIndex: 7, CommandID: "cmd_2", NotAfter: at.Add(time.Hour)},
	}, unbatched: []unbatchedUse{{CommandID: "cmd_u", At: at.Add(-time.Minute)}}}
	valid, err := seed.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"version":1,"clock":"2026-01-01T00:00:00Z","leaves":[],"unbatched":[]}`))
	f.Add([]byte(`{"version":1,"clock":"2026-01-01T00:00:00Z","leaves":[{"batchId":"b","leafIndex":1,"commandId":"c","notAfter":"2026-01-01T00:00:00Z"},{"batchId":"b","leafIndex":1,"commandId":"d","notAfter":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte{})
	store, err := truststore.Open(f.TempDir(), nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		led, err := decodeLedger(data)
		if err == nil {
			b, err := led.encode()
			if err != nil {
				t.Fatalf("a decoded ledger does not encode: %v", err)
			}
			again, err := decodeLedger(b)
			if err != nil {
				t.Fatalf("the re-encoded ledger does not decode: %v\n%s", err, b)
			}
			if !again.clock.Equal(led.clock) || len(again.leaves) != len(led.leaves) || len(again.unbatched) != len(led.unbatched) {
				t.Fatalf("the ledger changed on a round trip: %+v, then %+v", led, again)
			}
			for k, c := range led.leaves {
				if a, ok := again.leaves[k]; !ok || a.CommandID != c.CommandID || !a.NotAfter.Equal(c.NotAfter) {
					t.Fatalf("leaf %v changed on a round trip: %+v, then %+v", k, c, a)
				}
			}
		} else if !errors.Is(err, ErrLedgerMalformed) {
			t.Fatalf("a refused ledger's error is not ErrLedgerMalformed: %v", err)
		}

		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, oerr := Open(dir, Config{Store: store, NodeID: "node_fuzz"})
		if oerr != nil {
			t.Fatalf("Open failed on a damaged ledger: %v", oerr)
		}
		if err != nil {
			if c.broken == nil {
				t.Fatal("a ledger that does not decode was taken")
			}
			if code, _ := c.Consume(accept.Command{ID: "cmd_fuzz", Kind: "node.reboot"}, true, time.Now()); code != accept.UnbatchedLimit {
				t.Fatalf("an unreadable ledger let an unbatched destructive command through: %q", code)
			}
		}
	})
}
